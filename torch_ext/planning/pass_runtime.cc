#include "pass_runtime.h"

#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "arena_region.h"
#include "compiled_plan.h"
#include "memoplan/torch/graph_node.h"
#include "memoplan/torch/profiler.h"
#include "tagged_allocator.h"
#include "thread_pass.h"

namespace memoplan::torch_ext {
namespace runtime_pass {
namespace {

struct ModuleState {
  PlanOptions options;
  std::mutex mutex;  // everything below; taken once per new (thread, key), never per pass
  std::unordered_map<std::string, std::shared_ptr<const CompiledPlan>> plans;
  std::unordered_map<std::string, int> unplanned_passes;  // per key, before its profile
  std::unordered_set<std::string> profiling;              // keys a thread is profiling now
  std::unordered_set<std::string> requested;              // keys plan() was called with
  std::atomic<uint64_t> generation{0};                    // bumped by forget_plans
};

// Module states by id, read without a lock on every pass; written once each, never freed.
constexpr int64_t kMaxModules = 4096;
std::mutex registry_mutex;  // registration only
std::atomic<ModuleState*> registry[kMaxModules];
std::atomic<int64_t> registered{0};

// How many visits on a graph that took another path finds its node's visit.
constexpr uint32_t kVisitLookahead = 8;

ModuleState& module_state(int64_t id) {
  ModuleState* m =
      id >= 0 && id < kMaxModules ? registry[id].load(std::memory_order_acquire) : nullptr;
  TORCH_CHECK(m, "memoplan: unknown planned module ", id,
              " (was the graph rewritten in another process?)");
  return *m;
}

replay::SharedCounters counters;

// Adds the pass's counters to the process's.
void flush(ThreadPass& t) {
  counters.add(t.counters);
  t.counters = {};
}

// ---- Pass begin and end. ----

void abandon_profile(ThreadPass& t) {
  if (!t.session) return;
  t.session->end();  // the trace of an unfinished pass is dropped
  t.session.reset();
  set_current_node(kUnknownNode);
  ModuleState& m = module_state(t.module);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.profiling.erase(t.key);
}

void start_replay(ThreadPass& t, ThreadPass::CachedPlan& cached) {
  t.mode = ThreadPass::Mode::kReplay;
  t.plan = cached.plan.get();
  t.arena = cached.arena;
  t.visit = 0;
  const replay::Visit& first = t.plan->visits.front();
  t.matcher.start_window(t.plan->tensors.data(), first.first_slot, first.slot_count);
  ++t.counters.planned_passes;
}

}  // namespace

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

void allocate_slab(int64_t module, const std::string& key) {
  ThreadPass& t = thread_pass();
  // A previous pass that never reached its end (an exception in forward): close it first.
  if (t.mode == ThreadPass::Mode::kProfile) abandon_profile(t);
  t.mode = ThreadPass::Mode::kIdle;
  t.warming = false;
  t.pass_key = key;
  ++t.counters.passes;
  ModuleState& m = module_state(module);
  for (ThreadPass::CachedPlan& cached : t.cache) {
    if (cached.module == module && cached.generation == m.generation.load() && cached.key == key) {
      return start_replay(t, cached);
    }
  }
  std::unique_lock<std::mutex> lock(m.mutex);
  if (auto it = m.plans.find(key); it != m.plans.end()) {
    std::shared_ptr<const CompiledPlan> plan = it->second;
    const uint64_t generation = m.generation.load();
    lock.unlock();
    replay::ArenaRegion::Failure failure;
    replay::Arena* arena = arena_region().create(plan->slab_bytes, thread_token(), &failure);
    if (!arena) {  // out of arenas or memory: this thread runs the key unplanned
      t.mode = ThreadPass::Mode::kUnplanned;
      ++t.counters.unplanned_passes;
      return;
    }
    ++t.counters.slabs;
    t.counters.slab_bytes += plan->slab_bytes;
    t.cache.push_back({module, generation, key, std::move(plan), arena});
    return start_replay(t, t.cache.back());
  }
  const bool allowed = m.options.plan_new_keys || m.requested.count(key);
  const bool due =
      allowed && ++m.unplanned_passes[key] > m.options.warmup_passes && !m.profiling.count(key);
  if (!due) {
    t.mode = ThreadPass::Mode::kUnplanned;
    t.warming = allowed && !m.profiling.count(key);  // planned once its warm-up is done
    ++t.counters.unplanned_passes;
    return;
  }
  m.profiling.insert(key);
  lock.unlock();
  ProfileOptions options;
  options.meta.input_shapes = key;
  options.meta.source = "memoplan_torch";
  t.session = std::make_unique<ProfileSession>(options);
  t.session->begin();
  t.visit_nodes.assign(1, kUnknownNode);
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
    set_current_node(static_cast<int64_t>(t.visit_nodes.size() - 1));
  }
}

void end_pass(int64_t module) {
  ThreadPass& t = thread_pass();
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
  Result<CompiledPlan> plan = compile_plan(trace, t.visit_nodes, m.options.strategy);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.profiling.erase(t.key);
  if (!plan) {
    TORCH_WARN("memoplan: planning the pass for ", t.key, " failed: ", plan.error());
    m.unplanned_passes[t.key] = 0;  // try again after another warm-up
    return;
  }
  plan->key = t.key;
  m.plans[t.key] = std::make_shared<const CompiledPlan>(std::move(*plan));
  replay::SharedCounters::bump(counters.plans);
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
  ++m.generation;
}

}  // namespace runtime_pass

}  // namespace memoplan::torch_ext
