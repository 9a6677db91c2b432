// A thread's pass through a planned module, from its AllocateSlab to its EndPass: which plan it
// replays, whether it is profiled, warmed up or run unplanned, and what it reports. The lifecycle
// of thread_pass.h's state: the only file that sets a thread's mode; replay, profiling and the
// cached plans are their own files' (replay_state.cc, profile_state.cc, thread_plans.cc).
#include "pass_runtime.h"

#include <c10/util/Exception.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "compiled_plan.h"
#include "family_plans.h"
#include "family_state.h"
#include "module_state.h"
#include "tagged_allocator.h"
#include "thread_pass.h"

namespace memoplan::torch_ext {
namespace runtime_pass {
namespace {

replay::SharedCounters counters;

// Adds the pass's counters to the process's.
void flush(ThreadPass& t) {
  counters.add(t.counters);
  t.counters = {};
}

// A profiled pass of one of the family's keys ended (under the module's lock).
void family_profile_ended(ModuleState& m, const std::string& family_key) {
  if (family_key.empty()) return;
  auto f = m.families.find(family_key);
  if (f != m.families.end()) f->second.profile_ended();
}

void abandon_profile(ThreadPass& t) {
  if (!t.profile.active()) return;
  t.profile.abandon();
  ModuleState& m = module_state(t.profile.module());
  std::lock_guard<std::mutex> lock(m.mutex);
  m.profiling.erase(t.profile.key());
  family_profile_ended(m, t.family_key);
}

// Replays `cached` (false when no arena could be had: the caller runs the pass unplanned).
bool start_replay(ThreadPass& t, CachedPlan& cached) {
  replay::Arena* arena = t.plans.arena_for(cached, t.counters);
  if (!arena) return false;
  t.replay.start(*cached.plan, *arena);
  t.mode = ThreadPass::Mode::kReplay;
  ++t.counters.planned_passes;
  return true;
}

void run_unplanned(ThreadPass& t) {
  t.mode = ThreadPass::Mode::kUnplanned;
  ++t.counters.unplanned_passes;
}

}  // namespace

ThreadPass& thread_pass() {
  static thread_local ThreadPass pass;
  return pass;
}

replay::SharedCounters& process_counters() { return counters; }

void allocate_slab(int64_t module, const std::string& key, FamilyOf family) {
  ThreadPass& t = thread_pass();
  // A previous pass that never reached its end (an exception in forward): close it first.
  abandon_pass();
  if (t.pass_key != key) {
    t.pass_key = key;
    ++t.key_serial;
  }
  ++t.counters.passes;
  ModuleState& m = module_state(module);
  const uint64_t generation = m.generation.load();
  // forget_plans: this thread's slabs of the module go; forget_module: of any forgotten module.
  if (t.plans.sync_generation(module, generation)) t.replay.stop();
  if (t.plans.forgotten_changed() && t.plans.drop_forgotten()) t.replay.stop();
  if (CachedPlan* cached = t.plans.find(module, key)) {
    if (cached->arena || refresh_family_plan(m, *cached)) {
      if (!start_replay(t, *cached)) run_unplanned(t);  // no arena to be had
      return;
    }
    t.plans.erase(cached);  // dropped by the module: looked up anew below
  }
  std::unique_lock<std::mutex> lock(m.mutex);
  const bool allowed = m.options.plan_new_keys || m.requested.count(key);
  std::shared_ptr<const CompiledPlan> plan;
  if (auto it = m.plans.find(key); it != m.plans.end()) {
    plan = it->second;
  } else if (family.fill) {
    family.fill(family.context, &t.family_key, &t.dims);
    if (allowed) plan = predict_plan(m, key, t.family_key, t.dims);
  } else {
    t.family_key.clear();
  }
  if (plan) {
    const uint64_t replaced = m.plans_replaced.load(std::memory_order_relaxed);
    lock.unlock();
    CachedPlan* cached =
        t.plans.add(module, generation, replaced, key, std::move(plan), t.counters);
    if (!cached || !start_replay(t, *cached)) run_unplanned(t);  // out of arenas or memory
    return;
  }
  // A new shape of a family that already has a profiled shape is profiled on its first pass: the
  // module is warm (the JIT's profiling runs are behind it), and the family needs three shapes
  // before it can predict the rest.
  // One at a time: threads that meet new shapes at once would otherwise profile more of them
  // than the family needs; the others wait out the usual warm-up meanwhile (a profile a thread
  // never finished cannot hold them back for good).
  int warmup = m.options.warmup_passes;
  if (!t.family_key.empty()) {
    auto f = m.families.find(t.family_key);
    if (f != m.families.end() && f->second.profiles_at_once(key)) warmup = 0;
  }
  const bool due = allowed && ++m.unplanned_passes[key] > warmup && !m.profiling.count(key);
  if (!due) {
    run_unplanned(t);
    // Planned once its warm-up is done: exact blocks (no allocator-retained memory beside the
    // slab), for a key plan() asked for and from a key's second pass on; a shape seen once (a
    // varying input whose family could not be fitted) runs as fast as unplanned (an exact block
    // is a mapping of its own, too slow for passes that will never be planned).
    t.warming = allowed && !m.profiling.count(key) &&
                (m.requested.count(key) || m.unplanned_passes[key] > 1);
    return;
  }
  m.profiling.insert(key);
  if (!t.family_key.empty()) m.families[t.family_key].profile_started();
  lock.unlock();
  t.profile.begin(module, key);
  t.mode = ThreadPass::Mode::kProfile;
  ++t.counters.profiled_passes;
}

const std::string& current_key() { return thread_pass().pass_key; }
uint64_t current_key_serial() { return thread_pass().key_serial; }

OffPlan::OffPlan() : saved_mode_(static_cast<int>(thread_pass().mode)) {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kReplay) t.mode = ThreadPass::Mode::kUnplanned;
}

OffPlan::~OffPlan() { thread_pass().mode = static_cast<ThreadPass::Mode>(saved_mode_); }

Unrecorded::Unrecorded() : saved_(TaggedAllocator::set_thread_unrecorded(true)) {}

Unrecorded::~Unrecorded() { TaggedAllocator::set_thread_unrecorded(saved_); }

ToAllocatorBehind::ToAllocatorBehind() : saved_warming_(thread_pass().warming) {
  thread_pass().warming = false;
}

ToAllocatorBehind::~ToAllocatorBehind() { thread_pass().warming = saved_warming_; }

void allocate_tensor(int64_t node) {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kReplay) {
    t.replay.enter_visit(node);
  } else if (t.mode == ThreadPass::Mode::kProfile) {
    t.profile.enter_visit(node);
  }
}

