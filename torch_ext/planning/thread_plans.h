// A thread's cached plans and the arenas they replay in (the planning runtime's per-thread
// cache, ThreadPass::cache and family_arenas): made, picked, dropped least recently used, and
// forgotten with their module. pass_runtime.cc's lifecycle calls these; no torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "compiled_plan.h"
#include "thread_pass.h"

namespace memoplan::torch_ext::runtime_pass {

// Starts replaying `cached` on this thread (its arena, or the family's, made or grown now);
// false when no arena could be had.
bool start_replay(ThreadPass& t, ThreadPass::CachedPlan& cached);

// Caches a plan on this thread (its own arena unless it is a family's), dropping the least
// recently used entry when the cache is full. Returns the entry, or null when no arena could be
// had.
ThreadPass::CachedPlan* cache_plan(ThreadPass& t, int64_t module, uint64_t generation,
                                   uint64_t replaced, const std::string& key,
                                   std::shared_ptr<const CompiledPlan> plan);

// After forget_plans: the thread's cached plans of `module` and its family arenas go (each arena
// back once its blocks are freed).
void forget_thread_plans(ThreadPass& t, int64_t module);

// Bytes of the largest arena (slab) made so far, by any thread.
uint64_t largest_slab_bytes();

}  // namespace memoplan::torch_ext::runtime_pass
