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

void begin_packed_census(int64_t module) {
  const KernelSet* set = tuned_set.load(std::memory_order_acquire);
  if (set && set->begin_census) set->begin_census(module);
}

uint64_t end_packed_census(int64_t module) {
  const KernelSet* set = tuned_set.load(std::memory_order_acquire);
  return set && set->end_census ? set->end_census(module) : 0;
}

uint64_t packed_weight_bytes(int64_t module) {
  const KernelSet* set = tuned_set.load(std::memory_order_acquire);
  return set && set->packed_bytes ? set->packed_bytes(module) : 0;
}

void forget_packed_weights(int64_t module) {
  const KernelSet* set = tuned_set.load(std::memory_order_acquire);
  if (set && set->forget) set->forget(module);
}

std::string kernel_report() {
  const KernelSet* set = tuned_set.load(std::memory_order_acquire);
  return set && set->report ? set->report() : std::string();
}

}  // namespace memoplan::torch_ext
