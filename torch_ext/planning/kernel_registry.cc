// The kernel set PlanOptions::kernels selects (planning.h). One slot, set by a static initializer
// of the library that provides the kernels: constant-initialized, so it is ready before any of
// them runs.
#include <atomic>

#include "memoplan/torch/plan.h"
#include "planning.h"

namespace memoplan::torch_ext {
namespace {

std::atomic<const KernelSet*> tuned_set{nullptr};  // constexpr constructor: constant-initialized

}  // namespace

void register_kernels(Kernels kernels, const KernelSet* set) {
  if (kernels == Kernels::kTuned) tuned_set.store(set, std::memory_order_release);
}

KernelRewrite registered_kernels(Kernels kernels) {
  if (kernels != Kernels::kTuned) return nullptr;
  const KernelSet* set = tuned_set.load(std::memory_order_acquire);
  return set ? set->rewrite : nullptr;
}

std::string kernel_report() {
  const KernelSet* set = tuned_set.load(std::memory_order_acquire);
  return set && set->report ? set->report() : std::string();
}

}  // namespace memoplan::torch_ext
