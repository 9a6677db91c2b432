// The TorchScript side of the planning runtime: the memoplan::AllocateSlab / AllocateTensor /
// EndPass operators, the graph pass that inserts them into a module's forward, and plan(). The
// planning runtime's one translation unit that includes the JIT's headers (the tuned ops in
// torch_ext/tuned/ include them too, for their own rewrites).
#include <ATen/Parallel.h>
#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <mutex>
#include <stdexcept>

#include "attribute_constants.h"
#include "budget_api.h"
#include "budget_runtime.h"
#include "canonical_forms.h"
#include "coverage.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/plan.h"
#include "op_record.h"
#include "pass_runtime.h"
#include "planning.h"
#include "sharing_pass.h"

namespace memoplan::torch_ext {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kAllocateSlab = c10::Symbol::fromQualString("memoplan::AllocateSlab");
const c10::Symbol kAllocateTensor = c10::Symbol::fromQualString("memoplan::AllocateTensor");
const c10::Symbol kEndPass = c10::Symbol::fromQualString("memoplan::EndPass");

void append_int(std::string& key, int64_t v) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof digits, v);
  key.append(digits, result.ptr);
  key += ',';
}

// Everything the allocation sequence of a pass depends on that the inputs show: every tensor's
// dtype, device, sizes, strides and requires_grad, every scalar's value, recursively through lists
// and tuples. Compared in full, never by hash. With `dims` (the shape family's key): every tensor's
// sizes go to dims instead, and its strides are "c" when it is contiguous (they follow from the
// sizes), else written out.
void append_key(std::string& key, const c10::IValue& v, std::vector<int64_t>* dims = nullptr) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      key += "T-;";
      return;
    }
    key += 'T';
    key += c10::toString(t.scalar_type());
    key += c10::DeviceTypeName(t.device().type(), /*lower_case=*/true);
    key += t.requires_grad() ? "g[" : "[";
    if (dims) {
      append_int(key, t.dim());
      dims->insert(dims->end(), t.sizes().begin(), t.sizes().end());
      if (t.is_contiguous()) {
        key += "c];";
        return;
      }
    } else {
      for (int64_t d : t.sizes()) append_int(key, d);
    }
    key += '/';
    for (int64_t s : t.strides()) append_int(key, s);
    key += "];";
  } else if (v.isInt()) {
    key += 'i';
    append_int(key, v.toInt());
  } else if (v.isDouble()) {
    const double d = v.toDouble();
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    key += 'd';
    append_int(key, bits);
  } else if (v.isBool()) {
    key += v.toBool() ? "b1," : "b0,";
  } else if (v.isNone()) {
    key += "N,";
  } else if (v.isString()) {
    key += 's';
    key += v.toStringRef();
    key += '\0';
  } else if (v.isList()) {
    key += '[';
    for (const c10::IValue& e : v.toListRef()) append_key(key, e, dims);
    key += ']';
  } else if (v.isTuple()) {
    key += '(';
    for (const c10::IValue& e : v.toTupleRef().elements()) append_key(key, e, dims);
    key += ')';
  } else {
    key += '?';
    key += v.type()->str();
    key += ',';
  }
}

void append_mode(std::string& key) {
  append_int(key, at::get_num_threads());
  key += c10::InferenceMode::is_enabled() ? "inf,"
         : c10::GradMode::is_enabled()    ? "grad,"
                                          : "nograd,";
}

// Into a reused buffer: no allocation per pass once it has grown.
const std::string& pass_key(const c10::IValue* inputs, size_t count) {
  static thread_local std::string key;
  key.clear();
  append_mode(key);
  for (size_t i = 0; i < count; ++i) append_key(key, inputs[i]);
  return key;
}

// The shape family's key and dims of the same inputs: asked for only by a pass whose exact key has
// no plan yet.
struct Inputs {
  const c10::IValue* first;
  size_t count;
};
void family_key(const void* context, std::string* key, std::vector<int64_t>* dims) {
  const Inputs& in = *static_cast<const Inputs*>(context);
  key->clear();
  dims->clear();
  append_mode(*key);
  for (size_t i = 0; i < in.count; ++i) append_key(*key, in.first[i], dims);
}

