// A thread's cached plans and their arenas (thread_plans.h).
#include "thread_plans.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "arena_region.h"

namespace memoplan::torch_ext::runtime_pass {
namespace {

std::atomic<uint64_t> largest_slab{0};  // bytes of the largest arena made

// A thread keeps at most this many plans (with their arenas); the least recently used goes.
constexpr size_t kThreadCachedPlans = 64;

// A new arena of `bytes` for the calling thread and `module`, counted; null when none can be had.
replay::Arena* new_arena(uint64_t bytes, int64_t module, replay::Counters& counters) {
  replay::ArenaRegion::Failure failure;
  replay::Arena* arena = arena_region().create(bytes, thread_token(), &failure);
  if (!arena) return nullptr;
  ++counters.slabs;
  counters.slab_bytes += bytes;
  module_state(module).arena_bytes.fetch_add(arena->bytes(), std::memory_order_relaxed);
  uint64_t seen = largest_slab.load(std::memory_order_relaxed);
  while (bytes > seen && !largest_slab.compare_exchange_weak(seen, bytes)) {
  }
  return arena;
}

// The thread is done with `module`'s arena (it goes once the blocks it still holds are freed).
void retire(replay::Arena* arena, int64_t module) {
  module_state(module).arena_bytes.fetch_sub(arena->bytes(), std::memory_order_relaxed);
  arena->retire();
}

}  // namespace

ThreadPlans::~ThreadPlans() {
  for (CachedPlan& c : cache_) {
    if (c.arena) retire(c.arena, c.module);
  }
  for (FamilyArena& f : family_arenas_) retire(f.arena, f.module);
}

// Drops the cached plans and family arenas of every module `drop(module)` names; true when any went.
template <typename Drop>
bool ThreadPlans::drop_modules(const Drop& drop) {
  bool dropped = false;
  for (size_t i = 0; i < cache_.size();) {
    if (drop(cache_[i].module)) {
      erase(&cache_[i]);
      dropped = true;
    } else {
      ++i;
    }
  }
  for (size_t i = 0; i < family_arenas_.size();) {
    if (!drop(family_arenas_[i].module)) {
      ++i;
      continue;
    }
    retire(family_arenas_[i].arena, family_arenas_[i].module);
    family_arenas_[i] = std::move(family_arenas_.back());
    family_arenas_.pop_back();
    dropped = true;
  }
  return dropped;
}

bool ThreadPlans::sync_generation(int64_t module, uint64_t generation) {
  const auto index = static_cast<size_t>(module);
  if (generations_seen_.size() <= index) generations_seen_.resize(index + 1, 0);
  if (generations_seen_[index] == generation) return false;
  generations_seen_[index] = generation;
  drop_modules([module](int64_t m) { return m == module; });
  return true;
}

bool ThreadPlans::drop_forgotten() {
  forgotten_seen_ = forgotten_modules();
  return drop_modules(
      [](int64_t m) { return module_state(m).forgotten.load(std::memory_order_acquire); });
}

CachedPlan* ThreadPlans::find(int64_t module, const std::string& key) {
  for (CachedPlan& c : cache_) {
    if (c.module == module && c.key == key) return &c;
  }
  return nullptr;
}

CachedPlan* ThreadPlans::find(const CompiledPlan* plan) {
  for (CachedPlan& c : cache_) {
    if (c.plan.get() == plan) return &c;
  }
  return nullptr;
}

void ThreadPlans::erase(CachedPlan* cached) {
  if (cached->arena) retire(cached->arena, cached->module);
  *cached = std::move(cache_.back());
  cache_.pop_back();
}

CachedPlan* ThreadPlans::add(int64_t module, uint64_t generation, uint64_t replaced,
                             const std::string& key, std::shared_ptr<const CompiledPlan> plan,
                             replay::Counters& counters) {
  replay::Arena* arena = nullptr;
  if (plan->family.empty()) {
    arena = new_arena(plan->slab_bytes, module, counters);
    if (!arena) return nullptr;
  }
  if (cache_.size() >= kThreadCachedPlans) {
    erase(&*std::min_element(cache_.begin(), cache_.end(),
                             [](const CachedPlan& a, const CachedPlan& b) { return a.used < b.used; }));
  }
  cache_.push_back({module, generation, key, std::move(plan), arena, 0, replaced});
  return &cache_.back();
}

replay::Arena* ThreadPlans::arena_for(CachedPlan& cached, replay::Counters& counters) {
  replay::Arena* arena = cached.arena;
  if (!arena) {
    arena = family_arena(cached.module, cached.plan->family, cached.plan->slab_bytes, counters);
    if (!arena) return nullptr;
  }
  cached.used = ++uses_;
  return arena;
}

// The family's arena, grown (replaced) when the plan needs more.
replay::Arena* ThreadPlans::family_arena(int64_t module, const std::string& family,
                                         uint64_t slab_bytes, replay::Counters& counters) {
  FamilyArena* found = nullptr;
  for (FamilyArena& f : family_arenas_) {
    if (f.module == module && f.family == family) found = &f;
  }
  if (found && found->arena->bytes() >= slab_bytes) return found->arena;
  // Exactly what the plan needs: random shapes set a new largest one about ln(passes) times.
  replay::Arena* arena = new_arena(slab_bytes, module, counters);
  if (!arena) return nullptr;
  if (found) {
    retire(found->arena, module);  // back once the blocks it still holds (outputs) are freed
    found->arena = arena;
  } else {
    family_arenas_.push_back({module, family, arena});
  }
  return arena;
}

uint64_t ThreadPlans::discard_pages(int64_t module) {
  uint64_t bytes = 0;
  for (const CachedPlan& c : cache_) {
    if (c.module == module && c.arena) bytes += c.arena->discard_pages();
  }
  for (const FamilyArena& f : family_arenas_) {
    if (f.module == module) bytes += f.arena->discard_pages();
  }
  return bytes;
}

uint64_t largest_slab_bytes() { return largest_slab.load(std::memory_order_relaxed); }

}  // namespace memoplan::torch_ext::runtime_pass
