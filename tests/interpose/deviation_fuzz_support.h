// The deviation fuzzer's parts (deviation_fuzz.cc has its command line and report): the state the
// worker threads share — live blocks of the whole process for the overlap check, mailboxes for
// frees on another thread, counters — and one worker's life with one random plan.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace memoplan::shim::fuzz {

enum Deviation : int {
  kSkipped,           // a planned allocation (and its free) left out
  kAdded,             // an extra allocation with a planned size, freed later in the pass
  kResized,           // a planned allocation made with another size
  kReordered,         // two consecutive allocations swapped
  kKeptAlive,         // a block's free left out: it lives into the next 1-3 passes
  kFreedElsewhere,    // a block freed by another worker thread
  kRealloc,           // a block realloc'ed to another size
  kExitedWithBlocks,  // a thread exited with blocks alive, handed to other threads
  kDeviationKinds,
};
const char* deviation_name(int kind);

struct Block {
  char* p = nullptr;
  size_t size = 0;
  uint64_t seed = 0;
};

void fill_pattern(const Block& block);
bool pattern_intact(const Block& block);

class Shared {
 public:
  Shared(int lanes, uint64_t target_passes, bool nulls_allowed)
      : target_(target_passes), nulls_allowed_(nulls_allowed), mailboxes_(lanes) {}
  bool done() const { return passes.load(std::memory_order_relaxed) >= target_; }
  int lanes() const { return static_cast<int>(mailboxes_.size()); }
  bool nulls_allowed() const { return nulls_allowed_; }

  // Adds a new block to the process's live blocks; counts an overlap with any of them.
  void track(const Block& block);
  void untrack(const Block& block);
  // Checks the block's pattern (counts a corruption), forgets it and frees it.
  void check_and_free(const Block& block);
  // Hands a live block to another lane's thread, which frees it at its next pass.
  void send(int lane, const Block& block);
  std::vector<Block> receive(int lane);

  std::atomic<uint64_t> passes{0}, blocks{0}, overlaps{0}, corruptions{0}, null_answers{0};
  std::atomic<uint64_t> deviations[kDeviationKinds] = {};

  void failure(const char* what, const void* p, size_t size);  // prints the first few

 private:
  const uint64_t target_;
  const bool nulls_allowed_;
  std::mutex live_mutex_;
  struct LiveBlock {
    size_t size;
    uint64_t seed;
  };
  std::map<uintptr_t, LiveBlock> live_;
  std::mutex mail_mutex_;
  std::vector<std::vector<Block>> mailboxes_;
  std::atomic<int> failures_printed_{0};
};

// One worker thread's life: a random pass from `seed`, profiled and planned by the engine, then
// replayed with deviations for `passes` passes (fewer when the shared target is reached).
void run_plan(Shared& shared, int lane, uint64_t seed, uint64_t passes);
// Frees what is left in every mailbox.
void drain_all(Shared& shared);

}  // namespace memoplan::shim::fuzz
