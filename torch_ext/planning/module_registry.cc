// The planned modules: their registry (ids a rewritten graph's AllocateSlab carries) and what
// plan() asks of a module's plans (pass_runtime.h). Each module's state is module_state.h's.
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "family_plans.h"
#include "flat_executor.h"
#include "module_state.h"
#include "pass_runtime.h"
#include "tagged_allocator.h"
#include "thread_pass.h"
#include "thread_plans.h"

namespace memoplan::torch_ext::runtime_pass {
namespace {

// Module states by id, read without a lock on every pass; written once each, never freed (a
// forgotten module's keeps a few hundred bytes). 512 KiB of address space, its pages touched as
// ids are taken: a server that loads a model anew every hour takes 7 years to run out.
constexpr int64_t kMaxModules = 65536;
std::mutex registry_mutex;  // registration only
std::atomic<ModuleState*> registry[kMaxModules];
std::atomic<int64_t> registered{0};
std::atomic<uint64_t> forgotten{0};

}  // namespace

ModuleState& module_state(int64_t id) {
  ModuleState* m =
      id >= 0 && id < kMaxModules ? registry[id].load(std::memory_order_acquire) : nullptr;
  TORCH_CHECK(m, "memoplan: unknown planned module ", id,
              " (was the graph rewritten in another process?)");
  return *m;
}

int64_t register_module(const PlanOptions& options, uint64_t weight_bytes) {
  install_replay_allocator();
  TaggedAllocator::instance().prepare();  // the warm-up's exact blocks need the tag region
  std::lock_guard<std::mutex> lock(registry_mutex);
  const int64_t id = registered.load();
  TORCH_CHECK(id < kMaxModules, "memoplan: more than ", kMaxModules, " planned modules");
  auto* m = new ModuleState();
  m->options = options;
  m->weight_bytes = weight_bytes;
  registry[id].store(m, std::memory_order_release);
  registered.store(id + 1);
  return id;
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

PlanSummary run_until_planned(int64_t module, const std::string& key, int warmup_passes,
                              const std::function<void()>& pass) {
  request_key(module, key);
  PlanSummary summary;
  bool planned = has_plan(module, key, &summary);
  for (int i = 0; !planned && i < warmup_passes + 8; ++i) {
    pass();
    planned = has_plan(module, key, &summary);
  }
  if (!planned) {
    throw std::runtime_error("memoplan: no plan was made for the inputs " + key +
                             " (planning failed; see the warning above)");
  }
  return summary;
}

void forget_plans(int64_t module) {
  ModuleState& m = module_state(module);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.plans.clear();
  m.unplanned_passes.clear();
  m.families.clear();
  ++m.generation;
}

uint64_t forgotten_modules() { return forgotten.load(std::memory_order_acquire); }

void forget_module(int64_t module) {
  forget_plans(module);
  flat::forget(module);  // its calls take the interpreter (and plan anew)
  ModuleState& m = module_state(module);
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    m.requested.clear();
  }
  m.forgotten.store(true, std::memory_order_release);
  forgotten.fetch_add(1, std::memory_order_acq_rel);
  // The calling thread's own slabs of it go now (plan()'s last passes ran on this thread).
  ThreadPass& t = thread_pass();
  if (t.plans.drop_forgotten()) t.replay.stop();
}

SlabBytes slab_bytes(int64_t module) {
  ModuleState& m = module_state(module);
  SlabBytes bytes;
  bytes.held = m.arena_bytes.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(m.mutex);
  for (const auto& [key, plan] : m.plans) {
    bytes.largest_plan = std::max(bytes.largest_plan, plan->slab_bytes);
  }
  return bytes;
}

uint64_t module_weight_bytes(int64_t module) {
  return module >= 0 ? module_state(module).weight_bytes : 0;
}

const PlanOptions* module_options(int64_t module) {
  return module >= 0 ? &module_state(module).options : nullptr;
}

uint64_t discard_thread_slabs(int64_t module) { return thread_pass().plans.discard_pages(module); }

FamilyCounts family_counts() {
  return {family_plans_made(), family_mispredictions_seen(), largest_slab_bytes()};
}

}  // namespace memoplan::torch_ext::runtime_pass
