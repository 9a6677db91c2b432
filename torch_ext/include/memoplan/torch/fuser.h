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
TORCH_API void overrideCanFuseOnCPU(bool value);
}  // namespace torch::jit

namespace memoplan::torch_ext {

// Whether this LibTorch fuses on the CPU when left alone (its canFuseOnCPU before set_fuser).
inline bool fuses_on_cpu_by_default() {
  static const bool initial = torch::jit::canFuseOnCPU();
  return initial;
}

// Whether the TensorExpr fuser may fuse the CPU graphs run now.
inline bool fusing_on_cpu() {
  return torch::jit::tensorExprFuserEnabled() && torch::jit::canFuseOnCPU();
}

// Off unless the user asks (--fuser): the plan's marks (one before each allocating node) keep a
// planned graph's ops apart, so only an unplanned copy would fuse, and its bits then differ from
// the plan's in the last places (regnet_y on 2.6: 5.6e-9); and LibTorch 2.6 compiles some traced
// graphs' groups with LLVM for over ten minutes (densenet121, vit_b_32). Off means fusing nothing
// on the CPU, with the fuser's pass left on: with that pass off, the profiling executor keeps its
// prim::profile nodes in the optimized graph and runs each one's type recording in every pass
// (traced shufflenet_v2 at 128x128: 210 of them, 0.2 ms of a 1.5 ms tuned pass). PYTORCH_TENSOREXPR
// still wins over either setting.
inline void set_fuser(bool on) {
  const bool initial = fuses_on_cpu_by_default();
  torch::jit::setTensorExprFuserEnabled(true);
  torch::jit::overrideCanFuseOnCPU(on && initial);
}

}  // namespace memoplan::torch_ext
