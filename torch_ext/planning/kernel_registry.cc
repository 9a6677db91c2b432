// The kernel rewrite PlanOptions::kernels selects (planning.h). One slot, set by a static
// initializer of the library that provides the kernels: constant-initialized, so it is ready
// before any of them runs.
#include <atomic>

#include "planning.h"

namespace memoplan::torch_ext {
namespace {

std::atomic<KernelRewrite> tuned_rewrite{nullptr};  // constexpr constructor: constant-initialized

}  // namespace

void register_kernels(Kernels kernels, KernelRewrite rewrite) {
  if (kernels == Kernels::kTuned) tuned_rewrite.store(rewrite);
}

KernelRewrite registered_kernels(Kernels kernels) {
  return kernels == Kernels::kTuned ? tuned_rewrite.load() : nullptr;
}

}  // namespace memoplan::torch_ext
