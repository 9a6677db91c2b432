// jemalloc's own statistics through mallctl, when jemalloc serves (or backs) malloc in this
// process: mapped/active bytes and the wait times of its mutexes (the thesis's lock-contention
// measurement). Found with dlsym, so benchmarks run unchanged under any other allocator.
#ifndef MEMOPLAN_BENCH_JEMALLOC_STATS_H_
#define MEMOPLAN_BENCH_JEMALLOC_STATS_H_

#include <cstddef>
#include <cstdint>

namespace memoplan::bench {

// Mutex counters summed over every jemalloc mutex: the global ones (ctl, background threads, ...),
// each arena's (large, extents, decay, base, tcache list, ...) and every bin's, all arenas merged.
struct JemallocMutexTotals {
  uint64_t ops = 0;          // lock acquisitions
  uint64_t waits = 0;        // acquisitions that had to wait (spin or block)
  uint64_t wait_ns = 0;      // total time spent waiting
  uint64_t max_wait_ns = 0;  // the longest single wait (a maximum, not a sum)
  JemallocMutexTotals operator-(const JemallocMutexTotals& earlier) const;
};

struct JemallocMemory {
  uint64_t mapped = 0;  // bytes in chunks mapped by the allocator (stats.mapped)
  uint64_t active = 0;  // bytes in pages backing live allocations (stats.active)
};

class JemallocStats {
 public:
  JemallocStats();  // looks mallctl up; available() says whether it was found and answers
  bool available() const { return mallctl_ != nullptr; }

  // Both refresh jemalloc's statistics epoch first. Zeros when not available.
  JemallocMemory memory() const;
  JemallocMutexTotals mutexes() const;

 private:
  using Mallctl = int (*)(const char*, void*, std::size_t*, void*, std::size_t);
  void refresh() const;
  bool read_u64(const char* name, uint64_t* value) const;
  void add_mutex(const char* prefix, JemallocMutexTotals* totals) const;

  Mallctl mallctl_ = nullptr;
};

}  // namespace memoplan::bench

#endif  // MEMOPLAN_BENCH_JEMALLOC_STATS_H_
