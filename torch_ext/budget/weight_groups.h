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
  std::vector<uint64_t> sliceable_bytes;     // per group: its sliceable weight's bytes, else 0
  // Per group: 1 when its sliceable weight is a convolution's. Its slices are decided at the
  // convolution's first call, which knows the input's shape (BudgetState::learn_conv); until
  // then the group is whole (max_slices 1).
  std::vector<uint8_t> conv;
};

WeightGroups find_weight_groups(const torch::jit::Module& module, const BudgetGraph& graph);

}  // namespace memoplan::torch_ext::budget
