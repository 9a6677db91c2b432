// Samples the process's memory every few milliseconds on a thread of its own while a benchmark
// phase runs: the resident set (/proc/self/statm) and, under jemalloc, its mapped and active
// bytes. Gives the average over the timed passes and, when asked, every sample (memory over
// time).
#ifndef MEMOPLAN_BENCH_MEMORY_SAMPLER_H_
#define MEMOPLAN_BENCH_MEMORY_SAMPLER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "jemalloc_stats.h"

namespace memoplan::bench {

struct MemorySample {
  double t_ms = 0;     // since start()
  bool timed = false;  // taken while the timed passes ran
  uint64_t rss_bytes = 0;
  JemallocMemory jemalloc;
};

struct MemoryAverages {
  double rss_bytes = 0, jemalloc_mapped = 0, jemalloc_active = 0;
  size_t samples = 0;  // timed samples averaged
};

class MemorySampler {
 public:
  // period_ms <= 0: no thread, no samples (averages stay 0).
  MemorySampler(const JemallocStats& jemalloc, int period_ms);
  ~MemorySampler();
  MemorySampler(const MemorySampler&) = delete;
  MemorySampler& operator=(const MemorySampler&) = delete;

  void start();
  void set_timed(bool timed) { timed_.store(timed, std::memory_order_relaxed); }
  void stop();  // joins the thread; samples() and averages() are valid afterwards

  const std::vector<MemorySample>& samples() const { return samples_; }
  MemoryAverages averages() const;

 private:
  void run();

  const JemallocStats& jemalloc_;
  const int period_ms_;
  std::atomic<bool> running_{false}, timed_{false};
  std::chrono::steady_clock::time_point start_;
  std::vector<MemorySample> samples_;
  std::thread thread_;
};

// The resident set in bytes, from /proc/self/statm; 0 when it cannot be read.
uint64_t resident_bytes();

}  // namespace memoplan::bench

#endif  // MEMOPLAN_BENCH_MEMORY_SAMPLER_H_
