// One thread's state in the planning runtime, in parts that each one file owns: the lifecycle
// (the pass the thread is in, its mode, key and counters: pass_runtime.cc, the only file that sets
// the mode), replay (replay_state.cc), profiling (profile_state.cc) and the thread's cached plans
// with their arenas (thread_plans.cc). replay_allocator.cc reads it on every tensor request.
// No torch headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/replay/counters.h"
#include "memoplan/torch/plan.h"
#include "profile_state.h"
#include "replay_state.h"
#include "thread_plans.h"

namespace memoplan::torch_ext::runtime_pass {

struct ThreadPass {
  enum class Mode { kIdle, kReplay, kProfile, kUnplanned };

  Mode mode = Mode::kIdle;
  // An unplanned pass of a key that will be planned after its warm-up: its tensors go to exact
  // blocks (TaggedAllocator::allocate_exact) whose pages go back at their free, so the warm-up
  // leaves no allocator-retained memory beside the slab.
  bool warming = false;
  std::string pass_key;     // the key of the pass the thread is in (the tuned ops' layout plans)
  uint64_t key_serial = 0;  // counts pass_key's changes (current_key_serial)
  std::string family_key;   // its shape family (when its key has no plan yet), and its dims
  std::vector<int64_t> dims;
  replay::Counters counters;  // this pass's, added to the process's at its end
  PassOutcome last;           // the last finished pass's (last_pass())

  ReplayState replay;
  ProfileState profile;
  ThreadPlans plans;
};

ThreadPass& thread_pass();
// The process's counters (passes, hits, fallbacks, arenas, ...).
replay::SharedCounters& process_counters();
// Makes the replay allocator c10's CPU allocator (once; never uninstalled).
void install_replay_allocator();

}  // namespace memoplan::torch_ext::runtime_pass
