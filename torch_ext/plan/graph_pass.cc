// The graph pass of plan() (graph_pass.h): canonical forms, the selected rewrites, then a
// memoplan::AllocateTensor mark before every node that may make a tensor, AllocateSlab first and
// EndPass last. The executors the function kept are dropped so that every handle runs the new
// graph.
#include "graph_pass.h"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "budget/budget_runtime.h"
#include "budget/module_weights.h"
#include "budget/released_weights.h"
#include "memory_min/sharing_pass.h"
#include "memory_min/sliced_ops.h"
#include "planning/attribute_constants.h"
#include "planning/canonical_forms.h"
#include "planning/flat_executor.h"
#include "planning/pass_operators.h"
#include "planning/pass_runtime.h"
#include "planning/planning.h"
#include "planning/settings_guard.h"

namespace memoplan::torch_ext {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool contains_tensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  for (const c10::TypePtr& contained : type->containedTypes()) {
    if (contains_tensor(contained)) return true;
  }
  return false;
}

// Nodes whose tensor outputs never have storage of their own: they read an attribute, move
// values between containers, or are views. A mark is only where the matcher's window starts, so a
// node left unmarked costs nothing but a longer window; these were 69-76% of all marks
// (resnet18: 198 of 287 on prim::GetAttr alone), each one a node in every copy of the graph the
// executor keeps and an operator call per pass. Ops that may copy (reshape, contiguous, flatten,
// to, dropout) stay marked.
bool never_allocates(c10::Symbol kind) {
  static const std::array kinds = {
      c10::prim::GetAttr,
      c10::prim::Constant,
      c10::prim::unchecked_cast,
      c10::prim::ListConstruct,
      c10::prim::ListUnpack,
      c10::prim::TupleConstruct,
      c10::prim::TupleUnpack,
      c10::prim::TupleIndex,
      c10::prim::Uninitialized,
      c10::prim::DictConstruct,
      c10::prim::unchecked_unwrap_optional,
      c10::aten::__getitem__,
      c10::aten::append,
      c10::aten::transpose,
      c10::aten::t,
      c10::aten::view,
      c10::aten::view_as,
      c10::aten::unsqueeze,
      c10::aten::squeeze,
      c10::aten::expand,
      c10::aten::expand_as,
      c10::aten::chunk,
      c10::aten::split,
      c10::aten::unbind,
      c10::aten::select,
      c10::aten::slice,
      c10::aten::narrow,
      c10::aten::permute,
      c10::aten::detach,
      c10::aten::alias,
      c10::aten::as_strided,
  };
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

// Nodes that may make tensors: those with a tensor among their outputs (in-place ops included,
// harmlessly), less those that never make storage. Structural nodes are skipped; nodes with blocks
// are marked inside them.
bool may_allocate(const Node* node) {
  if (!node->blocks().empty() || never_allocates(node->kind())) return false;
  for (const Value* output : node->outputs()) {
    if (contains_tensor(output->type())) return true;
  }
  return false;
}

void mark_block(Graph& graph, torch::jit::Block* block, int64_t& next_node) {
  for (Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) mark_block(graph, inner, next_node);
    if (!may_allocate(node)) continue;
    graph.create(kAllocateTensor, 0)->i_(kNodeAttribute, next_node++)->insertBefore(node);
  }
}

// GraphFunction keeps its executors (one per autocast specialization, each built from a copy of
// the graph) private, and 1.13 has no call that drops them. The graph is rewritten in place so
// every existing handle to the function (Python caches `forward` as a Method holding the Function
// pointer) runs the new graph; the executors must then be rebuilt from it. An explicit template
// instantiation may name a private member (C++17 [temp.spec]/6): that is how we reach them.
// One instantiation per private member, each named by a tag: member(ExecutorsTag{}) is
// &GraphFunction::executors_, member(CompileMutexTag{}) &GraphFunction::compile_mutex.
struct ExecutorsTag {};
struct CompileMutexTag {};
auto member(ExecutorsTag);
auto member(CompileMutexTag);
template <typename Tag, auto Member>
struct PrivateMember {
  friend auto member(Tag) { return Member; }
};
template struct PrivateMember<ExecutorsTag, &torch::jit::GraphFunction::executors_>;
template struct PrivateMember<CompileMutexTag, &torch::jit::GraphFunction::compile_mutex>;

void drop_executors(torch::jit::GraphFunction& function) {
  function.clear_optimized_graphs();
  (function.*member(ExecutorsTag{})).fill(c10::nullopt);
}

}  // namespace

int64_t rewritten_id(const Graph& graph) {
  for (const Node* node : planned_block(graph)->nodes()) {
    if (node->kind() == kAllocateSlab) {
      return torch::jit::constant_as<int64_t>(AllocateSlabOp::module_of(node)).value();
    }
  }
  return -1;
}

