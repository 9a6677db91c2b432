// The kernel rewrites PlanOptions::kernels selects by name (planning.h).
#include <mutex>
#include <utility>
#include <vector>

#include "planning.h"

namespace memoplan::torch_ext {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::pair<std::string, KernelRewrite>> rewrites;
  KernelRewrite memory_min = nullptr;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: registered from static initializers
  return *r;
}

}  // namespace

void register_kernels(const std::string& name, KernelRewrite rewrite) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& [existing, fn] : r.rewrites) {
    if (existing == name) {
      fn = rewrite;
      return;
    }
  }
  r.rewrites.emplace_back(name, rewrite);
}

KernelRewrite registered_kernels(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& [existing, fn] : r.rewrites) {
    if (existing == name) return fn;
  }
  return nullptr;
}

std::string kernel_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::string names = "stock";
  for (const auto& entry : r.rewrites) names += " or " + entry.first;
  return names;
}

void register_memory_min_rewrite(KernelRewrite rewrite) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.memory_min = rewrite;
}

KernelRewrite memory_min_rewrite() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.memory_min;
}

}  // namespace memoplan::torch_ext
