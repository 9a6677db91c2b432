#include "process_stats.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "memoplan/process_status.h"

namespace memoplan::bench {

long status_kib(const char* field) {
  const uint64_t bytes = status_bytes(field);
  return bytes ? static_cast<long>(bytes / 1024) : -1;
}

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5" << std::flush;
  return static_cast<bool>(clear);
}

int limit_blas_threads() {
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!set || !get) return 0;
  set(1);
  return get();
}

double percentile(const std::vector<double>& sorted, double p) {
  const size_t rank = static_cast<size_t>(p / 100.0 * sorted.size() + 0.999999);
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

}  // namespace memoplan::bench
