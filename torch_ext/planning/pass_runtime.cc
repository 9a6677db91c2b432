#include "pass_runtime.h"

#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "arena_region.h"
#include "compiled_plan.h"
#include "family_plans.h"
#include "family_state.h"
#include "memoplan/torch/graph_node.h"
#include "memoplan/torch/profiler.h"
#include "module_state.h"
#include "tagged_allocator.h"
#include "thread_pass.h"
#include "thread_plans.h"

namespace memoplan::torch_ext {
namespace runtime_pass {
namespace {

// Module states by id, read without a lock on every pass; written once each, never freed.
constexpr int64_t kMaxModules = 4096;
std::mutex registry_mutex;  // registration only
std::atomic<ModuleState*> registry[kMaxModules];
std::atomic<int64_t> registered{0};

// How many visits on a graph that took another path finds its node's visit.
constexpr uint32_t kVisitLookahead = 8;

replay::SharedCounters counters;

// Adds the pass's counters to the process's.
void flush(ThreadPass& t) {
  counters.add(t.counters);
  t.counters = {};
}

// ---- Pass begin and end. ----

// A profiled pass of one of the family's keys ended (under the module's lock).
void family_profile_ended(ModuleState& m, const std::string& family_key) {
  if (family_key.empty()) return;
  auto f = m.families.find(family_key);
  if (f != m.families.end()) f->second.profile_ended();
}

void abandon_profile(ThreadPass& t) {
  if (!t.session) return;
  t.session->end();  // the trace of an unfinished pass is dropped
  t.session.reset();
  set_current_node(kUnknownNode);
  ModuleState& m = module_state(t.module);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.profiling.erase(t.key);
  family_profile_ended(m, t.family_key);
}

}  // namespace

ModuleState& module_state(int64_t id) {
  ModuleState* m =
      id >= 0 && id < kMaxModules ? registry[id].load(std::memory_order_acquire) : nullptr;
  TORCH_CHECK(m, "memoplan: unknown planned module ", id,
              " (was the graph rewritten in another process?)");
  return *m;
}

ThreadPass& thread_pass() {
  static thread_local ThreadPass pass;
  return pass;
}

replay::SharedCounters& process_counters() { return counters; }

int64_t register_module(const PlanOptions& options) {
  install_replay_allocator();
  TaggedAllocator::instance().prepare();  // the warm-up's exact blocks need the tag region
  std::lock_guard<std::mutex> lock(registry_mutex);
  const int64_t id = registered.load();
  TORCH_CHECK(id < kMaxModules, "memoplan: more than ", kMaxModules, " planned modules");
  auto* m = new ModuleState();
  m->options = options;
  registry[id].store(m, std::memory_order_release);
  registered.store(id + 1);
  return id;
}

void allocate_slab(int64_t module, const std::string& key, FamilyOf family) {
  ThreadPass& t = thread_pass();
  // A previous pass that never reached its end (an exception in forward): close it first.
  if (t.mode == ThreadPass::Mode::kProfile) abandon_profile(t);
  t.mode = ThreadPass::Mode::kIdle;
  t.warming = false;
  t.pass_key = key;
  ++t.counters.passes;
  ModuleState& m = module_state(module);
  const uint64_t generation = m.generation.load();
  if (t.generations_seen.size() <= static_cast<size_t>(module)) {
    t.generations_seen.resize(static_cast<size_t>(module) + 1, 0);
  }
  if (t.generations_seen[static_cast<size_t>(module)] != generation) {
    forget_thread_plans(t, module);  // forget_plans: this thread's slabs of the module go
    t.generations_seen[static_cast<size_t>(module)] = generation;
  }
  for (size_t i = 0; i < t.cache.size(); ++i) {
    ThreadPass::CachedPlan& cached = t.cache[i];
    if (cached.module == module && cached.key == key) {
      if (!cached.arena && !refresh_family_plan(m, cached)) {
        t.cache[i] = std::move(t.cache.back());  // dropped by the module: looked up anew below
        t.cache.pop_back();
        break;
      }
      if (start_replay(t, cached)) return;
      t.mode = ThreadPass::Mode::kUnplanned;  // no arena to be had: this pass runs unplanned
      ++t.counters.unplanned_passes;
      return;
    }
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
    ThreadPass::CachedPlan* cached =
        cache_plan(t, module, generation, replaced, key, std::move(plan));
    if (!cached || !start_replay(t, *cached)) {  // out of arenas or memory: runs unplanned
      t.mode = ThreadPass::Mode::kUnplanned;
      ++t.counters.unplanned_passes;
    }
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
    t.mode = ThreadPass::Mode::kUnplanned;
    // Planned once its warm-up is done: exact blocks (no allocator-retained memory beside the
    // slab), for a key plan() asked for and from a key's second pass on; a shape seen once (a
    // varying input whose family could not be fitted) runs as fast as unplanned (an exact block
    // is a mapping of its own, too slow for passes that will never be planned).
    t.warming = allowed && !m.profiling.count(key) &&
                (m.requested.count(key) || m.unplanned_passes[key] > 1);
    ++t.counters.unplanned_passes;
    return;
  }
  m.profiling.insert(key);
  if (!t.family_key.empty()) m.families[t.family_key].profile_started();
  lock.unlock();
  ProfileOptions options;
  options.meta.input_shapes = key;
  options.meta.source = "memoplan_torch";
  t.session = std::make_unique<ProfileSession>(options);
  t.session->begin();
  t.visit_nodes.assign(1, kUnknownNode);
  t.visit_ticks.assign(1, 0);
  t.claims.clear();
  set_current_node(0);
  t.module = module;
  t.key = key;
  t.mode = ThreadPass::Mode::kProfile;
  ++t.counters.profiled_passes;
}

const std::string& current_key() { return thread_pass().pass_key; }

OffPlan::OffPlan() : saved_mode_(static_cast<int>(thread_pass().mode)) {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kReplay) t.mode = ThreadPass::Mode::kUnplanned;
}

OffPlan::~OffPlan() { thread_pass().mode = static_cast<ThreadPass::Mode>(saved_mode_); }

Unrecorded::Unrecorded() : saved_(TaggedAllocator::set_thread_unrecorded(true)) {}

Unrecorded::~Unrecorded() { TaggedAllocator::set_thread_unrecorded(saved_); }

void allocate_tensor(int64_t node) {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kReplay) {
    // The next visit should be this node's; a graph that took another path (a different branch,
    // more loop iterations) finds it a few visits on, or gets no slots until it is back in step.
    const std::vector<replay::Visit>& visits = t.plan->visits;
    const uint32_t next = replay::next_visit(visits.data(), static_cast<uint32_t>(visits.size()),
                                             t.visit, node, kVisitLookahead);
    if (next != replay::Matcher::kNone) {
      t.visit = next;
      t.matcher.start_window(t.plan->tensors.data(), visits[next].first_slot,
                             visits[next].slot_count);
    } else {
      t.matcher.stop();  // nothing planned until the graph is back in step
    }
  } else if (t.mode == ThreadPass::Mode::kProfile) {
    t.visit_nodes.push_back(node);
    t.visit_ticks.push_back(t.session->tick());
    set_current_node(static_cast<int64_t>(t.visit_nodes.size() - 1));
  }
}

