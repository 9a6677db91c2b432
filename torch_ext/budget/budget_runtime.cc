#include "budget_runtime.h"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>

#include "budget_graph.h"
#include "budget_state.h"
#include "module_table.h"
#include "memoplan/planner/budget.h"
#include "weight_file.h"
#include "weight_groups.h"

namespace memoplan::torch_ext::budget {
namespace {

using State = BudgetState;

ModuleTable<State>& states() {
  static auto* table = new ModuleTable<State>();
  return *table;
}

std::shared_ptr<State> find(int64_t id) { return states().find(id); }

}  // namespace

void forget(int64_t id) { states().erase(id); }

namespace {

std::shared_ptr<State> get(int64_t id) {
  std::shared_ptr<State> state = find(id);
  if (!state)
    throw std::runtime_error("memoplan: the module has no memory budget (plan() it with one)");
  return state;
}

BudgetSummary plan_state(State& state, uint64_t budget_bytes) {
  const auto start = std::chrono::steady_clock::now();
  planner::BudgetProblem problem = state.problem;
  problem.budget_bytes = budget_bytes;
  state.apply_conv_facts(problem);  // convolutions learned at their first call
  // An on-demand group counts what passes touched of it (all of it before any was measured).
  for (size_t g = 0; g < problem.groups.size(); ++g) {
    const uint64_t touched = state.touched[g].load();
    if (problem.groups[g].on_demand && touched > 0) problem.groups[g].bytes = touched;
  }
  planner::BudgetPlan plan;
  try {
    plan = planner::plan_budget(problem);
  } catch (const planner::BudgetInfeasible& e) {
    // The planner's message names the budgets in MiB; the exact figure follows.
    throw BudgetTooSmall(
        "memoplan: " + std::string(e.what()) +
            "; smallest feasible budget in bytes: " + std::to_string(e.smallest_bytes),
        e.smallest_bytes);
  }
  BudgetSummary summary;
  summary.budget_bytes = budget_bytes;
  summary.weights_bytes = state.file->bytes();
  summary.activation_bytes = problem.activation_bytes;
  summary.pinned_bytes = plan.pinned_bytes;
  summary.streamed_bytes = plan.streamed_bytes;
  summary.planned_peak_bytes = plan.peak_bytes;
  summary.work_bytes = plan.work_bytes;
  summary.smallest_budget_bytes = plan.smallest_budget_bytes;
  summary.steps = problem.steps;
  summary.groups = static_cast<uint32_t>(problem.groups.size());
  for (uint32_t s : plan.slices) summary.sliced_groups += s > 1;
  summary.weight_file = state.file->path();
  static std::atomic<uint64_t> generations{1};
  state.install(make_schedule(problem, std::move(plan), generations.fetch_add(1)));
  state.problem.budget_bytes = budget_bytes;
  state.budget_bytes = budget_bytes;
  summary.planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  state.last = summary;
  return summary;
}

}  // namespace

void prepare(torch::jit::Module& module, torch::jit::Graph& graph, int64_t id,
             uint64_t budget_bytes, const std::string& dir) {
  // Found on a copy: the module's graph changes only once the weights are in their file (a
  // directory that cannot be written leaves the module as it was).
  const BudgetGraph found = insert_budget_steps(*graph.copy(), id);
  WeightGroups weights = find_weight_groups(module, found);
  auto state = std::make_shared<State>();
  state->problem.steps = std::max<uint32_t>(found.steps, 1);
  state->problem.page_bytes = page_bytes();
  state->problem.groups = std::move(weights.groups);
  state->sliceable_bytes = std::move(weights.sliceable_bytes);
  state->conv = std::move(weights.conv);
  const std::vector<std::vector<c10::StorageImpl*>>& groups = weights.storages;
  state->file = WeightFile::map(groups, weights_dir(dir));
  insert_budget_steps(graph, id);  // the same steps: the copy was made from this graph
  for (size_t g = 0; g < groups.size(); ++g) {
    state->problem.groups[g].bytes = state->file->group_bytes(g);
  }
  state->init_groups(groups.size());
  state->budget_bytes = budget_bytes;
  state->problem.budget_bytes = budget_bytes;
  state->install(make_schedule(state->problem, streaming_plan(state->problem), 0));
  states().put(id, std::move(state));
}

bool budgeted(int64_t id) { return find(id) != nullptr; }

// Weight pages the kernel maps beside a range we load (fault-around: 64 KiB windows, at both ends
// of each range being loaded): measured 60-100 KiB past the plan on vgg16 at a 10% budget.
constexpr uint64_t kFaultAroundSlack = 256 << 10;

BudgetSummary arm(int64_t id, uint64_t slab_bytes) {
  std::shared_ptr<State> state = get(id);
  state->problem.activation_bytes =
      std::max(state->problem.activation_bytes, slab_bytes + kFaultAroundSlack);
  return plan_state(*state, state->budget_bytes);
}

BudgetSummary replan(int64_t id, uint64_t budget_bytes) {
  return plan_state(*get(id), budget_bytes);
}

BudgetSummary summary(int64_t id) {
  std::shared_ptr<State> state = get(id);
  BudgetSummary summary = state->last;
  summary.slicing_refused = state->refused.load();
  return summary;
}

void set_sampling(int64_t id, bool on) { get(id)->sampling.store(on); }

uint64_t resident_peak(int64_t id, bool reset) {
  std::shared_ptr<State> state = get(id);
  return reset ? state->peak.exchange(0) : state->peak.load();
}

void drop_page_cache(int64_t id) { get(id)->file->drop_page_cache(); }

void step(int64_t id, int64_t s) {
  if (std::shared_ptr<State> state = find(id)) state->step(static_cast<uint32_t>(s));
}

Slicer slicer(int64_t id, const void* weight, uint64_t weight_bytes) {
  Slicer slicer;
  std::shared_ptr<State> state = find(id);
  if (!state) return slicer;
  const char* p = static_cast<const char*>(weight);
  const char* base = state->file->base();
  if (p < base || p >= base + state->file->bytes()) return slicer;
  const uint64_t offset = static_cast<uint64_t>(p - base);
  for (size_t g = 0; g < state->file->groups(); ++g) {
    if (state->file->group_offset(g) != offset) continue;
    if (state->sliceable_bytes[g] != weight_bytes) return slicer;
    slicer.slices = state->slices(g);
    slicer.state = state.get();
    slicer.group = g;
    slicer.conv = state->conv[g] != 0;
    slicer.slice_bytes = weight_bytes / static_cast<uint64_t>(std::max(1, slicer.slices));
    slicer.weight_bytes = weight_bytes;
    break;
  }
  return slicer;
}

// Slice i's bytes: [i * slice_bytes, ...), the last one what is left of the weight.
static uint64_t slice_length(const Slicer& s, uint64_t offset) {
  return offset < s.weight_bytes ? std::min(s.slice_bytes, s.weight_bytes - offset) : 0;
}

void Slicer::load(int slice) const {
  const uint64_t offset = static_cast<uint64_t>(slice) * slice_bytes;
  if (slice < slices && slice_length(*this, offset) > 0) {
    state->want(group, offset, slice_length(*this, offset));
  }
}

void Slicer::refused() const { state->refused.fetch_add(1, std::memory_order_relaxed); }

void Slicer::done(int slice) const {
  const uint64_t offset = static_cast<uint64_t>(slice) * slice_bytes;
  if (slice_length(*this, offset) > 0) {
    state->drop_part(group, offset, slice_length(*this, offset));
  }
}

bool Slicer::conv_known(uint32_t* max_slices) const { return state->conv_known(group, max_slices); }

void Slicer::learn_conv(uint32_t max_slices, std::vector<uint64_t> work) const {
  state->learn_conv(group, max_slices, std::move(work));
}

void* Slicer::work_arena(uint64_t bytes) const { return state->work_arena(bytes); }

}  // namespace memoplan::torch_ext::budget
