// LibTorch's TensorExpr fuser on the CPU: whether it is on (tensorExprFuserEnabled, which
// PYTORCH_TENSOREXPR overrides) and whether this LibTorch fuses on the CPU at all (canFuseOnCPU:
// 1.13 no, unless overridden; Debian's 2.6 yes). canFuseOnCPU is exported by libtorch_cpu (1.13
// and 2.x) but declared in codegen/fuser/interface.h, which Debian's libtorch-dev does not ship:
// declared here, once, for memory min's rewrite and `memoplan run`'s report.
#pragma once

#include <torch/csrc/jit/passes/tensorexpr_fuser.h>

namespace torch::jit {
TORCH_API bool canFuseOnCPU();
}  // namespace torch::jit
