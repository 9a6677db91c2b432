// Planning under a memory budget (FlexNN, ../shared/papers/flexnn-memory-budget.txt): weights
// live in a file-backed mapping and are resident only from the step that loads them to the step
// that last uses them, unless pinned; a weight too large for the budget on its own is sliced
// (computed a slice at a time, each slice dropped after use). A pass is a sequence of steps (the
// graph's ops that read weights); the resident bytes at a step are the activations (the slab,
// resident for the whole pass) plus the pinned weights plus the unpinned ones whose window
// [load step, last use] holds the step. plan_budget() chooses slices, pins and load steps so that
// figure stays under the budget at every step. docs/BUDGET.md.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace memoplan::planner {

// Weights that are loaded and dropped together (a layer's weight, bias, ...: the tensors one
// window covers), as bytes of the mapping (page multiples).
struct WeightGroup {
  uint64_t bytes = 0;
  uint32_t first_step = 0;  // the first step that reads it
  uint32_t last_step = 0;   // the last: dropped after it
  // How many slices the step may compute it in (1: not sliceable). Only a group read by one step
  // may be sliced. Its slice resident while computing is bytes / slices (rounded up to a page),
  // and the next slice is loaded meanwhile: two slices in all.
  uint32_t max_slices = 1;
  // Read where it lies (a gathered weight: an embedding's lookups touch only their rows): never
  // loaded ahead or pinned, its pages come in by fault; `bytes` is then what its step touches.
  bool on_demand = false;
  // Working memory its step needs besides the weights when the group is computed in 2^k slices:
  // work_bytes[k] (a convolution's re-laid-out weights, input and output parts and scratchpad;
  // an index past the end reads the last). Empty: none. One arena serves every group's step, so
  // it is resident the whole pass and as large as the most any group needs under the plan.
  std::vector<uint64_t> work_bytes;
};

struct BudgetProblem {
  uint64_t budget_bytes = 0;
  uint64_t activation_bytes = 0;  // the slab: resident the whole pass
  uint32_t steps = 0;             // every group's steps are below this
  std::vector<WeightGroup> groups;
  uint64_t page_bytes = 4096;
  // A group is loaded at most this many steps before its first use (overlapped with the steps
  // between), where the budget leaves room.
  uint32_t max_lead = 4;
};

struct BudgetPlan {
  // Per group.
  std::vector<uint8_t> pinned;      // resident the whole pass (loaded once)
  std::vector<uint32_t> load_step;  // loaded when this step begins (<= first_step)
  std::vector<uint32_t> slices;     // 1: whole
  uint64_t peak_bytes = 0;          // the most resident at a step: activations and work included
  uint64_t work_bytes = 0;          // the work arena: the most any group's step needs (WeightGroup)
  uint64_t pinned_bytes = 0;
  uint64_t streamed_bytes = 0;         // weight bytes loaded per pass (unpinned groups)
  uint64_t smallest_budget_bytes = 0;  // the least any plan of this problem can meet
};

// The budget is below what any plan can meet: the activations, the work arena and the weights
// one step reads at once (sliced as far as each may be). smallest_bytes names that least feasible
// budget.
class BudgetInfeasible : public std::runtime_error {
 public:
  BudgetInfeasible(const std::string& what, uint64_t smallest_bytes)
      : std::runtime_error(what), smallest_bytes(smallest_bytes) {}
  uint64_t smallest_bytes;
};

// The least budget any plan meets: the slab, the work arena of every group sliced as far as it
// may be, plus, at the worst step, the groups whose use windows hold it (each sliced as far as it
// may be, two slices resident).
uint64_t smallest_feasible_budget(const BudgetProblem& problem);

// Slices only where the budget needs them (the fewest: at the worst step, the cut that lowers the
// peak most, of the group holding most there or the group that sizes the work arena), then pins the
// largest groups that keep every step under the budget (first fit by bytes, decreasing), then moves
// each streamed group's load up to max_lead steps earlier where the budget leaves room. Throws
// BudgetInfeasible, or std::invalid_argument for a malformed problem (a step out of range, first
// after last).
BudgetPlan plan_budget(const BudgetProblem& problem);

// The resident bytes at each step under `plan` (activations included): what plan_budget keeps
// under the budget, recomputed from the plan alone (tests, reports).
std::vector<uint64_t> resident_profile(const BudgetProblem& problem, const BudgetPlan& plan);

}  // namespace memoplan::planner
