#include "family_plans.h"

#include <atomic>
#include <optional>
#include <utility>

#include "memoplan/planner/planner.h"
#include "thread_pass.h"  // process_counters

namespace memoplan::torch_ext::runtime_pass {
namespace {

// How long a family may spend learning its placement order (`best` on its largest fitted shape,
// once per fit): 0.2-0.8 ms on the zoo's models, which reach their lower bound; the limit bounds
// the order search on passes that do not.
constexpr double kLearnOrderSeconds = 0.05;

std::atomic<uint64_t> family_plans{0}, family_mispredictions{0};

}  // namespace

std::shared_ptr<const CompiledPlan> predict_plan(ModuleState& m, const std::string& key,
                                                 const std::string& family_key,
                                                 const std::vector<int64_t>& dims) {
  auto it = m.families.find(family_key);
  if (it == m.families.end()) return nullptr;
  FamilyState& f = it->second;
  std::optional<Trace> trace = f.predict(key, dims);
  if (!trace) return nullptr;
  Result<CompiledPlan> plan = compile_plan(*trace, f.visit_nodes(), m.options.strategy, f.order());
  if (!plan) return nullptr;
  plan->key = key;
  plan->family = family_key;
  plan->predicted = true;
  // The trace and plan behind it (plan_detail(), for heap maps) are kept for profiled plans only:
  // some 30 KiB a predicted bert_encoder plan, up to FamilyState::kMaxPredicted of them.
  plan->detail.reset();
  auto shared = std::make_shared<const CompiledPlan>(std::move(*plan));
  m.plans[key] = shared;
  // Threads that cached an evicted plan keep theirs; the module plans it again if it comes back.
  if (std::string evicted = f.note_predicted(key); !evicted.empty()) m.plans.erase(evicted);
  family_plans.fetch_add(1, std::memory_order_relaxed);
  replay::SharedCounters::bump(process_counters().plans);
  return shared;
}

bool refresh_family_plan(ModuleState& m, CachedPlan& cached) {
  if (m.plans_replaced.load(std::memory_order_acquire) == cached.replaced) return true;
  std::lock_guard<std::mutex> lock(m.mutex);
  cached.replaced = m.plans_replaced.load(std::memory_order_relaxed);
  auto it = m.plans.find(cached.key);
  if (it == m.plans.end()) return false;
  cached.plan = it->second;
  return true;
}

void learn_family_order(ModuleState& m, const std::string& family_key,
                        std::unique_lock<std::mutex>& lock) {
  auto f = m.families.find(family_key);
  if (f == m.families.end()) return;
  const std::shared_ptr<const PlanDetail> from = f->second.order_wanted();
  if (!from) return;
  lock.unlock();
  memoplan::PlanOptions options;  // the planner's
  options.strategy = "best";
  options.strategy_options.time_limit_s = kLearnOrderSeconds;
  Result<Plan> best = plan_trace(from->trace, options);
  std::vector<size_t> order;
  if (best) order = placement_order(from->trace, *best);
  lock.lock();
  f = m.families.find(family_key);  // forget_plans may have cleared it meanwhile
  if (order.empty() || f == m.families.end() || !f->second.set_order(from, std::move(order))) {
    return;
  }
  const FamilyState& family = f->second;
  bool replaced = false;
  family.for_each_profiled([&](const std::string& key, const std::shared_ptr<const PlanDetail>& d,
                               const std::vector<int64_t>& visits) {
    auto p = m.plans.find(key);
    if (p == m.plans.end() || p->second->predicted) return;
    Result<CompiledPlan> plan = compile_plan(d->trace, visits, m.options.strategy, family.order());
    if (!plan || plan->slab_bytes >= p->second->slab_bytes) return;
    plan->key = key;
    plan->family = family_key;
    p->second = std::make_shared<const CompiledPlan>(std::move(*plan));
    replaced = true;
  });
  // Plans predicted by other threads while the order was being learned (without it) go: their
  // keys are predicted again, in the order, at their next pass.
  for (auto p = m.plans.begin(); p != m.plans.end();) {
    if (p->second->predicted && !p->second->ordered && p->second->family == family_key) {
      p = m.plans.erase(p);
      replaced = true;
    } else {
      ++p;
    }
  }
  if (replaced) m.plans_replaced.fetch_add(1, std::memory_order_release);
}

void drop_prediction(ThreadPlans& plans, const CompiledPlan* plan) {
  family_mispredictions.fetch_add(1, std::memory_order_relaxed);
  CachedPlan* cached = plans.find(plan);
  if (!cached) return;
  ModuleState& m = module_state(cached->module);
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    auto p = m.plans.find(plan->key);
    if (p != m.plans.end() && p->second.get() == plan) {
      m.plans.erase(p);
      m.unplanned_passes[plan->key] = 0;
      for (const std::string& key : m.families[plan->family].note_mispredicted(plan->key)) {
        m.plans.erase(key);
      }
    }
  }
  plans.erase(cached);  // last: it holds the plan
}

uint64_t family_plans_made() { return family_plans.load(std::memory_order_relaxed); }
uint64_t family_mispredictions_seen() {
  return family_mispredictions.load(std::memory_order_relaxed);
}

}  // namespace memoplan::torch_ext::runtime_pass
