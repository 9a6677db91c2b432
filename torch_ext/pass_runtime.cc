#include "pass_runtime.h"

#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiled_plan.h"
#include "memoplan/torch/cpu_allocator_swap.h"
#include "memoplan/torch/graph_node.h"
#include "memoplan/torch/profiler.h"
#include "slab.h"

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

ModuleState& module_state(int64_t id) {
  ModuleState* m =
      id >= 0 && id < kMaxModules ? registry[id].load(std::memory_order_acquire) : nullptr;
  TORCH_CHECK(m, "memoplan: unknown planned module ", id,
              " (was the graph rewritten in another process?)");
  return *m;
}

struct Counters {
  std::atomic<uint64_t> passes{0}, planned_passes{0}, profiled_passes{0}, unplanned_passes{0},
      plans{0}, planned_hits{0}, not_planned{0}, escaping{0}, overlap{0}, slabs{0}, slab_bytes{0},
      passed_on{0};
};
Counters counters;

// Per-thread counters of the hot path, added to `counters` at each pass end.
struct PassCounters {
  uint64_t hits = 0, not_planned = 0, escaping = 0, overlap = 0;
  uint64_t passed_on = 0;  // non-empty requests of the pass served by the previous allocator
};

// One thread's state: the pass it is in and the plans (with their slabs) it has used.
struct ThreadPass {
  enum class Mode { kIdle, kReplay, kProfile, kUnplanned };
  struct CachedPlan {
    int64_t module;
    uint64_t generation;
    std::string key;
    std::shared_ptr<const CompiledPlan> plan;
    Slab* slab;
  };

  Mode mode = Mode::kIdle;
  // Replay.
  const CompiledPlan* plan = nullptr;
  Slab* slab = nullptr;
  size_t visit = 0;
  uint32_t cursor = 0, end = 0;
  PassCounters pass_counters;
  // Profile.
  std::unique_ptr<ProfileSession> session;
  std::vector<int64_t> visit_nodes;
  int64_t module = -1;
  std::string key;
  std::string pass_key;  // the key of the pass the thread is in (the tuned ops' layout plans)
  std::vector<CachedPlan> cache;

  ~ThreadPass() {
    for (CachedPlan& c : cache) c.slab->retire();
  }
};

ThreadPass& thread_pass() {
  static thread_local ThreadPass pass;
  return pass;
}

void flush(ThreadPass& t) {
  counters.planned_hits += t.pass_counters.hits;
  counters.not_planned += t.pass_counters.not_planned;
  counters.escaping += t.pass_counters.escaping;
  counters.overlap += t.pass_counters.overlap;
  counters.passed_on += t.pass_counters.passed_on;
  t.pass_counters = {};
}

// ---- The replay allocator: c10's CPU allocator once a module is planned. ----

class ReplayAllocator final : public c10::Allocator {
 public:
  explicit ReplayAllocator(c10::Allocator* next) : next_(next) {}

  c10::DataPtr allocate(size_t bytes) const override {
    ThreadPass& t = thread_pass();
    if (t.mode == ThreadPass::Mode::kReplay && bytes != 0) {
      if (void* p = serve(t, bytes)) {
        return c10::DataPtr(p, p, &delete_block, c10::Device(c10::DeviceType::CPU));
      }
    }
    if (t.mode != ThreadPass::Mode::kIdle && bytes != 0) ++t.pass_counters.passed_on;
    return next_->allocate(bytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }

  static void delete_block(void* p) {
    if (Slab::owns(p)) return Slab::free_block(p);
    next_raw_deleter(p);
  }
  static c10::DeleterFnPtr next_raw_deleter;

 private:
  // The next slot of the current visit with this size; nullptr (counted) when there is none or
  // its memory is still in use.
  static void* serve(ThreadPass& t, size_t bytes) {
    const std::vector<PlannedTensor>& tensors = t.plan->tensors;
    for (uint32_t i = t.cursor; i < t.end; ++i) {
      if (tensors[i].size != bytes) continue;
      t.cursor = i + 1;
      if (!tensors[i].planned) {
        ++t.pass_counters.escaping;
        return nullptr;
      }
      void* p = t.slab->place(tensors[i].offset, bytes);
      ++(p ? t.pass_counters.hits : t.pass_counters.overlap);
      return p;
    }
    ++t.pass_counters.not_planned;
    return nullptr;
  }

  c10::Allocator* next_;
};
c10::DeleterFnPtr ReplayAllocator::next_raw_deleter = nullptr;

void install_replay_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* next = c10::GetAllocator(c10::DeviceType::CPU);
    ReplayAllocator::next_raw_deleter = next->raw_deleter();
    // Never uninstalled: tensors it served may outlive every planned module.
    static ReplayAllocator* replay = new ReplayAllocator(next);
    // Kept, never destroyed: its destructor would put the previous allocator back.
    static CpuAllocatorSwap* installed = new CpuAllocatorSwap(replay);
    (void)installed;
  });
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
  t.slab = cached.slab;
  t.visit = 0;
  const PlannedVisit& first = t.plan->visits.front();
  t.cursor = first.first_slot;
  t.end = first.first_slot + first.slot_count;
  ++counters.planned_passes;
}

}  // namespace

