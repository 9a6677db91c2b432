#include "memory_sampler.h"

#include <unistd.h>

#include <cstdio>

namespace memoplan::bench {

uint64_t resident_bytes() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (!statm) return 0;
  unsigned long long size = 0, resident = 0;
  const int read = std::fscanf(statm, "%llu %llu", &size, &resident);
  std::fclose(statm);
  return read == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

MemorySampler::MemorySampler(const JemallocStats& jemalloc, int period_ms)
    : jemalloc_(jemalloc), period_ms_(period_ms) {}

MemorySampler::~MemorySampler() { stop(); }

void MemorySampler::start() {
  if (period_ms_ <= 0 || running_.load()) return;
  samples_.clear();
  // Reserved up front: the sampler should not allocate while the passes run.
  samples_.reserve(1 << 16);
  start_ = std::chrono::steady_clock::now();
  running_.store(true);
  thread_ = std::thread([this] { run(); });
}

void MemorySampler::stop() {
  if (!thread_.joinable()) return;
  running_.store(false);
  thread_.join();
}

void MemorySampler::run() {
  while (running_.load(std::memory_order_relaxed)) {
    MemorySample s;
    s.t_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
                 .count();
    s.timed = timed_.load(std::memory_order_relaxed);
    s.rss_bytes = resident_bytes();
    s.jemalloc = jemalloc_.memory();
    if (samples_.size() < samples_.capacity()) samples_.push_back(s);
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
  }
}

MemoryAverages MemorySampler::averages() const {
  MemoryAverages a;
  for (const MemorySample& s : samples_) {
    if (!s.timed) continue;
    a.rss_bytes += s.rss_bytes;
    a.jemalloc_mapped += s.jemalloc.mapped;
    a.jemalloc_active += s.jemalloc.active;
    ++a.samples;
  }
  if (a.samples) {
    a.rss_bytes /= a.samples;
    a.jemalloc_mapped /= a.samples;
    a.jemalloc_active /= a.samples;
  }
  return a;
}

}  // namespace memoplan::bench
