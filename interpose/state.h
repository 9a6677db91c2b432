// The shim's process-wide and per-thread state. Per-thread state is reached through one
// initial-exec TLS pointer (no TLS constructor, no __tls_get_addr: safe inside malloc).
#pragma once

#include <atomic>
#include <cstdint>

#include "memoplan/runtime/live_ranges.h"
#include "memoplan/runtime/slot_region.h"
#include "options.h"

namespace memoplan::shim {

// One tracked allocation of a profiled pass. Record indices grow without bound; the 16-bit tag
// slots they occupy are recycled.
struct Record {
  uint64_t key;               // call site and size
  uint64_t size;              // bytes requested
  uint64_t align;             // alignment requested
  uint64_t begin;             // tick of the allocation
  std::atomic<uint64_t> end;  // tick of the free; kLive while alive, kForeign if another
                              // thread freed it (not on this thread's clock: never planned)
};
inline constexpr uint64_t kLive = ~uint64_t{0};
inline constexpr uint64_t kForeign = ~uint64_t{0} - 1;
// Records live in fixed chunks that never move, so another thread's free can read one safely.
inline constexpr uint64_t kRecordsPerChunk = 4096;
inline constexpr uint64_t kRecordChunks = 1024;

// One entry of a thread's replay table, in pass order.
struct PlannedSlot {
  uint64_t key;
  uint64_t size;
  uint64_t offset;
  bool planned;  // false: escapes the pass in the profile; always served by the fallback
};

enum class Phase : uint8_t {
  kWarmup,     // explicit passes: skipping the first `passes`
  kProfiling,  // recording (an explicit pass, or everything until a period is found)
  kReplaying,  // serving from the slab
  kSeeking,    // mode:replay without pass marks: waiting for the loaded pass's first allocation
  kDisabled,   // nothing to plan here (no period found, plan failed): pass-through
};

// A counter only its thread writes: a relaxed load and store, a plain increment on x86, yet safe
// to read from another thread (the statistics at exit read every running thread's).
struct OwnedCounter {
  std::atomic<uint64_t> value{0};
  void bump() { value.store(value.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  uint64_t get() const { return value.load(std::memory_order_relaxed); }
};

// Counters of the hot paths, kept per thread (a shared atomic on every hit cost as much as the rest
// of the hit) and added to the process-wide Stats at pass ends and thread exit; the statistics at
// exit add those of threads still running.
struct LocalCounters {
  OwnedCounter planned_hits;
  OwnedCounter steady_hits;
  OwnedCounter passes;
  OwnedCounter outside_passes;
};

// Unwinding the stack costs more than the rest of a replay hit together. With callsite_depth >= 2
// the unwound hash is cached per thread under the call path's return address and stack pointer.
// Two different deeper paths that share both (one helper, same depth) share an entry: which of
// them filled it decides their key, so such paths may not match across passes (use depth 1).
struct CallsiteCacheEntry {
  uint64_t tag = 0;
  uint64_t hash = 0;
};
inline constexpr size_t kCallsiteCacheEntries = 1024;

// Re-checking a detected plan (replay.cc): windows of tracked requests, and whether each had
// requests the plan did not know.
struct ReplayRecheck {
  uint32_t window = 256;  // requests per window: a few passes
  uint32_t requests = 0;
  uint32_t misses = 0;
  uint32_t missing_windows = 0;  // consecutive windows with misses
  uint32_t redetections = 0;
  uint64_t unexplained_key = 0;  // the newest request the plan did not know
};

struct ThreadState {
  uint32_t index = 0;
  LocalCounters counters;
  CallsiteCacheEntry callsite_cache[kCallsiteCacheEntries];
  Phase phase = Phase::kWarmup;
  bool explicit_passes = false;  // the program called memoplan_pass_begin on this thread
  bool in_pass = false;          // between memoplan_pass_begin and memoplan_pass_end
  uint64_t passes_begun = 0;
  uint64_t tick = 0;  // event clock of tracked allocations and frees

  // Profiling.
  Record** record_chunks = nullptr;  // kRecordChunks pointers
  uint64_t record_count = 0;
  Record& record(uint64_t i) { return record_chunks[i / kRecordsPerChunk][i % kRecordsPerChunk]; }
  uint64_t pass_first_record = 0;    // explicit passes: first record of the profiled pass
  uint64_t next_detection = 64;      // automatic passes: record count of the next period search
  uint64_t detect_first_record = 0;  // detection searches records from here on
  uint64_t required_key = 0;         // re-detection: the pass must contain this key (0: none)
  uint64_t redetect_budget = 0;      // re-detection: records to find the pass in, then relax / stop
  bool redetect_relaxed = false;     // re-detection: already searching without required_key
  std::atomic<uint64_t> profiled_live{0};  // tag slots still held by this thread's records

  // Replay.
  PlannedSlot* slots = nullptr;
  uint32_t slot_count = 0;
  uint32_t cursor = 0;
  uint64_t replayed_passes = 0;
  ReplayRecheck recheck;
  char* slab = nullptr;
  uint64_t slab_bytes = 0;
  uint32_t slab_index = 0;
  runtime::LiveRanges live;
  runtime::ByteRange* live_storage = nullptr;
  uint64_t live_bytes = 0;
  OwnedCounter peak_live_bytes;  // read by the statistics at exit
  // Size of the block handed out at each 64-byte offset of the slab, readable from any thread
  // (malloc_usable_size and realloc of a block another thread allocated). Sparse: only the pages
  // holding planned offsets are ever touched.
  std::atomic<uint64_t>* block_sizes = nullptr;
  size_t block_sizes_bytes = 0;
  std::atomic<void*> remote_frees{nullptr};  // intrusive stack through the freed blocks
  // Set when the thread exited with blocks still alive: the thread whose free brings the slab to
  // empty then gives the slab back, under exit_lock.
  std::atomic<bool> exited{false};
  ThreadState* next_retired = nullptr;  // Global::retired list
  ThreadState* running_prev = nullptr;  // Global::running list, under Global::registry_lock
  ThreadState* running_next = nullptr;
  std::atomic_flag exit_lock = ATOMIC_FLAG_INIT;
};

struct Global {
  std::atomic<int> init_state{0};  // 0 not started, 1 running, 2 done
  Options options;
  bool mode_off = false;
  runtime::SlotRegion tags;   // profiling: one slot per tracked allocation
  runtime::SlotRegion slabs;  // replay: one slot per thread's slab
  // tag slot -> (thread, record) of the allocation in it; slab slot -> owning thread.
  struct SlotOwner {
    ThreadState* thread;
    uint64_t record;
  };
  SlotOwner* tag_owner = nullptr;
  ThreadState** slab_owner = nullptr;
  std::atomic<uint32_t> next_thread_index{0};
  // States of exited threads that something may still reach (a live slab block, a profiled block
  // in a tag slot). Kept on a list, not forgotten: they are retained on purpose, not leaked.
  std::atomic<ThreadState*> retired{nullptr};
  // Threads that have not exited, for the statistics at exit. The lock also orders a thread's
  // flush of its counters against their reading.
  ThreadState* running = nullptr;
  std::atomic_flag registry_lock = ATOMIC_FLAG_INIT;
  int log_fd = 2;
  bool portable_keys = false;  // see portable_keys(Options)
  // mode:replay: the pass every inference thread replays, loaded from files once.
  struct LoadedPass {
    PlannedSlot* slots = nullptr;
    uint32_t count = 0;
    uint64_t slab_bytes = 0;
    uint64_t lower_bound_bytes = 0;
  };
  LoadedPass replay_pass;
  std::atomic<int> replay_pass_state{0};  // 0 not loaded yet, 1 ready, 2 unusable
};

Global& global();

// The calling thread's state, created on first use (nullptr while that is impossible).
extern __thread ThreadState* tls_state __attribute__((tls_model("initial-exec")));
ThreadState* create_thread_state();
inline ThreadState* thread_state() {
  ThreadState* t = tls_state;
  return __builtin_expect(t != nullptr, 1) ? t : create_thread_state();
}

// Adds the thread's local counters to the process-wide statistics.
void flush_counters(ThreadState& t);
void flush_counters_locked(ThreadState& t);  // the caller holds RegistryLock

// Holds Global::registry_lock (thread start and exit, counter flushes, the statistics at exit).
class RegistryLock {
 public:
  RegistryLock();
  ~RegistryLock();
  RegistryLock(const RegistryLock&) = delete;
  RegistryLock& operator=(const RegistryLock&) = delete;
};

// Nested calls (our own bookkeeping, libunwind, the planner) go straight to the fallback.
struct ReentryGuard {
  ReentryGuard();
  ~ReentryGuard();
  static bool active();
};

// One line to the log, no malloc.
void log_line(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace memoplan::shim