// Once its executors exist, the function's own cache of the preoptimized graph (an inlined copy,
// which the executor has copied again) is not read until a new executor is built, and then
// remade. Unplanned, the function's graph is a few nodes of method calls; planned, it is the
// inlined graph itself: dropping the cache keeps the count of inlined copies the same
// (gpt_decoder: 9.9 MiB of heap peak, heaptrack).
void drop_optimized_graph_cache(torch::jit::GraphFunction& function) {
  std::lock_guard<std::recursive_mutex> lock(function.*member(CompileMutexTag{}));
  function.clear_optimized_graphs();
}

int64_t rewrite_forward(torch::jit::Module& module, const PlanOptions& options) {
  torch::jit::Method method = module.get_method("forward");
  auto& function = torch::jit::toGraphFunction(method.function());
  std::shared_ptr<Graph> graph = function.graph();
  if (const int64_t id = rewritten_id(*graph); id >= 0) {
    // A module of a type already rewritten runs that graph: its settings must be the ones it took.
    refuse_other_settings(id, module);
    if (const std::string flag = differing_flag(id, module); !flag.empty()) {
      throw std::runtime_error("memoplan: this module's '" + flag +
                               "' differs from the value its type was planned with, which the "
                               "planned graph holds as a constant (a call in that mode runs "
                               "unplanned); switch it back (eval() / train()) to plan it");
    }
    return id;
  }

  uint64_t weight_bytes = 0;
  for (const c10::StorageImpl* s : budget::module_weights(module, graph.get())) {
    weight_bytes += s->nbytes();
  }
  const int64_t id = runtime_pass::register_module(options, weight_bytes);
  // What a call runs when its modules' `training` flags differ from the folded ones: the forward
  // as it is now, a few method calls (settings_guard.h).
  std::shared_ptr<Graph> unfolded = graph->copy();
  torch::jit::Inline(*graph);
  // Before the cleanup: the branches on the module's settings fold away with it.
  std::vector<FoldedAttribute> folded = fold_attributes(module, *graph);
  // Inlining made every called method build and cache its optimized graph (mobilenet_v2: 10 MiB
  // of graphs no one runs: forward now holds them all). Dropped; rebuilt if a method is called.
  for (const torch::jit::Module& submodule : module.modules()) {
    for (const torch::jit::Method& m : submodule.get_methods()) {
      if (&m.function() == &method.function()) continue;
      if (auto* callee = torch::jit::tryToGraphFunction(m.function())) {
        callee->clear_optimized_graphs();
      }
    }
  }
  // What the executor would do first to its own copy (peephole, constant ifs, constant pooling;
  // autocast is left to it), done before the marks go in: a mark is a side effect, so a node or a
  // branch the cleanup would have removed stays with its mark (gpt_decoder: 3.8 MiB of graphs).
  torch::jit::preoptimizeGraph(graph, /*disable_autocast=*/true);
  // Before every rewrite, whatever the options: traced, scripted and frozen graphs in the forms the
  // rewrites match (aten::_convolution as aten::conv2d, ...), the same bits.
  canonicalize(graph);
  // Before the allocation marks: a replacement op's output is planned like any other tensor.
  if (KernelRewrite rewrite = registered_kernels(options.kernels)) rewrite(*graph, id);
  // Before any pass packs a weight: a packing is keyed by its source's address.
  if (options.release_weights && options.kernels == Kernels::kTuned) {
    budget::map_for_release(module, *graph, id, options.weights_dir);
  }
  // Before the marks too: budget_linear's output is planned like aten::linear's.
  if (options.budget_bytes > 0) {
    budget::prepare(module, *graph, id, options.budget_bytes, options.weights_dir);
  }
  // Before the marks too: the replacements' temporaries are planned like any other tensor.
  if (options.memory == Memory::kMin) {
    replace_sliced_ops(*graph);
  }
  int64_t next_node = 1;
  mark_block(*graph, graph->block(), next_node);
  if (options.memory == Memory::kMin) insert_share_nodes(graph);
  {
    torch::jit::WithInsertPoint point(graph->block()->nodes().front());
    Value* module = graph->insertConstant(id);
    graph->insertNode(AllocateSlabOp::create(*graph, module, graph->inputs().slice(1)));
  }
  {
    torch::jit::WithInsertPoint point(graph->block()->return_node());
    op::Builder<EndPassOp> end(*graph);
    graph->insertNode(end.constant(&EndPassOp::module, id).create(0));
  }
  guard_folded_settings(*graph, id, module, std::move(unfolded), folded);
  // The interpreter runs it until plan() builds its program (flat_executor.h: opt-in).
  if (flat::enabled()) flat::wrap(*graph, id);
  keep_folded(id, std::move(folded));
  drop_executors(function);
  return id;
}

}  // namespace memoplan::torch_ext
