// KernelOptions (memoplan/torch/kernels.h): one atomic per setting, read on the tuned ops' paths
// without a lock; the environment's aliases read here once, at load, and nowhere else.
#include <atomic>
#include <cstdlib>
#include <string>

#include "memoplan/torch/kernels.h"
#include "tuned_support.h"

namespace memoplan::torch_ext {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

KernelOptions from_environment() {
  KernelOptions o;
  const std::string gemm = env("MEMOPLAN_GEMM");
  if (gemm == "memoplan") o.gemm = GemmSide::kMemoplan;
  if (gemm == "onednn") o.gemm = GemmSide::kOneDnn;
  const std::string winograd = env("MEMOPLAN_WINOGRAD");
  if (winograd == "0") o.winograd = WinogradChoice::kNever;
  if (winograd == "1") o.winograd = WinogradChoice::kAlways;
  if (winograd == "onednn") o.winograd = WinogradChoice::kOneDnn;
  const std::string region = env("MEMOPLAN_REGION_LAYOUT");
  if (region == "nchw") o.region_layout = RegionLayout::kNchw;
  if (region == "nhwc") o.region_layout = RegionLayout::kNhwc;
  if (region == "blocked") o.region_layout = RegionLayout::kBlocked;
  return o;
}

struct Settings {
  explicit Settings(const KernelOptions& o)
      : choice(o.choice),
        gemm(o.gemm),
        winograd(o.winograd),
        region_layout(o.region_layout),
        blocked_layout(o.blocked_layout) {}
  std::atomic<KernelChoice> choice;
  std::atomic<GemmSide> gemm;
  std::atomic<WinogradChoice> winograd;
  std::atomic<RegionLayout> region_layout;
  std::atomic<bool> blocked_layout;
};

Settings& settings() {
  static Settings s(from_environment());
  return s;
}

}  // namespace

KernelOptions kernel_options() {
  const Settings& s = settings();
  KernelOptions o;
  o.choice = s.choice.load();
  o.gemm = s.gemm.load();
  o.winograd = s.winograd.load();
  o.region_layout = s.region_layout.load();
  o.blocked_layout = s.blocked_layout.load();
  return o;
}

KernelOptions set_kernel_options(const KernelOptions& o) {
  const KernelOptions before = kernel_options();
  Settings& s = settings();
  s.choice.store(o.choice);
  s.gemm.store(o.gemm);
  s.winograd.store(o.winograd);
  s.region_layout.store(o.region_layout);
  s.blocked_layout.store(o.blocked_layout);
  tuned::resolutions_changed();  // what calls resolved under the old options
  return before;
}

KernelChoice tuned::choice() { return settings().choice.load(); }

}  // namespace memoplan::torch_ext
