// What the tuned-kernel tests share: comparing with aten's results, forcing a kernel choice for
// one test, and the plan options that turn the tuned kernels on.
#pragma once

#include <ATen/ATen.h>

#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"
#include "tuned_ops.h"

namespace memoplan::torch_ext::testing {

// max |got - want| / max |want|: the tolerance the tuned ops promise (1e-5).
inline double relative_difference(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).abs().max() / want.abs().max()).item<double>();
}

// Forces a kernel choice until the end of the scope, then measures again.
struct ChoiceGuard {
  explicit ChoiceGuard(KernelChoice c) { set_kernel_choice(c); }
  ~ChoiceGuard() { set_kernel_choice(KernelChoice::kMeasure); }
  ChoiceGuard(const ChoiceGuard&) = delete;
  ChoiceGuard& operator=(const ChoiceGuard&) = delete;
};

// Turns the blocked layout on or off for the graphs planned in the scope (kernels.h).
struct BlockedLayoutGuard {
  explicit BlockedLayoutGuard(bool on) : was_(set_blocked_layout(on)) {}
  ~BlockedLayoutGuard() { set_blocked_layout(was_); }
  BlockedLayoutGuard(const BlockedLayoutGuard&) = delete;
  BlockedLayoutGuard& operator=(const BlockedLayoutGuard&) = delete;

 private:
  bool was_;
};

inline PlanOptions tuned() {
  PlanOptions o;
  o.kernels = "tuned";
  return o;
}

}  // namespace memoplan::torch_ext::testing
