// Flushing the CPU caches between timed calls, so that an op is measured as a pass runs it when
// the model's weights do not fit the last-level cache: each layer's weights come from memory,
// not from the previous call. No torch; used by tuned::time_both.
#pragma once

#include <cstddef>

namespace memoplan::torch_ext::tuned {

// The last-level data cache of cpu0 in bytes (sysfs; else sysconf; else 32 MiB).
size_t last_level_cache_bytes();

// A buffer of twice the last-level cache (at most 128 MiB), written once when made; evict() reads
// it through, which leaves none of what was cached before. Unmapped when destroyed: it costs
// memory only while a measurement runs.
class CacheEvictor {
 public:
  CacheEvictor();
  ~CacheEvictor();
  CacheEvictor(const CacheEvictor&) = delete;
  CacheEvictor& operator=(const CacheEvictor&) = delete;
  void evict();
  size_t bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace memoplan::torch_ext::tuned
