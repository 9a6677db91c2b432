#include "allocator_info.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <link.h>

#include <cstring>

namespace memoplan::bench {

std::vector<std::string> malloc_chain() {
  std::vector<std::string> objects;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name && info->dlpi_name[0]) {
          static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
        }
        return 0;
      },
      &objects);
  std::vector<std::string> chain;
  for (const std::string& name : objects) {
    void* handle = dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    Dl_info where{};
    void* symbol = dlsym(handle, "malloc");
    if (symbol && dladdr(symbol, &where) && where.dli_fname && name == where.dli_fname) {
      const char* slash = strrchr(name.c_str(), '/');
      chain.push_back(slash ? slash + 1 : name);
    }
    dlclose(handle);
  }
  return chain;
}

std::string malloc_chain_text() {
  std::string chain;
  for (const std::string& object : malloc_chain()) chain += (chain.empty() ? "" : " -> ") + object;
  return chain;
}

std::string allocator_versions() {
  std::string out;
  if (dlsym(RTLD_DEFAULT, "memoplan_pass_begin")) out += " memoplan-shim";
  if (dlsym(RTLD_DEFAULT, "memoplan_bench_malloc_counts")) out += " malloc-counter";
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  if (auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"))) {
    const char* version = nullptr;
    size_t length = sizeof version;
    if (mallctl("version", &version, &length, nullptr, 0) == 0 && version) {
      out += std::string(" jemalloc-") + version;
    } else {
      out += " jemalloc";
    }
  }
  using TcVersion = const char* (*)(int*, int*, const char**);
  if (auto tc_version = reinterpret_cast<TcVersion>(dlsym(RTLD_DEFAULT, "tc_version"))) {
    int major = 0, minor = 0;
    const char* patch = nullptr;
    out += std::string(" ") + tc_version(&major, &minor, &patch);
  }
  using MiVersion = int (*)();
  if (auto mi_version = reinterpret_cast<MiVersion>(dlsym(RTLD_DEFAULT, "mi_version"))) {
    out += " mimalloc-" + std::to_string(mi_version());
  }
  out += std::string(" glibc-") + gnu_get_libc_version();
  return out.substr(1);
}

}  // namespace memoplan::bench
