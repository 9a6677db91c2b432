// The kernel rewrites PlanOptions::kernels and ::memory select (planning.h), and the options'
// names.
#include <mutex>
#include <optional>
#include <string_view>

#include "planning.h"

namespace memoplan::torch_ext {
namespace {

struct Registry {
  std::mutex mutex;
  KernelRewrite tuned = nullptr;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: registered from static initializers
  return *r;
}

}  // namespace

const char* name(Kernels kernels) { return kernels == Kernels::kTuned ? "tuned" : "stock"; }
const char* name(Memory memory) { return memory == Memory::kMin ? "min" : "offset"; }

std::optional<Kernels> parse_kernels(std::string_view text) {
  if (text == "stock") return Kernels::kStock;
  if (text == "tuned") return Kernels::kTuned;
  return std::nullopt;
}

std::optional<Memory> parse_memory(std::string_view text) {
  if (text == "offset") return Memory::kOffset;
  if (text == "min") return Memory::kMin;
  return std::nullopt;
}

void register_kernels(Kernels kernels, KernelRewrite rewrite) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (kernels == Kernels::kTuned) r.tuned = rewrite;
}

KernelRewrite registered_kernels(Kernels kernels) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return kernels == Kernels::kTuned ? r.tuned : nullptr;
}

}  // namespace memoplan::torch_ext
