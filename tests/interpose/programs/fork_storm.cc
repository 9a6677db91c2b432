// fork while other threads run passes: 4 threads run planned passes without pause (and hand
// blocks to each other) while the main thread forks 200 times. Each child frees blocks that
// belonged to threads that did not come along, runs planned passes of its own and checks every
// pattern; the parent checks that every child exited cleanly. Each pass's first block is asked
// for at a different stack depth, so the shim unwinds the stack (libunwind, with its own locks)
// for most passes: a fork that catches a thread unwinding must not leave the child stuck at its
// first unwind (an alarm turns a stuck child into a failure).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "program_check.h"

namespace {

constexpr int kWorkers = 4;
constexpr int kForks = 200;
constexpr int kChain = 8;

std::atomic<bool> stop{false};
std::mutex handed_mutex;
std::vector<std::pair<char*, uint32_t>> handed;  // blocks one worker gives to any other
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

// malloc(size) from `depth` frames further down the stack: the same call path (at the shim's
// callsite depth) from another stack pointer, which its call-site cache does not know.
__attribute__((noinline)) char* allocate_deeper(size_t size, unsigned depth) {
  if (depth == 0) return static_cast<char*>(malloc(size));
  char* p = allocate_deeper(size, depth - 1);
  asm volatile("" : : "r"(p) : "memory");  // not a tail call: each level keeps its frame
  return p;
}

// One planned pass: kChain blocks, each freed two allocations later; the first one handed on
// (`hand_on`: the child, whose copy of the mutex may be held by a thread that did not come along,
// frees it instead).
void one_pass(int index, uint32_t& seed, bool hand_on = true) {
  pass_begin();
  char* block[kChain];
  for (int i = 0; i < kChain; ++i) {
    const size_t size = BIG + 4096 * static_cast<size_t>(i) + 64 * static_cast<size_t>(index);
    block[i] = i == 0 ? allocate_deeper(size, 8 + (seed * 2654435761u) % 4096) : static_cast<char*>(malloc(size));
    if (!block[i]) {
      ++failures;
      return;
    }
    fill(block[i], BIG, seed + i);
    if (i >= 2 && i - 2 != 0) {
      if (!intact(block[i - 2], BIG, seed + i - 2)) ++failures;
      free(block[i - 2]);
    }
  }
  if (!hand_on) {
    if (!intact(block[0], BIG, seed)) ++failures;
    free(block[0]);
  } else {
    std::lock_guard<std::mutex> lock(handed_mutex);
    handed.emplace_back(block[0], seed);
    if (handed.size() > 64) {  // free someone else's block (a remote free)
      auto [p, s] = handed.front();
      handed.erase(handed.begin());
      if (!intact(p, BIG, s)) ++failures;
      free(p);
    }
  }
  for (int i = kChain - 2; i < kChain; ++i) {
    if (!intact(block[i], BIG, seed + i)) ++failures;
    free(block[i]);
  }
  pass_end();
  seed += kChain;
}

void worker(int index) {
  uint32_t seed = 1000000u * static_cast<uint32_t>(index + 1);
  while (!stop.load(std::memory_order_relaxed)) one_pass(index, seed);
}

// The child: only this thread came along. Frees the handed blocks (their owners are gone), runs
// passes of its own, exits.
[[noreturn]] void child() {
  std::vector<std::pair<char*, uint32_t>> mine;
  // The vector is consistent only if no thread was changing it at the fork (one that did not come
  // along may hold the mutex for ever: then leave it).
  if (handed_mutex.try_lock()) {
    mine.swap(handed);
    handed_mutex.unlock();
  }
  for (auto [p, s] : mine) {
    if (!intact(p, BIG, s)) _exit(3);
    free(p);
  }
  uint32_t seed = 500000;
  for (int pass = 0; pass < 8; ++pass) one_pass(7, seed, /*hand_on=*/false);
  _exit(failures.load() == 0 ? 0 : 4);
}

}  // namespace

int main() {
  CHECK(shim_loaded());
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; ++i) workers.emplace_back(worker, i);
  usleep(20000);  // let them reach replay
  int children_failed = 0;
  for (int f = 0; f < kForks; ++f) {
    const pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) child();
    // A child stuck on a lock that a thread which did not come along held (libunwind's blocks
    // every signal while it waits: no alarm in the child would fire) fails after 10 s.
    int status = 0;
    pid_t done = 0;
    for (int waited_ms = 0; (done = waitpid(pid, &status, WNOHANG)) == 0 && waited_ms < 10000;
         ++waited_ms) {
      usleep(1000);
    }
    if (done == 0) {
      fprintf(stderr, "fork_storm: child %d is stuck after 10 s\n", f);
      kill(pid, SIGKILL);
      CHECK(waitpid(pid, &status, 0) == pid);
    }
    CHECK(done >= 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork_storm: child %d ended with status %d\n", f, status);
      ++children_failed;
    }
    usleep(2000);
  }
  stop = true;
  for (std::thread& t : workers) t.join();
  for (auto [p, s] : handed) {
    if (!intact(p, BIG, s)) ++failures;
    free(p);
  }
  CHECK(children_failed == 0);
  CHECK(failures.load() == 0);
  return 0;
}
