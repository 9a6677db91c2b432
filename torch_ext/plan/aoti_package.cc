#include "memoplan/torch/aoti_package.h"

#include <torch/version.h>

namespace memoplan::torch_ext {

bool is_aoti_package(std::string_view path) {
  constexpr std::string_view kExtension = ".pt2";
  return path.size() > kExtension.size() &&
         path.substr(path.size() - kExtension.size()) == kExtension;
}

std::string aoti_package_unsupported(const std::string& path) {
  const std::string built = "this memoplan is built with LibTorch " TORCH_VERSION;
#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 6)
  return path + ": an AOTInductor package (.pt2) needs PyTorch >= 2.6, and " + built +
         " (Debian 13's is 2.6: scripts/debian13.sh); a TorchScript file (torch.jit.trace or "
         "torch.jit.script, then .save) runs here";
#else
  return path + ": " + built +
         ", but running an AOTInductor package (.pt2) is not built yet (issue 55); save the model "
         "as TorchScript (torch.jit.trace or torch.jit.script, then .save), or preload the shim "
         "(libmemoplan_preload.so), which plans .pt2 packages run from Python";
#endif
}

}  // namespace memoplan::torch_ext
