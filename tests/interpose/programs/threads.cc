// 32 threads, each running thousands of small passes at once: with explicit pass marks
// (`threads marks N`) or relying on the shim's automatic detection (`threads auto N`). Each thread
// checks that its live blocks never overlap and that every block keeps its pattern.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "program_check.h"

namespace {

constexpr int kThreads = 32;
constexpr int kChain = 8;  // allocations per pass; each lives until two more are made

// A sparse pattern (every 64th byte, and the first and last 64): thousands of passes stay cheap,
// and any overlap of two blocks still lands on a patterned byte of one of them.
void mark(char* p, size_t size, uint32_t seed) {
  for (size_t i = 0; i < size; i += (i < 64 || i + 64 >= size) ? 1 : 64) {
    p[i] = static_cast<char>(pattern_byte(seed, i));
  }
}
bool marked(const char* p, size_t size, uint32_t seed) {
  for (size_t i = 0; i < size; i += (i < 64 || i + 64 >= size) ? 1 : 64) {
    if (p[i] != static_cast<char>(pattern_byte(seed, i))) return false;
  }
  return true;
}

std::atomic<int> failures{0};

void run(int index, bool marks, int passes) {
  live_set live{};
  char* block[kChain] = {};
  size_t size[kChain];
  uint32_t seed[kChain];
  uint32_t next_seed = 1 + 1000000u * static_cast<uint32_t>(index);
  for (int pass = 0; pass < passes; ++pass) {
    if (marks) pass_begin();
    for (int i = 0; i < kChain; ++i) {
      size[i] = 4096 + 1024 * static_cast<size_t>(i) + 64 * static_cast<size_t>(index);
      seed[i] = next_seed++;
      block[i] = static_cast<char*>(malloc(size[i]));
      if (!block[i] || !live_set_add(&live, block[i], size[i])) {
        ++failures;
        return;
      }
      mark(block[i], size[i], seed[i]);
      if (i >= 2) {
        if (!marked(block[i - 2], size[i - 2], seed[i - 2])) ++failures;
        live_set_remove(&live, block[i - 2]);
        free(block[i - 2]);
      }
    }
    for (int i = kChain - 2; i < kChain; ++i) {
      if (!marked(block[i], size[i], seed[i])) ++failures;
      live_set_remove(&live, block[i]);
      free(block[i]);
    }
    if (marks) pass_end();
  }
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 3 && (!strcmp(argv[1], "marks") || !strcmp(argv[1], "auto")));
  CHECK(shim_loaded());
  const bool marks = !strcmp(argv[1], "marks");
  const int passes = std::stoi(argv[2]);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(run, t, marks, passes);
  for (std::thread& t : threads) t.join();
  if (failures) fprintf(stderr, "%d blocks overlapped or lost their pattern\n", failures.load());
  CHECK(failures == 0);
  return 0;
}
