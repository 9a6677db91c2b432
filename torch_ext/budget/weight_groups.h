// Which weights a budgeted module has and how they are loaded together: each storage a step
// reads (through the graph's attribute paths), in the window of steps that read it; storages of
// one window form a group; a linear's weight read by one step alone may be sliced (as far as its
// slices stay bit-identical), an embedding table read by one step alone is read on demand.
#pragma once

#include <cstdint>
#include <vector>

#include "budget_graph.h"
#include "memoplan/planner/budget.h"

namespace c10 {
struct StorageImpl;
}
namespace torch::jit {
struct Module;
}

namespace memoplan::torch_ext::budget {

struct WeightGroups {
  std::vector<std::vector<c10::StorageImpl*>> storages;  // per group, a sliceable weight first
  std::vector<planner::WeightGroup> groups;  // bytes not set: the file's layout sets them
  std::vector<uint64_t> linear_bytes;        // per group: its sliceable weight's bytes, else 0
};

WeightGroups find_weight_groups(const torch::jit::Module& module, const BudgetGraph& graph);

}  // namespace memoplan::torch_ext::budget
