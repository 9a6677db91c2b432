// Threads that come and go, as in a server with a thread per request: 60 generations of 4 threads
// (and, with `wide`, one generation of 64 at once). Each thread runs planned passes, then hands
// the blocks of its last pass to the next generation and exits; those blocks are freed by other
// threads after their owner is gone (the free that once could touch the exited owner's freed
// state). Every block keeps its pattern, and the process's RSS stays flat across generations.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "program_check.h"

namespace {

constexpr int kChain = 8;    // allocations per pass
constexpr int kPasses = 12;  // per thread: warm-up, profile, replay
constexpr int kHanded = 4;   // blocks of the last pass handed on

struct Handed {
  char* p;
  size_t size;
  uint32_t seed;
};

std::mutex handed_mutex;
std::vector<Handed> handed;  // from the previous generation, then this one's
std::atomic<int> failures{0};

void fill(char* p, size_t size, uint32_t seed) {
  for (size_t i = 0; i < size; i += 64) p[i] = static_cast<char>(pattern_byte(seed, i));
}
bool intact(const char* p, size_t size, uint32_t seed) {
  for (size_t i = 0; i < size; i += 64) {
    if (p[i] != static_cast<char>(pattern_byte(seed, i))) return false;
  }
  return true;
}

void worker(int index, uint32_t seed_base) {
  std::vector<Handed> mine;
  {  // free what the previous generation handed on: its owners have exited
    std::lock_guard<std::mutex> lock(handed_mutex);
    mine.swap(handed);
  }
  for (const Handed& h : mine) {
    if (!intact(h.p, h.size, h.seed)) ++failures;
    free(h.p);
  }
  uint32_t seed = seed_base;
  for (int pass = 0; pass < kPasses; ++pass) {
    pass_begin();
    char* block[kChain];
    size_t size[kChain];
    for (int i = 0; i < kChain; ++i) {
      size[i] = 8192 + 4096 * static_cast<size_t>(i) + 64 * static_cast<size_t>(index % 4);
      block[i] = static_cast<char*>(malloc(size[i]));
      if (!block[i]) {
        ++failures;
        return;
      }
      fill(block[i], size[i], seed + i);
    }
    for (int i = 0; i < kChain; ++i) {
      if (!intact(block[i], size[i], seed + i)) ++failures;
      if (pass + 1 == kPasses && i < kHanded) {
        std::lock_guard<std::mutex> lock(handed_mutex);
        handed.push_back({block[i], size[i], seed + static_cast<uint32_t>(i)});
      } else {
        free(block[i]);
      }
    }
    pass_end();
    seed += kChain;
  }
}

long rss_kib() {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

void generation(int threads, int number) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(worker, t, 1000000u * static_cast<uint32_t>(number) + 1000u * t);
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(shim_loaded());
  const bool wide = argc > 1 && std::string(argv[1]) == "wide";
  if (wide) generation(64, 0);  // 64 threads at once: every slab of the default threads:64
  long rss_after_warmup = 0;
  for (int g = 0; g < 60; ++g) {
    generation(4, g + 1);
    if (g == 9) rss_after_warmup = rss_kib();
  }
  const long rss_end = rss_kib();
  for (const Handed& h : handed) {
    if (!intact(h.p, h.size, h.seed)) ++failures;
    free(h.p);
  }
  fprintf(stderr, "thread_churn: RSS after 10 generations %ld KiB, after 60 %ld KiB\n",
          rss_after_warmup, rss_end);
  CHECK(failures.load() == 0);
  CHECK(rss_end <= rss_after_warmup + 8 * 1024);  // flat: no state kept per exited thread
  return 0;
}
