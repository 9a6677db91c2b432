// LibTorch's TensorExpr fuser on the CPU: whether it is on (tensorExprFuserEnabled, which
// PYTORCH_TENSOREXPR overrides) and whether this LibTorch fuses on the CPU at all (canFuseOnCPU:
// 1.13 no, unless overridden; Debian's 2.6 yes). canFuseOnCPU is exported by libtorch_cpu (1.13
// and 2.x) but declared in codegen/fuser/interface.h, which Debian's libtorch-dev does not ship:
// declared here, once, for memory min's rewrite and `memoplan run`'s report. set_fuser: the one
// switch for the models memoplan owns (`memoplan run`'s copies, memoplan-serve's models).
#pragma once

#include <torch/csrc/jit/passes/tensorexpr_fuser.h>

namespace torch::jit {
TORCH_API bool canFuseOnCPU();
}  // namespace torch::jit

namespace memoplan::torch_ext {

// Off unless the user asks (--fuser): the plan's marks (one before each allocating node) keep a
// planned graph's ops apart, so only an unplanned copy would fuse, and its bits then differ from
// the plan's in the last places (regnet_y on 2.6: 5.6e-9); and LibTorch 2.6 compiles some traced
// graphs' groups with LLVM for over ten minutes (densenet121, vit_b_32). PYTORCH_TENSOREXPR still
// wins over either setting.
inline void set_fuser(bool on) { torch::jit::setTensorExprFuserEnabled(on); }

}  // namespace memoplan::torch_ext
