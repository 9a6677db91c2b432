// Profiling one pass of LibTorch CPU work: every allocation made through c10's CPU allocator while
// a ProfileSession is active is recorded with its lifetime and the ops it was made in, and end()
// returns the pass as a memoplan::Trace ready for plan_trace(). Behaviour and limits:
// docs/TORCH_EXT.md. No torch headers: a graph pass can use it without paying for them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>

#include "memoplan/planner/trace.h"

namespace memoplan::torch_ext {

class RecordTable;

enum class ProfileThreads {
  // Only the thread that called begin() is recorded; other threads' allocations go to the previous
  // CPU allocator untouched. Several such sessions may run at once, one per thread.
  kCallingThread,
  // Every thread's allocations are recorded (intra-op worker threads included). Excludes every
  // other session while active.
  kAllThreads,
};

struct ProfileOptions {
  ProfileThreads threads = ProfileThreads::kCallingThread;
  // Copied into the trace; `source` defaults to "memoplan_torch", `threads` to the intra-op
  // thread count at begin().
  TraceMeta meta;
};

struct ProfileCounters {
  uint64_t requests = 0;            // allocate() calls of recorded threads, zero-byte ones included
  uint64_t zero_byte = 0;           // of which asked for 0 bytes: counted, never recorded
  uint64_t recorded = 0;            // allocations recorded (trace rows)
  uint64_t untagged = 0;            // of which had no tag slot (larger than a slot, or none free)
  uint64_t frees = 0;               // recorded allocations freed before end()
  uint64_t cross_thread_frees = 0;  // of which freed by another thread than the allocating one
  uint64_t escapes = 0;             // recorded allocations still alive at end()
  uint64_t peak_live_bytes = 0;     // most recorded bytes live at once (unrounded)
  uint64_t threads = 0;             // distinct threads that allocated or freed recorded blocks
};

// One profiled pass. Not copyable; begin() and end() may be called once each, end() from any
// thread. Throws std::logic_error on misuse and std::runtime_error when the session cannot start
// (another session excludes it).
class ProfileSession {
 public:
  explicit ProfileSession(ProfileOptions options = {});
  ~ProfileSession();  // ends an active session, dropping its trace
  ProfileSession(const ProfileSession&) = delete;
  ProfileSession& operator=(const ProfileSession&) = delete;

  // Installs the tagged allocator as c10's CPU allocator (first session only) and starts recording.
  void begin();
  // Stops recording and returns the pass: one row per recorded allocation in allocation order, id =
  // row index, lifetimes on the session's event clock (every allocation and free is one tick),
  // rows still alive marked escapes (their end is the end of the pass). Restores the previous CPU
  // allocator when no other session is active. Blocks freed later are simply released.
  Trace end();

  bool active() const { return table_ != nullptr; }
  // Counters so far (final ones after end()).
  ProfileCounters counters() const;
  // Row id of the recorded allocation holding `p`, any interior pointer included (a view's data
  // pointer finds its base's allocation). Tagged blocks are found with a subtraction and a shift,
  // untagged ones in an ordered map. nullopt when p is not in a live block of this session.
  std::optional<uint64_t> allocation_of(const void* p) const;

  // The session's event clock now: the tick the next allocation or free will have (0 inactive).
  uint64_t tick() const;
  // Bytes of one tag slot: larger requests are recorded untagged. 0 before the first begin() of
  // the process, and when the address space for the tag region could not be had.
  static uint64_t tag_slot_bytes();

 private:
  ProfileOptions options_;
  std::unique_ptr<RecordTable> table_;
  uint64_t session_ = 0;  // the tagged allocator's id for it
  ProfileCounters final_counters_;
  bool ended_ = false;
};

}  // namespace memoplan::torch_ext
