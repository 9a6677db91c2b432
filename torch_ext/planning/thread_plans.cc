// A thread's cached plans and their arenas (thread_plans.h).
#include "thread_plans.h"

#include <algorithm>
#include <atomic>

#include "arena_region.h"

namespace memoplan::torch_ext::runtime_pass {
namespace {

std::atomic<uint64_t> largest_slab{0};  // bytes of the largest arena made

void note_slab_bytes(uint64_t bytes) {
  uint64_t seen = largest_slab.load(std::memory_order_relaxed);
  while (bytes > seen && !largest_slab.compare_exchange_weak(seen, bytes)) {
  }
}

// A thread keeps at most this many plans (with their arenas); the least recently used goes.
constexpr size_t kThreadCachedPlans = 64;

// The arena a family's plan replays in on this thread: the family's, grown (replaced) when the plan
// needs more; null when none can be had.
replay::Arena* family_arena(ThreadPass& t, int64_t module, const std::string& family,
                            uint64_t slab_bytes) {
  ThreadPass::FamilyArena* found = nullptr;
  for (ThreadPass::FamilyArena& f : t.family_arenas) {
    if (f.module == module && f.family == family) found = &f;
  }
  if (found && found->arena->bytes() >= slab_bytes) return found->arena;
  // Exactly what the plan needs: random shapes set a new largest one about ln(passes) times.
  const uint64_t bytes = slab_bytes;
  replay::ArenaRegion::Failure failure;
  replay::Arena* arena = arena_region().create(bytes, thread_token(), &failure);
  if (!arena) return nullptr;
  note_slab_bytes(bytes);
  ++t.counters.slabs;
  t.counters.slab_bytes += bytes;
  if (found) {
    found->arena->retire();  // back once the blocks it still holds (outputs) are freed
    found->arena = arena;
  } else {
    t.family_arenas.push_back({module, family, arena});
  }
  return arena;
}

}  // namespace

bool start_replay(ThreadPass& t, ThreadPass::CachedPlan& cached) {
  replay::Arena* arena = cached.arena;
  if (!arena) {
    arena = family_arena(t, cached.module, cached.plan->family, cached.plan->slab_bytes);
    if (!arena) return false;
  }
  t.mode = ThreadPass::Mode::kReplay;
  t.plan = cached.plan.get();
  t.arena = arena;
  cached.used = ++t.uses;
  t.visit = 0;
  t.permit_visit = ~uint32_t{0};
  const replay::Visit& first = t.plan->visits.front();
  t.matcher.start_window(t.plan->tensors.data(), first.first_slot, first.slot_count);
  ++t.counters.planned_passes;
  return true;
}

ThreadPass::CachedPlan* cache_plan(ThreadPass& t, int64_t module, uint64_t generation,
                                   uint64_t replaced, const std::string& key,
                                   std::shared_ptr<const CompiledPlan> plan) {
  replay::Arena* arena = nullptr;
  if (plan->family.empty()) {
    replay::ArenaRegion::Failure failure;
    arena = arena_region().create(plan->slab_bytes, thread_token(), &failure);
    if (!arena) return nullptr;
    ++t.counters.slabs;
    t.counters.slab_bytes += plan->slab_bytes;
    note_slab_bytes(plan->slab_bytes);
  }
  if (t.cache.size() >= kThreadCachedPlans) {
    auto oldest = std::min_element(t.cache.begin(), t.cache.end(),
                                   [](const ThreadPass::CachedPlan& a,
                                      const ThreadPass::CachedPlan& b) { return a.used < b.used; });
    if (oldest->arena) oldest->arena->retire();
    *oldest = std::move(t.cache.back());
    t.cache.pop_back();
  }
  t.cache.push_back({module, generation, key, std::move(plan), arena, 0, replaced});
  return &t.cache.back();
}

void forget_thread_plans(ThreadPass& t, int64_t module) {
  for (size_t i = 0; i < t.cache.size();) {
    if (t.cache[i].module != module) {
      ++i;
      continue;
    }
    if (t.cache[i].arena) t.cache[i].arena->retire();
    t.cache[i] = std::move(t.cache.back());
    t.cache.pop_back();
  }
  for (size_t i = 0; i < t.family_arenas.size();) {
    if (t.family_arenas[i].module != module) {
      ++i;
      continue;
    }
    t.family_arenas[i].arena->retire();
    t.family_arenas[i] = std::move(t.family_arenas.back());
    t.family_arenas.pop_back();
  }
  t.plan = nullptr;
  t.arena = nullptr;
}

uint64_t largest_slab_bytes() { return largest_slab.load(std::memory_order_relaxed); }

}  // namespace memoplan::torch_ext::runtime_pass