torch::jit::Operation allocate_slab_op(const Node* node) {
  const size_t inputs = node->inputs().size();
  return [inputs](torch::jit::Stack& stack) {
    const c10::IValue* first = &stack[stack.size() - inputs];
    const int64_t module = first[0].toInt();
    const Inputs in{first + 1, inputs - 1};
    runtime_pass::allocate_slab(module, pass_key(first + 1, inputs - 1), {&family_key, &in});
    torch::jit::drop(stack, inputs);
  };
}

// The node's number is an attribute, not a constant input: one node per mark instead of three
// (two constants and the call) in every copy of the graph the executor keeps (bert_encoder: the
// constants' nodes and values were some 13 MiB of a planned process's peak).
const c10::Symbol kNodeAttribute = c10::Symbol::attr("memoplan_node");

torch::jit::Operation allocate_tensor_op(const Node* node) {
  const int64_t id = node->i(kNodeAttribute);
  return [id](torch::jit::Stack&) { runtime_pass::allocate_tensor(id); };
}

// Registered with alias analysis CONSERVATIVE, which the JIT treats as a side effect: the nodes
// are never removed, merged or moved across one another by its optimizations.
torch::jit::RegisterOperators memoplan_operators({
    torch::jit::Operator("memoplan::AllocateSlab(...) -> ()", allocate_slab_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator("memoplan::AllocateTensor(...) -> ()", allocate_tensor_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    recorded_operator(
        "memoplan::EndPass(int module) -> ()",
        [](torch::jit::Stack& stack) {
          const int64_t module = stack.back().toInt();
          torch::jit::drop(stack, 1);
          runtime_pass::end_pass(module);
        },
        c10::AliasAnalysisKind::CONSERVATIVE),
});

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

// The module id of a graph already rewritten, else -1.
int64_t rewritten_id(const Graph& graph) {
  for (const Node* node : graph.nodes()) {
    if (node->kind() == kAllocateSlab)
      return torch::jit::constant_as<int64_t>(node->input(0)).value();
  }
  return -1;
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

// Once its executors exist, the function's own cache of the preoptimized graph (an inlined copy,
// which the executor has copied again) is not read until a new executor is built, and then
// remade. Unplanned, the function's graph is a few nodes of method calls; planned, it is the
// inlined graph itself: dropping the cache keeps the count of inlined copies the same
// (gpt_decoder: 9.9 MiB of heap peak, heaptrack).
void drop_optimized_graph_cache(torch::jit::GraphFunction& function) {
  std::lock_guard<std::recursive_mutex> lock(function.*member(CompileMutexTag{}));
  function.clear_optimized_graphs();
}

void drop_executors(torch::jit::GraphFunction& function) {
  function.clear_optimized_graphs();
  (function.*member(ExecutorsTag{})).fill(c10::nullopt);
}

int64_t rewrite_forward(torch::jit::Module& module, const PlanOptions& options) {
  torch::jit::Method method = module.get_method("forward");
  auto& function = torch::jit::toGraphFunction(method.function());
  std::shared_ptr<Graph> graph = function.graph();
  if (const int64_t id = rewritten_id(*graph); id >= 0) {
    // A module of a type already rewritten runs that graph: its settings must be the ones it took.
    refuse_other_settings(id, module);
    return id;
  }

  const int64_t id = runtime_pass::register_module(options);
  torch::jit::Inline(*graph);
  // Before the cleanup: the branches on the module's settings fold away with it.
  keep_folded(id, fold_attributes(module, *graph));
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
  if (KernelRewrite rewrite = registered_kernels(options.kernels)) rewrite(*graph);
  // Before the marks too: budget_linear's output is planned like aten::linear's.
  if (options.budget_bytes > 0) {
    budget::prepare(module, *graph, id, options.budget_bytes, options.weights_dir);
  }
  // Before the marks too: the replacements' temporaries are planned like any other tensor.
  if (options.memory == "min") {
    if (KernelRewrite rewrite = memory_min_rewrite()) rewrite(*graph);
  }
  int64_t next_node = 1;
  mark_block(*graph, graph->block(), next_node);
  if (options.memory == "min") insert_share_nodes(graph);
  {
    torch::jit::WithInsertPoint point(graph->block()->nodes().front());
    std::vector<Value*> slab_inputs = {graph->insertConstant(id)};
    for (size_t i = 1; i < graph->inputs().size(); ++i) slab_inputs.push_back(graph->inputs()[i]);
    graph->insertNode(graph->create(kAllocateSlab, slab_inputs, 0));
  }
  {
    torch::jit::WithInsertPoint point(graph->block()->return_node());
    graph->insertNode(graph->create(kEndPass, {graph->insertConstant(id)}, 0));
  }
  drop_executors(function);
  return id;
}

// Python: torch.ops.load_library("libmemoplan_torch.so"), then
// torch.ops.memoplan.plan(scripted_module, [inputs...]) and torch.ops.memoplan.stats().
void plan_op(torch::jit::Stack& stack);
void stats_op(torch::jit::Stack& stack) { stack.emplace_back(to_string(plan_stats())); }
void forget_plans_op(torch::jit::Stack& stack) {
  const c10::IValue module_value = stack.back();
  torch::jit::drop(stack, 1);
  TORCH_CHECK(module_value.isObject(), "memoplan.forget_plans: expected a TorchScript module, got ",
              module_value.tagKind());
  forget_plans(torch::jit::Module(module_value.toObject()));
}

torch::jit::RegisterOperators memoplan_python_operators({
    torch::jit::Operator(
        "memoplan::plan(Any module, Any[] inputs, str strategy=\"greedy_by_size\", "
        "int warmup_passes=3, bool plan_new_keys=True, str kernels=\"stock\", "
        "str memory=\"offset\", int budget=0) -> Dict(str, int)",
        plan_op, c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator("memoplan::stats() -> str", stats_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
    torch::jit::Operator("memoplan::forget_plans(Any module) -> ()", forget_plans_op,
                         c10::AliasAnalysisKind::CONSERVATIVE),
});

}  // namespace

PlanSummary plan(torch::jit::Module& module, const std::vector<c10::IValue>& inputs,
                 const PlanOptions& options) {
  if (!module.find_method("forward"))
    throw std::runtime_error("memoplan: the module has no forward");
  if (options.memory != "offset" && options.memory != "min") {
    throw std::runtime_error("memoplan: unknown memory '" + options.memory + "' (offset or min)");
  }
  if (options.kernels != "stock" && !registered_kernels(options.kernels)) {
    throw std::runtime_error("memoplan: unknown kernels '" + options.kernels + "' (" +
                             kernel_names() + ")");
  }
  if (options.budget_bytes > 0 && options.kernels != "stock") {
    throw std::runtime_error(
        "memoplan: a memory budget needs kernels \"stock\" (the tuned "
        "kernels keep packed copies of the weights resident)");
  }
  const int64_t id = rewrite_forward(module, options);
  if (options.budget_bytes > 0 && !budget::budgeted(id)) {
    throw std::runtime_error(
        "memoplan: the module was planned without a memory budget; only "
        "its first plan() decides (load it anew to budget it)");
  }
  // The graph sees every argument, defaults filled in (TransformerEncoder's mask=None, ...): so
  // must the key.
  std::vector<c10::IValue> arguments = inputs;
  const c10::FunctionSchema& schema = module.get_method("forward").function().getSchema();
  for (size_t i = inputs.size() + 1; i < schema.arguments().size(); ++i) {
    const c10::optional<c10::IValue>& fallback = schema.arguments()[i].default_value();
    if (!fallback) break;
    arguments.push_back(*fallback);
  }
  const std::string key = pass_key(arguments.data(), arguments.size());
  runtime_pass::request_key(id, key);
  PlanSummary summary;
  // Warm-up passes, then the profiled one; a few more in case another thread profiles this key.
  bool planned = runtime_pass::has_plan(id, key, &summary);
  for (int pass = 0; !planned && pass < options.warmup_passes + 8; ++pass) {
    module.forward(inputs);
    planned = runtime_pass::has_plan(id, key, &summary);
  }
  if (planned) {
    // The tuned kernels' coverage: one more pass, on the plan, watched (coverage.h).
    if (options.kernels != "stock") {
      summary.coverage = measure_coverage(
          [&] { module.forward(inputs); },
          *torch::jit::toGraphFunction(module.get_method("forward").function()).graph());
      remember_coverage(id, summary.coverage);
    }
    drop_optimized_graph_cache(
        torch::jit::toGraphFunction(module.get_method("forward").function()));
    release_free_memory();
    if (budget::budgeted(id)) {
      budget::arm(id, summary.slab_bytes);
      if (options.budget_bytes > 0 && options.budget_bytes != budget::summary(id).budget_bytes) {
        budget::replan(id, options.budget_bytes);
      }
    }
    return summary;
  }
  throw std::runtime_error("memoplan: no plan was made for the inputs " + key +
                           " (planning failed; see the warning above)");
}

int64_t module_id(const torch::jit::Module& module) {
  const auto forward = module.find_method("forward");  // c10::optional<Method>
  return forward ? rewritten_id(*torch::jit::toGraphFunction(forward->function()).graph()) : -1;
}

void forget_plans(const torch::jit::Module& module) {
  if (const int64_t id = module_id(module); id >= 0) runtime_pass::forget_plans(id);
}

std::optional<PlanDetail> plan_detail(const torch::jit::Module& module, const std::string& key) {
  const int64_t id = module_id(module);
  if (id < 0) return std::nullopt;
  std::shared_ptr<const PlanDetail> detail = runtime_pass::plan_detail(id, key);
  if (!detail) return std::nullopt;
  return *detail;
}

namespace {

void plan_op(torch::jit::Stack& stack) {
  const int64_t budget = stack.back().toInt();
  const std::string memory = stack[stack.size() - 2].toStringRef();
  const std::string kernels = stack[stack.size() - 3].toStringRef();
  const bool plan_new_keys = stack[stack.size() - 4].toBool();
  const int64_t warmup = stack[stack.size() - 5].toInt();
  const std::string strategy = stack[stack.size() - 6].toStringRef();
  const c10::IValue inputs = stack[stack.size() - 7];
  const c10::IValue module_value = stack[stack.size() - 8];
  torch::jit::drop(stack, 8);
  TORCH_CHECK(budget >= 0, "memoplan.plan: budget must be >= 0, got ", budget);
  TORCH_CHECK(module_value.isObject(), "memoplan.plan: expected a TorchScript module, got ",
              module_value.tagKind());
  torch::jit::Module module(module_value.toObject());
  PlanOptions options;
  options.strategy = strategy;
  options.warmup_passes = static_cast<int>(warmup);
  options.plan_new_keys = plan_new_keys;
  options.kernels = kernels;
  options.memory = memory;
  options.budget_bytes = static_cast<uint64_t>(budget);
  const c10::ArrayRef<c10::IValue> list = inputs.toListRef();
  PlanSummary summary;
  try {
    summary = plan(module, std::vector<c10::IValue>(list.begin(), list.end()), options);
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
  c10::Dict<std::string, int64_t> out;
  out.insert("slab_bytes", static_cast<int64_t>(summary.slab_bytes));
  out.insert("lower_bound_bytes", static_cast<int64_t>(summary.lower_bound_bytes));
  out.insert("offset_lower_bound_bytes", static_cast<int64_t>(summary.offset_lower_bound_bytes));
  out.insert("shared_tensors", static_cast<int64_t>(summary.shared_tensors));
  out.insert("planned_tensors", static_cast<int64_t>(summary.planned_tensors));
  out.insert("escaping_tensors", static_cast<int64_t>(summary.escaping_tensors));
  out.insert("visits", static_cast<int64_t>(summary.visits));
  out.insert("planned_bytes", static_cast<int64_t>(summary.planned_bytes));
  out.insert("coalesced_bytes", static_cast<int64_t>(summary.coalesced_bytes));
  if (summary.coverage.measured) {
    out.insert("flops", static_cast<int64_t>(summary.coverage.flops));
    out.insert("tuned_flops", static_cast<int64_t>(summary.coverage.tuned_flops));
  }
  if (const std::optional<BudgetSummary> budget = budget_summary(module)) {
    for (const auto& entry : budget_dict(*budget)) out.insert(entry.key(), entry.value());
  }
  stack.emplace_back(out);
}

}  // namespace
}  // namespace memoplan::torch_ext
