// What the extension's tests share beside the tuned tests' (tuned/tuned_test_support.h) and
// resident.h: a module's forward on one tensor.
#pragma once

#include <torch/script.h>

namespace memoplan::torch_ext::testing {

inline at::Tensor run(torch::jit::Module& m, const at::Tensor& x) {
  return m.forward({x}).toTensor();
}

}  // namespace memoplan::torch_ext::testing
