// One thread's replay state for the graph pass: the pass it is in, the plan and arena it replays,
// the matcher's cursor, and the plans (with their arenas) it has used. Shared by pass_runtime.cc
// (the graph operators), family_plans.cc and replay_allocator.cc (c10's CPU allocator while a
// module is planned). No torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiled_plan.h"
#include "memoplan/replay/arena.h"
#include "memoplan/replay/counters.h"
#include "memoplan/replay/matcher.h"
#include "memoplan/torch/plan.h"
#include "memoplan/torch/profiler.h"

namespace memoplan::torch_ext::runtime_pass {

struct ThreadPass {
  enum class Mode { kIdle, kReplay, kProfile, kUnplanned };
  struct CachedPlan {
    int64_t module;
    uint64_t generation;
    std::string key;
    std::shared_ptr<const CompiledPlan> plan;
    replay::Arena* arena;   // its own; null for a family's plan (it uses the family's arena)
    uint64_t used = 0;      // the thread's pass count when last used (the cache drops the oldest)
    uint64_t replaced = 0;  // the module's count of replaced plans when this one was looked up
  };
  // One arena per shape family and thread, for every plan predicted for that family: it grows to
  // the largest slab among them (a new arena, the old one retired) instead of one per key.
  struct FamilyArena {
    int64_t module;
    std::string family;
    replay::Arena* arena;
  };

  Mode mode = Mode::kIdle;
  // An unplanned pass of a key that will be planned after its warm-up: its tensors go to exact
  // blocks (TaggedAllocator::allocate_exact) whose pages go back at their free, so the warm-up
  // leaves no allocator-retained memory beside the slab.
  bool warming = false;
  // Replay: the plan, its arena, the visit the graph is in and the matcher over that visit's slots.
  const CompiledPlan* plan = nullptr;
  replay::Arena* arena = nullptr;
  uint32_t visit = 0;
  replay::Matcher matcher;
  replay::Counters counters;  // this pass's, added to the process's at its end
  PassOutcome last;           // the last finished pass's (last_pass())
  // Replay, memory "min": the blocks the current visit's ShareInputs node found where the plan
  // put them (sorted, touching ones merged), over which its output may be laid.
  std::vector<replay::ByteRange> permits;
  uint32_t permit_visit = ~uint32_t{0};
  // Profile.
  std::unique_ptr<ProfileSession> session;
  std::vector<int64_t> visit_nodes;
  std::vector<uint64_t> visit_ticks;  // the session's clock at each visit's start
  std::vector<ShareClaim> claims;     // what its ShareInputs nodes recorded
  int64_t module = -1;
  std::string key;
  std::string family_key;  // the profiled key's shape family, and its dims
  std::vector<int64_t> dims;
  std::string pass_key;  // the key of the pass the thread is in (the tuned ops' layout plans)
  std::vector<CachedPlan> cache;
  std::vector<FamilyArena> family_arenas;
  std::vector<uint64_t> generations_seen;  // per module id: the plans' generation last seen
  uint64_t uses = 0;

  ~ThreadPass() {
    for (CachedPlan& c : cache) {
      if (c.arena) c.arena->retire();
    }
    for (FamilyArena& f : family_arenas) f.arena->retire();
  }
};

ThreadPass& thread_pass();
// The process's counters (passes, hits, fallbacks, arenas, ...).
replay::SharedCounters& process_counters();
// Makes the replay allocator c10's CPU allocator (once; never uninstalled).
void install_replay_allocator();

}  // namespace memoplan::torch_ext::runtime_pass
