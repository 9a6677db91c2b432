// The budget's graph rewrite: finds the module's weights in its inlined forward (tensors read
// through prim::GetAttr chains from self), numbers the top-level nodes that read them (the steps
// of the budget plan), puts a memoplan::BudgetStep node before each and one before the return,
// and turns aten::linear and aten::conv2d into memoplan::budget_linear and memoplan::budget_conv2d
// (which may compute them a slice of the weight at a time). No torch headers here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch::jit {
struct Graph;
}

namespace memoplan::torch_ext::budget {

struct WeightUse {
  std::vector<std::string> path;  // attribute names from self
  uint32_t first_step = 0, last_step = 0;
  bool linear_weight = false;  // the weight operand of a budget_linear (at first_step)
  bool conv_weight = false;    // the weight operand of a budget_conv2d (at first_step)
  bool gathered = false;       // read only by aten::embedding (its rows, by index)
};

struct BudgetGraph {
  uint32_t steps = 0;  // step nodes; BudgetStep(steps) is the pass's end
  std::vector<WeightUse> weights;
};

BudgetGraph insert_budget_steps(torch::jit::Graph& graph, int64_t module_id);

}  // namespace memoplan::torch_ext::budget
