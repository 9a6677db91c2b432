// Loading the tuned kernels on demand keeps them out of the processes that never ask for them (the
// library and oneDNN's JIT code pages, their operator registrations): memoplan's stock planning
// and the budget load nothing more than libmemoplan_torch.so.
#include "kernel_library.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "planning/planning.h"

namespace memoplan::torch_ext {

std::string load_kernels(Kernels kernels) {
  if (kernels == Kernels::kStock || registered_kernels(kernels)) return {};
  static std::mutex mutex;  // one dlopen at a time: a second caller finds the kernels registered
  std::lock_guard<std::mutex> lock(mutex);
  if (registered_kernels(kernels)) return {};

  const std::string file = MEMOPLAN_TUNED_LIBRARY;  // libmemoplan_tuned.so.<major>
  std::vector<std::string> candidates;
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&load_kernels), &self) != 0 && self.dli_fname) {
    const std::string path = self.dli_fname;
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos) candidates.push_back(path.substr(0, slash + 1) + file);
  }
  candidates.push_back(file);

  std::string why;
  for (const std::string& candidate : candidates) {
    // Never closed: its operators and the registered rewrite must outlive every plan.
    if (dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      const char* error = dlerror();
      why += "\n  " + (error ? std::string(error) : candidate + ": not loaded");
      continue;
    }
    if (registered_kernels(kernels)) return {};
    why += "\n  " + candidate + ": loaded, but it registered no kernels \"" + name(kernels) + "\"";
  }
  return "memoplan: kernels \"" + std::string(name(kernels)) + "\" need " + file +
         ", which could not be loaded:" + why;
}

}  // namespace memoplan::torch_ext
