// AOTInductor packages (.pt2: torch.export, then torch._inductor.aoti_compile_and_package), the
// format PyTorch 2.x documents for C++ deployment. Loading them needs LibTorch >= 2.6
// (torch::inductor::AOTIModelPackageLoader); memoplan's programs run TorchScript files only so far
// (issue 55). No torch headers here.
#pragma once

#include <string>
#include <string_view>

namespace memoplan::torch_ext {

// Whether `path` names an AOTInductor package (its extension is .pt2).
bool is_aoti_package(std::string_view path);
// Why this build cannot run the package at `path`, in a line for the user: the LibTorch version it
// was built with, and what to use instead.
std::string aoti_package_unsupported(const std::string& path);

}  // namespace memoplan::torch_ext
