#include "budget_graph.h"

#include <torch/csrc/jit/ir/ir.h>

#include <map>

#include "budget_operators.h"

namespace memoplan::torch_ext::budget {
namespace {

using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kBudgetStep = c10::Symbol::fromQualString("memoplan::BudgetStep");

// aten::conv2d with integer padding (not the overload that takes "same" or "valid").
bool is_conv2d(const Node* node) {
  return node->kind() == c10::aten::conv2d &&
         node->matches(
             "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, "
             "int[2] padding=0, int[2] dilation=1, int groups=1) -> Tensor");
}

bool holds_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (auto optional = type->cast<c10::OptionalType>())
    return holds_tensor(optional->getElementType());
  return false;
}

// The attribute path of `value` from `self`, if it is read through GetAttrs from it.
bool attribute_path(const Value* value, const Value* self, std::vector<std::string>& path) {
  if (value == self) return true;
  const Node* node = value->node();
  if (node->kind() != c10::prim::GetAttr) return false;
  if (!attribute_path(node->input(0), self, path)) return false;
  path.push_back(node->s(c10::attr::name));
  return true;
}

void weights_read(const Node* node, const Value* self, std::vector<const Value*>& out) {
  for (const Value* input : node->inputs()) {
    std::vector<std::string> path;
    if (holds_tensor(input->type()) && attribute_path(input, self, path)) out.push_back(input);
  }
  for (const torch::jit::Block* block : node->blocks()) {
    for (const Node* inner : block->nodes()) weights_read(inner, self, out);
    weights_read(block->return_node(), self, out);
  }
}

}  // namespace

BudgetGraph insert_budget_steps(torch::jit::Graph& graph, int64_t module_id) {
  BudgetGraph result;
  if (graph.inputs().empty()) return result;
  const Value* self = graph.inputs()[0];
  std::map<std::vector<std::string>, size_t> index;
  std::vector<Node*> steps;
  for (Node* node : graph.nodes()) {
    if (node->kind() == c10::prim::GetAttr) continue;
    std::vector<const Value*> read;
    weights_read(node, self, read);
    if (read.empty()) continue;
    const auto step = static_cast<uint32_t>(steps.size());
    steps.push_back(node);
    for (const Value* value : read) {
      std::vector<std::string> path;
      attribute_path(value, self, path);
      auto [it, fresh] = index.emplace(path, result.weights.size());
      if (fresh) {
        WeightUse use;
        use.path = path;
        use.first_step = step;
        result.weights.push_back(use);
      }
      WeightUse& use = result.weights[it->second];
      use.last_step = step;
      // Sliceable: aten::linear(input, weight, bias) whose weight nothing else reads.
      use.linear_weight = node->kind() == c10::aten::linear && node->inputs().size() == 3 &&
                          node->input(1) == value && use.first_step == step;
      use.conv_weight = is_conv2d(node) && node->input(1) == value && use.first_step == step;
      use.gathered =
          node->kind() == c10::aten::embedding && node->input(0) == value && use.first_step == step;
    }
  }
  result.steps = static_cast<uint32_t>(steps.size());
  for (uint32_t s = 0; s < result.steps; ++s) {
    Node* node = steps[s];
    graph.create(kBudgetStep, 0)
        ->i_(kModuleAttribute, module_id)
        ->i_(kStepAttribute, s)
        ->insertBefore(node);
    const bool linear = node->kind() == c10::aten::linear && node->inputs().size() == 3;
    if (!linear && !is_conv2d(node)) continue;
    torch::jit::WithInsertPoint point(node);
    // aten's arguments, then the module.
    Node* budgeted = linear ? op::Builder<BudgetLinearOp>(graph)
                                  .set_leading(node->inputs())
                                  .constant(&BudgetLinearOp::module, module_id)
                                  .create()
                            : op::Builder<BudgetConv2dOp>(graph)
                                  .set_leading(node->inputs())
                                  .constant(&BudgetConv2dOp::module, module_id)
                                  .create();
    budgeted->output()->setType(node->output()->type());
    graph.insertNode(budgeted);
    node->output()->replaceAllUsesWith(budgeted->output());
    node->destroy();
  }
  graph.create(kBudgetStep, 0)
      ->i_(kModuleAttribute, module_id)
      ->i_(kStepAttribute, result.steps)
      ->insertBefore(graph.return_node());
  return result;
}

}  // namespace memoplan::torch_ext::budget
