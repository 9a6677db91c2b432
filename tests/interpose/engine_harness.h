// Drives the shim's engine directly (no preloading): a Heap runs scripted passes of allocations
// and frees on the calling thread, writes a distinct byte pattern into every block, and fails the
// test the moment two live blocks share a byte or a block's pattern changes under it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine.h"
#include "options.h"
#include "stats.h"

namespace memoplan::shim::testing {

// Where a pointer came from: the fallback allocator, a tag slot (a profiled allocation) or a
// thread's slab (a planned one).
enum class Origin { kFallback, kTag, kSlab };
Origin origin_of(const void* p);
const char* to_string(Origin origin);

// The options the engine runs with; initializes the engine.
const Options& engine_options();

// The index of the first pass a thread serves from its plan under engine_options(): its profiled
// passes and two more.
uint64_t first_steady_pass();

// False when the engine runs unplanned for the whole process: mode:off, or it could not reserve
// its address space (16 TiB of tag slots, more than ThreadSanitizer lets a program map).
bool engine_plans();

// Engine tests need an engine that plans. When it cannot (its address space could not be
// reserved), they skip with a warning on stderr, and in CI (CI or MEMOPLAN_REQUIRE_PLANS set in
// the environment) they fail instead: a skipped engine suite must never pass CI quietly.
// EngineSetup.ReservesItsAddressSpace says why once.
bool engine_may_skip();
#define SKIP_UNLESS_ENGINE_PLANS()                                                      \
  do {                                                                                  \
    if (!::memoplan::shim::testing::engine_plans()) {                                   \
      if (!::memoplan::shim::testing::engine_may_skip()) {                              \
        FAIL() << "the engine runs unplanned in this process (see EngineSetup); in CI " \
                  "that is a failure, not a skip";                                      \
      }                                                                                 \
      GTEST_SKIP() << "the engine runs unplanned in this process (see EngineSetup)";    \
    }                                                                                   \
  } while (0)

// A copy of the process counters (the runtime's one counter list), for before/after differences.
using Counters = replay::Counters;
Counters counters();

// Runs fn on a new thread, so it starts with a fresh per-thread engine state, and waits for it.
void on_fresh_thread(const std::function<void()>& fn);

// fork(), once the shim's background thread is past its start-up: a thread starting at the fork
// may hold the C library's or the sanitizer's allocator locks, which a fork child cannot take back
// (GCC 12's ASan runtime has no fork handler for its allocator; the child hung in CI).
int fork_quietly();

// Waits for a forked child: its exit code, 128 + the signal that killed it, or -1.
int child_status(int pid);

// One step of a pass. Blocks are named by the script's ids.
struct Op {
  enum Kind {
    kAlloc,             // engine_alloc(size, alignment, zero)
    kFree,              // engine_free on this thread
    kRealloc,           // engine_realloc to `size`
    kFreeElsewhere,     // another thread frees the block, while this one waits
    kReallocElsewhere,  // another thread reallocs the block, while this one waits
  };
  Kind kind;
  int id;
  size_t size = 0;
  size_t alignment = 16;
  bool zero = false;
};
using Script = std::vector<Op>;

Op alloc(int id, size_t size, size_t alignment = 16, bool zero = false);
Op free_op(int id);
Op realloc_op(int id, size_t size);
Op free_elsewhere(int id);
Op realloc_elsewhere(int id, size_t size);

// A pass shaped like a small network: a block alive for the whole pass, `chain` activations that
// each live while the next two are made, and a calloc'ed scratch block. Sizes are distinct (so
// are the keys) and at least 4 KiB (so every block is tracked with the default min_size).
Script network_pass(int chain = 12);
// Passes after which automatic detection has planned network_pass() (14 allocations a pass): the
// period must hold for 256 allocations (detect.cc, kMinPeriodicRun), then replay starts.
inline constexpr int kDetectedPlanPasses = 24;
// Number of allocations a script makes.
size_t allocations_in(const Script& script);

// One allocation of the current pass, in allocation order.
struct Allocated {
  int id;
  char* p;
  size_t size;
  Origin origin;
};

// A block a Heap gave away: another thread (or the test) owns it now.
struct GivenBlock {
  char* p = nullptr;
  size_t size = 0;
  uint64_t seed = 0;
};
// True when the block still carries the pattern it was given away with.
bool intact(const GivenBlock& block);

class Heap {
 public:
  Heap() = default;
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;
  ~Heap();  // checks and frees every block still held

  // memoplan_pass_begin, the script, memoplan_pass_end; `marks` false leaves the marks out.
  void pass(const Script& script, bool marks = true);
  // The same in pieces, for tests that look at blocks in the middle of a pass.
  void begin_pass(bool marks = true);
  void run(const Script& script);
  void end_pass(bool marks = true);
  const std::vector<Allocated>& last_pass() const { return last_pass_; }
  // True when every allocation of the last pass came from `origin`.
  bool last_pass_all(Origin origin) const;
  // "slab slab fallback ...": the origins of the last pass, for failure messages.
  std::string last_pass_origins() const;

  // Keeps a block alive past the end of its pass: it leaves the script's namespace (so the next
  // pass can reuse the id) and stays in the overlap map until released.
  void hold(int id);
  // Hands a block over: the Heap forgets it (its checks stop covering it).
  GivenBlock give_away(int id);
  // Frees the held blocks, on this thread or on another one.
  void release_held(bool elsewhere = false);
  char* pointer(int id) const;
  size_t size(int id) const;
  // malloc_usable_size of a block, asked by another thread.
  size_t usable_size_elsewhere(int id) const;
  // Every live block still carries its pattern.
  void check_all() const;

  // Fault tests: an allocation or realloc that returns NULL with errno ENOMEM is not a failure;
  // the script goes on without that block (its later operations are skipped), a failed realloc
  // leaves the block as it was. Counts such answers.
  void tolerate_out_of_memory(bool on) { tolerate_out_of_memory_ = on; }
  uint64_t out_of_memory_answers() const { return out_of_memory_answers_; }

 private:
  struct Block {
    char* p;
    size_t size;
    uint64_t seed;
  };
  Block make(int id, size_t size, size_t alignment, bool zero);
  void track(const Block& block);
  void untrack(const Block& block);
  void free_block(const Block& block, bool elsewhere);

  std::map<int, Block> by_id_;
  std::vector<Block> held_;
  std::map<uintptr_t, size_t> live_;  // address -> size, for the overlap check
  std::vector<Allocated> last_pass_;
  uint64_t next_seed_ = 1;
  bool tolerate_out_of_memory_ = false;
  uint64_t out_of_memory_answers_ = 0;
  bool accept_null(size_t size);  // counts a tolerated NULL, or fails the test
};

}  // namespace memoplan::shim::testing