bool share_inputs_wanted() {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kProfile) return true;
  return t.mode == ThreadPass::Mode::kReplay && t.replay.checks_visit();
}

void share_inputs(ShareKind kind, const ShareInput* inputs, uint32_t count) {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kReplay) {
    t.replay.check_inputs(inputs, count);
  } else if (t.mode == ThreadPass::Mode::kProfile && t.profile.active()) {
    t.profile.record_inputs(kind, inputs, count);
  }
}

void abandon_pass() {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kProfile) abandon_profile(t);
  flush(t);
  t.warming = false;
  t.mode = ThreadPass::Mode::kIdle;
}

void end_pass(int64_t module) {
  ThreadPass& t = thread_pass();
  const bool replayed = t.mode == ThreadPass::Mode::kReplay;
  t.last = PassOutcome{};
  t.last.replayed = replayed;
  t.last.profiled = t.mode == ThreadPass::Mode::kProfile;
  t.last.planned_hits = t.counters.planned_hits;
  t.last.fallbacks = t.counters.all_fallbacks() - t.counters.fallback(replay::Fallback::kEscaping);
  if (replayed) {
    const CompiledPlan& plan = *t.replay.plan();
    t.last.predicted = plan.predicted;
    t.last.slab_bytes = plan.slab_bytes;
    t.last.lower_bound_bytes = plan.lower_bound_bytes;
    // A predicted plan that had no slot for a request of this pass (a size its formula got
    // wrong, an allocation it did not know): the request went to the allocator behind, and the
    // plan goes.
    if (plan.predicted &&
        t.counters.fallbacks[static_cast<int>(replay::Fallback::kNotPlanned)] != 0) {
      t.replay.stop();
      drop_prediction(t.plans, &plan);
    }
  }
  flush(t);
  t.warming = false;
  if (t.mode != ThreadPass::Mode::kProfile || t.profile.module() != module) {
    t.mode = ThreadPass::Mode::kIdle;
    return;
  }
  t.mode = ThreadPass::Mode::kIdle;
  ModuleState& m = module_state(module);
  const std::string key = t.profile.key();
  std::vector<size_t> order;  // the family's placement order, if it has learned one
  if (!t.family_key.empty()) {
    std::lock_guard<std::mutex> lock(m.mutex);
    auto f = m.families.find(t.family_key);
    if (f != m.families.end()) order = f->second.order();
  }
  const bool memory_min = m.options.memory == Memory::kMin;
  ProfileState::Finished pass = t.profile.finish(memory_min);
  Result<CompiledPlan> plan = compile_plan(pass.trace, pass.visit_nodes, m.options.strategy, order,
                                           memory_min ? &pass.claims : nullptr);
  std::unique_lock<std::mutex> lock(m.mutex);
  m.profiling.erase(key);
  family_profile_ended(m, t.family_key);
  if (!plan) {
    TORCH_WARN("memoplan: planning the pass for ", key, " failed: ", plan.error());
    m.unplanned_passes[key] = 0;  // try again after another warm-up
    return;
  }
  plan->key = key;
  plan->family = t.family_key;
  auto shared = std::make_shared<const CompiledPlan>(std::move(*plan));
  m.plans[key] = shared;
  replay::SharedCounters::bump(counters.plans);
  if (!t.family_key.empty()) {
    m.families[t.family_key].add_shape(key, t.dims, pass.visit_nodes, shared->detail);
    learn_family_order(m, t.family_key, lock);
  }
}

}  // namespace runtime_pass

}  // namespace memoplan::torch_ext