bool share_inputs_wanted() {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kProfile) return true;
  if (t.mode != ThreadPass::Mode::kReplay) return false;
  const std::vector<uint32_t>& begin = t.plan->check_begin;
  if (t.visit + 1 < begin.size() && begin[t.visit] != begin[t.visit + 1]) return true;
  t.permits.clear();  // no output of this visit lies over live blocks
  return false;
}

void share_inputs(ShareKind kind, const ShareInput* inputs, uint32_t count) {
  ThreadPass& t = thread_pass();
  if (t.mode == ThreadPass::Mode::kReplay) {
    // The blocks the plan lays this node's output over, if they are where it put them.
    t.permits.clear();
    t.permit_visit = t.visit;
    const CompiledPlan& plan = *t.plan;
    if (plan.check_begin.empty() || t.visit + 1 >= plan.check_begin.size()) return;
    const char* base = t.arena->base();
    for (uint32_t i = plan.check_begin[t.visit]; i < plan.check_begin[t.visit + 1]; ++i) {
      const ShareCheck& c = plan.share_checks[i];
      if (c.index < count && inputs[c.index].data == base + c.offset) {
        t.permits.push_back({c.offset, c.offset + c.bytes});
      }
    }
    std::sort(t.permits.begin(), t.permits.end(),
              [](const replay::ByteRange& a, const replay::ByteRange& b) { return a.lo < b.lo; });
    size_t merged = 0;
    for (size_t i = 0; i < t.permits.size(); ++i) {
      if (merged && t.permits[merged - 1].hi >= t.permits[i].lo) {
        t.permits[merged - 1].hi = std::max(t.permits[merged - 1].hi, t.permits[i].hi);
      } else {
        t.permits[merged++] = t.permits[i];
      }
    }
    t.permits.resize(merged);
    return;
  }
  if (t.mode != ThreadPass::Mode::kProfile || !t.session) return;
  ShareClaim claim;
  claim.visit = static_cast<uint32_t>(t.visit_nodes.size() - 1);
  claim.kind = kind;
  claim.complete = true;
  uint64_t offset = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const ShareInput& in = inputs[i];
    std::optional<uint64_t> row;
    if (in.candidate) row = t.session->allocation_of(in.data);
    if (row) {
      claim.inputs.push_back({i, *row, in.bytes, offset});
    } else {
      claim.complete = false;
    }
    offset += in.bytes;
  }
  claim.total_bytes = offset;
  if (!claim.inputs.empty()) t.claims.push_back(std::move(claim));
}