int64_t register_module(const PlanOptions& options) {
  install_replay_allocator();
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
  t.pass_key = key;
  ++counters.passes;
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
    Slab* slab = Slab::create(plan->slab_bytes);
    if (!slab) {  // out of slabs or memory: this thread runs the key unplanned
      t.mode = ThreadPass::Mode::kUnplanned;
      ++counters.unplanned_passes;
      return;
    }
    ++counters.slabs;
    counters.slab_bytes += plan->slab_bytes;
    t.cache.push_back({module, generation, key, std::move(plan), slab});
    return start_replay(t, t.cache.back());
  }
  const bool allowed = m.options.plan_new_keys || m.requested.count(key);
  const bool due =
      allowed && ++m.unplanned_passes[key] > m.options.warmup_passes && !m.profiling.count(key);
  if (!due) {
    t.mode = ThreadPass::Mode::kUnplanned;
    ++counters.unplanned_passes;
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
  ++counters.profiled_passes;
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
    const std::vector<PlannedVisit>& visits = t.plan->visits;
    size_t next = t.visit + 1;
    for (size_t look = 0; look < 8 && next + look < visits.size(); ++look) {
      if (visits[next + look].node == node) {
        next += look;
        break;
      }
    }
    if (next < visits.size() && visits[next].node == node) {
      t.visit = next;
      t.cursor = visits[next].first_slot;
      t.end = t.cursor + visits[next].slot_count;
    } else {
      t.cursor = t.end;  // nothing planned until the graph is back in step
    }
  } else if (t.mode == ThreadPass::Mode::kProfile) {
    t.visit_nodes.push_back(node);
    set_current_node(static_cast<int64_t>(t.visit_nodes.size() - 1));
  }
}

void end_pass(int64_t module) {
  ThreadPass& t = thread_pass();
  flush(t);
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
  ++counters.plans;
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

PlanStats plan_stats() {
  const runtime_pass::Counters& c = runtime_pass::counters;
  PlanStats s;
  s.passes = c.passes;
  s.planned_passes = c.planned_passes;
  s.profiled_passes = c.profiled_passes;
  s.unplanned_passes = c.unplanned_passes;
  s.plans = c.plans;
  s.planned_hits = c.planned_hits;
  s.fallback_not_planned = c.not_planned;
  s.fallback_escaping = c.escaping;
  s.fallback_overlap = c.overlap;
  s.slabs = c.slabs;
  s.slab_bytes = c.slab_bytes;
  s.tensor_mallocs = c.passed_on;
  return s;
}

PlanStats operator-(const PlanStats& a, const PlanStats& b) {
  PlanStats d;
  d.passes = a.passes - b.passes;
  d.planned_passes = a.planned_passes - b.planned_passes;
  d.profiled_passes = a.profiled_passes - b.profiled_passes;
  d.unplanned_passes = a.unplanned_passes - b.unplanned_passes;
  d.plans = a.plans - b.plans;
  d.planned_hits = a.planned_hits - b.planned_hits;
  d.fallback_not_planned = a.fallback_not_planned - b.fallback_not_planned;
  d.fallback_escaping = a.fallback_escaping - b.fallback_escaping;
  d.fallback_overlap = a.fallback_overlap - b.fallback_overlap;
  d.slabs = a.slabs - b.slabs;
  d.slab_bytes = a.slab_bytes - b.slab_bytes;
  d.tensor_mallocs = a.tensor_mallocs - b.tensor_mallocs;
  return d;
}

std::string to_string(const PlanStats& s) {
  return "passes " + std::to_string(s.passes) + " (planned " + std::to_string(s.planned_passes) +
         ", profiled " + std::to_string(s.profiled_passes) + ", unplanned " +
         std::to_string(s.unplanned_passes) + "), plans " + std::to_string(s.plans) +
         ", planned hits " + std::to_string(s.planned_hits) + ", fallbacks not_planned " +
         std::to_string(s.fallback_not_planned) + " escaping " +
         std::to_string(s.fallback_escaping) + " overlap " + std::to_string(s.fallback_overlap) +
         ", slabs " + std::to_string(s.slabs) + " (" + std::to_string(s.slab_bytes) +
         " bytes), tensor mallocs " + std::to_string(s.tensor_mallocs);
}

}  // namespace memoplan::torch_ext
