// A forward's body behind a check (graph_branch.h).
#include "graph_branch.h"

#include <torch/csrc/jit/ir/ir.h>

#include <vector>

namespace memoplan::torch_ext {
namespace {

const c10::Symbol kModuleAttribute = c10::Symbol::attr("memoplan_module");

}  // namespace

int64_t branch_module(const torch::jit::Node* node) { return node->i(kModuleAttribute); }

torch::jit::Node* branch_body(torch::jit::Graph& graph, c10::Symbol condition, c10::Symbol call,
                              int64_t id, bool body_first) {
  torch::jit::Block* top = graph.block();
  torch::jit::Node* check = graph.create(condition, {graph.inputs()[0]}, 1);
  check->i_(kModuleAttribute, id);
  check->output()->setType(c10::BoolType::get());
  check->insertBefore(top->nodes().front());
  torch::jit::Node* branch = graph.create(c10::prim::If, {check->output()}, 0);
  branch->insertAfter(check);
  torch::jit::Block* first = branch->addBlock();
  torch::jit::Block* second = branch->addBlock();
  torch::jit::Block* body = body_first ? first : second;
  torch::jit::Block* other = body_first ? second : first;
  for (torch::jit::Node* node = branch->next(); node != top->return_node();) {
    torch::jit::Node* next = node->next();
    node->moveBefore(body->return_node());
    node = next;
  }
  const std::vector<torch::jit::Value*> results(graph.outputs().begin(), graph.outputs().end());
  torch::jit::Node* called = graph.create(call, graph.inputs(), results.size());
  called->i_(kModuleAttribute, id);
  other->appendNode(called);
  for (size_t i = 0; i < results.size(); ++i) {
    body->registerOutput(results[i]);
    called->output(i)->setType(results[i]->type());
    other->registerOutput(called->output(i));
    torch::jit::Value* out = branch->addOutput()->setType(results[i]->type());
    graph.return_node()->replaceInput(i, out);
  }
  return branch;
}

}  // namespace memoplan::torch_ext
