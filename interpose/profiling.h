// Profiling: what a thread's profiled passes record (its Profile) and where the marked pass being
// profiled begins. The thread's Profiling is profile.cc's: it creates the profile, gives its
// records back and drops it; the others read it and go through the functions below.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memoplan/record/record_log.h"

namespace memoplan::shim {

struct ThreadState;

// A thread's profile: its records (record::RecordLog, on the thread's event clock; memory from the
// fallback allocator) and the references that keep the profile: the thread while it runs, and
// each profiled block still alive (its free, on any thread, closes its record). Whoever drops the
// last reference frees it, so neither an exiting thread nor a late free touches freed memory.
//
// The records themselves go as soon as they are of no use (the plan is made, profiling gave up,
// the thread exited), even while profiled blocks live on (weights made during the profiled pass
// stay alive for the whole run): giving them back starts a new generation, and the free of a
// block tagged in an older one closes nothing. A free on another thread counts itself in
// `closing` while it may write a record, and the records wait for those (release_records).
struct Profile {
  record::RecordLog log;
  std::atomic<uint64_t> refs{1};                      // the thread's own + live profiled blocks
  std::atomic<const ThreadState*> recorder{nullptr};  // null once the thread has exited
  std::atomic<uint32_t> generation{0};                // of the records in the log now
  std::atomic<uint32_t> closing{0};                   // other threads' frees closing a record now

  explicit Profile(record::MemorySource memory) : log(memory) {}
  // Profiled blocks alive now (while the thread holds its reference).
  uint64_t live_blocks() const { return refs.load(std::memory_order_acquire) - 1; }
  // What a profiled block's tag slot keeps: the record's generation and index.
  uint64_t record_tag(uint64_t index) const {
    return uint64_t{generation.load(std::memory_order_relaxed)} << 32 | index;
  }
};

// The thread's part: its profile (never null once the thread state exists) and, with marked
// passes, the first record of the pass being profiled.
struct Profiling {
  Profile* profile = nullptr;
  uint64_t pass_first_record = 0;
};

// A new thread's profile, its recorder `t` (memory from the fallback; false when there is none).
bool create_profile(Profiling& p, const ThreadState& t);
// At thread exit (or for a thread a fork left behind): the records go now, even if profiled
// blocks live on (they close nothing afterwards), and the thread's reference is dropped.
void retire_profile(Profiling& p);
// In a fork child, for each thread it knows: a free that was closing one of its records at the
// fork did not come along.
void profile_after_fork_in_child(Profiling& p);

// Marked passes: the pass being profiled starts with the next record.
void start_profiled_pass(Profiling& p);

// Tracked allocations while profiling (null: untracked, the fallback serves it), their frees and
// sizes (the block's tag slot finds its profile, on any thread).
void* profile_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key, uint64_t site,
                    bool zero);
void profile_free(void* p);
size_t profile_usable_size(void* p);
// The thread runs unplanned from here on (says why; its records and the kept pages go back).
void give_up_profiling(ThreadState& t, const char* why);
// The pages freed profiled and huge blocks kept for the next ones (TagRegion's retain_bytes) go
// back, counted as released (returned), and shared slots stop taking blocks: a thread stops or
// pauses profiling, or malloc_trim. Kept pages would only sit in RSS (another thread still
// profiling maps fresh ones).
uint64_t give_back_kept_pages();
// The records are of no use any more (the plan is made, or the thread no longer profiles): their
// memory goes back and is counted as released. Returns the bytes.
uint64_t release_records(Profiling& p);

}  // namespace memoplan::shim
