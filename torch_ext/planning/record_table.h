// One profiling session's records: every allocation's size, lifetime on the session's event clock
// and thread in a record::RecordLog (the runtime the shim records into too), its op provenance
// beside it, and the counters. Pure bookkeeping, no torch and no locking: the tagged allocator
// calls it under its own lock.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "memoplan/planner/trace.h"
#include "memoplan/record/record_log.h"
#include "memoplan/torch/profiler.h"

namespace memoplan::torch_ext {

// Where an allocation is being made, as the shadow stack sees it. The names point into the calling
// thread's live RecordFunctions, so add() copies them at once.
struct OpContext {
  const char* inner = nullptr;  // innermost op; nullptr outside every op
  const char* outer = nullptr;  // outermost op
  uint64_t path_hash = 0;       // hash of the op names from outermost to innermost; 0 outside
  int64_t node = -1;            // the thread's current graph node
};

class RecordTable {
 public:
  // `first_thread` (a process-wide thread number) gets per-pass thread index 0.
  explicit RecordTable(uint64_t first_thread);

  void count_request(bool zero_byte);
  // The row id the next add() returns.
  uint64_t next_row() const { return log_.count(); }
  // Records a new allocation made by `thread`; returns its row id.
  uint64_t add(uint64_t size, bool tagged, uint64_t thread, const OpContext& where);
  // The allocation with row id `row` is freed by `thread`.
  void remove(uint64_t row, uint64_t thread);

  uint64_t tick() const { return log_.tick(); }
  // Closes the pass: rows still alive escape and end at the pass's last tick.
  Trace finish(TraceMeta meta);
  const ProfileCounters& counters() const { return counters_; }

 private:
  struct Where {  // a record's provenance beyond its key (the op path hash)
    int64_t node;
    uint32_t inner;  // index into names_
    uint32_t outer;
  };

  uint32_t intern(const char* name);
  uint32_t thread_index(uint64_t thread);

  record::RecordLog log_;
  std::vector<Where> where_;  // by row
  uint64_t live_bytes_ = 0;
  std::vector<std::string> names_;  // names_[0] is "" (outside every op)
  std::unordered_map<std::string, uint32_t> name_index_;
  std::string lookup_;             // reused key buffer: no allocation per lookup once warm
  std::vector<uint64_t> threads_;  // process-wide thread numbers by per-pass index
  ProfileCounters counters_;
};

}  // namespace memoplan::torch_ext