void end_pass(int64_t module) {
  ThreadPass& t = thread_pass();
  t.last = PassOutcome{};
  t.last.replayed = t.mode == ThreadPass::Mode::kReplay;
  t.last.profiled = t.mode == ThreadPass::Mode::kProfile;
  t.last.planned_hits = t.counters.planned_hits;
  t.last.fallbacks = t.counters.all_fallbacks() - t.counters.fallback(replay::Fallback::kEscaping);
  if (t.mode == ThreadPass::Mode::kReplay) {
    t.last.predicted = t.plan->predicted;
    t.last.slab_bytes = t.plan->slab_bytes;
    t.last.lower_bound_bytes = t.plan->lower_bound_bytes;
  }
  // A predicted plan that had no slot for a request of this pass (a size its formula got wrong,
  // an allocation it did not know): the request went to the allocator behind, and the plan goes.
  if (t.mode == ThreadPass::Mode::kReplay && t.plan->predicted &&
      t.counters.fallbacks[static_cast<int>(replay::Fallback::kNotPlanned)] != 0) {
    drop_prediction(t);
  }
  flush(t);
  t.warming = false;
  if (t.mode != ThreadPass::Mode::kProfile || t.module != module) {
    t.mode = ThreadPass::Mode::kIdle;
    return;
  }
  Trace trace = t.session->end();
  t.session.reset();
  set_current_node(kUnknownNode);
  t.mode = ThreadPass::Mode::kIdle;
  ModuleState& m = module_state(module);
  std::vector<size_t> order;  // the family's placement order, if it has learned one
  if (!t.family_key.empty()) {
    std::lock_guard<std::mutex> lock(m.mutex);
    auto f = m.families.find(t.family_key);
    if (f != m.families.end()) order = f->second.order();
  }
  const bool memory_min = m.options.memory == Memory::kMin;
  if (memory_min) resolve_claims(trace, t.claims, t.visit_ticks);
  Result<CompiledPlan> plan = compile_plan(trace, t.visit_nodes, m.options.strategy, order,
                                           memory_min ? &t.claims : nullptr);
  t.claims.clear();
  std::unique_lock<std::mutex> lock(m.mutex);
  m.profiling.erase(t.key);
  family_profile_ended(m, t.family_key);
  if (!plan) {
    TORCH_WARN("memoplan: planning the pass for ", t.key, " failed: ", plan.error());
    m.unplanned_passes[t.key] = 0;  // try again after another warm-up
    return;
  }
  plan->key = t.key;
  plan->family = t.family_key;
  auto shared = std::make_shared<const CompiledPlan>(std::move(*plan));
  m.plans[t.key] = shared;
  replay::SharedCounters::bump(counters.plans);
  if (!t.family_key.empty()) {
    m.families[t.family_key].add_shape(t.key, t.dims, t.visit_nodes, shared->detail);
    learn_family_order(m, t.family_key, lock);
  }
}

bool has_plan(int64_t module, const std::string& key, PlanSummary* summary) {
  ModuleState& m = module_state(module);
  std::lock_guard<std::mutex> lock(m.mutex);
  auto it = m.plans.find(key);
  if (it == m.plans.end()) return false;
  if (summary) {
    const CompiledPlan& p = *it->second;
    summary->key = key;
    summary->slab_bytes = p.slab_bytes;
    summary->lower_bound_bytes = p.lower_bound_bytes;
    summary->offset_lower_bound_bytes = p.offset_lower_bound_bytes;
    summary->shared_tensors = p.shared_tensors;
    summary->coalesced_bytes = p.shared_bytes;
    summary->planned_bytes = p.planned_bytes;
    summary->planned_tensors = p.planned_tensors;
    summary->escaping_tensors = p.escaping_tensors;
    summary->visits = p.visits.size() - 1;
    summary->strategy = p.strategy;
    summary->planning_ms = p.planning_ms;
  }
  return true;
}

std::shared_ptr<const PlanDetail> plan_detail(int64_t module, const std::string& key) {
  ModuleState& m = module_state(module);
  std::lock_guard<std::mutex> lock(m.mutex);
  auto it = m.plans.find(key);
  return it == m.plans.end() ? nullptr : it->second->detail;
}

void request_key(int64_t module, const std::string& key) {
  ModuleState& m = module_state(module);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.requested.insert(key);
}

void forget_plans(int64_t module) {
  ModuleState& m = module_state(module);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.plans.clear();
  m.unplanned_passes.clear();
  m.families.clear();
  ++m.generation;
}

FamilyCounts family_counts() {
  return {family_plans_made(), family_mispredictions_seen(), largest_slab_bytes()};
}

}  // namespace runtime_pass

}  // namespace memoplan::torch_ext
