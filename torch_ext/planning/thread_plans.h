// A thread's cached plans and the arenas they replay in: made, picked, dropped least recently
// used, and forgotten with their module. A thread's ThreadPlans is thread_plans.cc's;
// pass_runtime.cc's lifecycle calls it at each pass's start. No torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiled_plan.h"
#include "module_state.h"  // forgotten_modules
#include "memoplan/replay/arena.h"
#include "memoplan/replay/counters.h"

namespace memoplan::torch_ext::runtime_pass {

struct CachedPlan {
  int64_t module;
  uint64_t generation;
  std::string key;
  std::shared_ptr<const CompiledPlan> plan;
  replay::Arena* arena;   // its own; null for a family's plan (it uses the family's arena)
  uint64_t used = 0;      // the thread's use count when last used (the cache drops the oldest)
  uint64_t replaced = 0;  // the module's count of replaced plans when this one was looked up
};

class ThreadPlans {
 public:
  ThreadPlans() = default;
  ~ThreadPlans();  // every arena retired (back once the blocks it still holds are freed)
  ThreadPlans(const ThreadPlans&) = delete;
  ThreadPlans& operator=(const ThreadPlans&) = delete;

  // After forget_plans (the module's generation moved on since this thread last saw it): the
  // thread's cached plans of `module` and its family arenas go. True when they went.
  bool sync_generation(int64_t module, uint64_t generation);
  // After forget_module (forgotten_modules() moved on since this thread last looked): the thread's
  // plans and family arenas of forgotten modules go. True when any went.
  bool drop_forgotten();
  bool forgotten_changed() const { return forgotten_seen_ != forgotten_modules(); }
  // The cached plan of `module` for `key`; null when there is none.
  CachedPlan* find(int64_t module, const std::string& key);
  // The cached plan whose plan is `plan`; null when there is none.
  CachedPlan* find(const CompiledPlan* plan);
  // Drops `cached` (one of this cache's), retiring its arena.
  void erase(CachedPlan* cached);
  // Caches a plan (its own arena unless it is a family's), dropping the least recently used entry
  // when the cache is full. Returns the entry, or null when no arena could be had.
  CachedPlan* add(int64_t module, uint64_t generation, uint64_t replaced, const std::string& key,
                  std::shared_ptr<const CompiledPlan> plan, replay::Counters& counters);
  // The arena `cached` replays in on this thread (its own, or its family's, made or grown now),
  // marking it used; null when none could be had.
  replay::Arena* arena_for(CachedPlan& cached, replay::Counters& counters);
  // Gives back the pages of this thread's arenas of `module` that hold no block (the arenas stay:
  // their next pass faults them in again); returns their bytes.
  uint64_t discard_pages(int64_t module);

 private:
  // One arena per shape family and thread, for every plan predicted for that family: it grows to
  // the largest slab among them (a new arena, the old one retired) instead of one per key.
  struct FamilyArena {
    int64_t module;
    std::string family;
    replay::Arena* arena;
  };
  replay::Arena* family_arena(int64_t module, const std::string& family, uint64_t slab_bytes,
                              replay::Counters& counters);
  template <typename Drop>
  bool drop_modules(const Drop& drop);

  std::vector<CachedPlan> cache_;
  std::vector<FamilyArena> family_arenas_;
  std::vector<uint64_t> generations_seen_;  // per module id: the plans' generation last seen
  uint64_t uses_ = 0;
  uint64_t forgotten_seen_ = 0;
};

// Bytes of the largest arena (slab) made so far, by any thread.
uint64_t largest_slab_bytes();

}  // namespace memoplan::torch_ext::runtime_pass
