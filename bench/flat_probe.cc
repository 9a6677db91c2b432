// Where a planned pass goes (issue 52, item 1): a planned module's forward run twice, by
// module.forward of a copy planned with MEMOPLAN_EXECUTOR=flat (memoplan's flat executor,
// planning/flat_executor.h) and of one planned without (the TorchScript interpreter), and by
// this probe's own loop over the planned
// body's nodes (each node's Operation resolved once, constants and module attributes read once,
// values in registers moved into the stack at their last use), interleaved rounds, one intra-op
// thread unless --threads says more.
// The loop times each step for per-kind and per-step. Bodies with control flow are refused.
//
//   build/bench/flat_probe MODEL.pt --input 1x3x128x128 [--kernels tuned] [--passes 500]
//     [--rounds 7] [--threads 1] [--only interpreter|flat|per-kind|per-step|graph]
// per-kind: the flat loop's time per node kind (where a small net's pass goes); per-step: per
// step, its mean and median over the passes, with the shapes of its first two tensor inputs and
// its first output; graph: the planned forward graph printed, nothing run (what the rewrites
// made of a user's export).
#include <ATen/Parallel.h>
#include <ATen/ops/randn.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"

namespace {

using torch::jit::Node;
using torch::jit::Value;

// The flat program: registers for every value, one step per node that computes.
struct Step {
  torch::jit::Operation op = nullptr;
  std::vector<size_t> inputs;
  std::vector<bool> last_use;  // moved into the stack: the register is not read again
  std::vector<size_t> outputs;
  std::vector<size_t> unread;  // outputs nothing reads: dropped at once, as the interpreter does
  std::string kind;            // the node's, for --per-kind
};

struct Program {
  std::vector<c10::IValue> registers;  // constants filled once
  std::vector<size_t> graph_inputs, graph_outputs;
  std::vector<Step> steps;
  std::map<std::string, int> kinds;  // node kinds run as operations, for the report
};

// The planned forward's body: the interpreter's branch of the flat executor's wrapper
// (planning/flat_executor.h), where plan() wrapped it.
const torch::jit::Block* body_of(const torch::jit::Graph& graph) {
  for (const Node* n : graph.nodes()) {
    if (n->kind() == c10::prim::If &&
        n->input(0)->node()->kind().toQualString() == std::string("memoplan::FlatReady")) {
      return n->blocks()[1];
    }
  }
  return graph.block();
}

Program build(const torch::jit::Graph& graph, const torch::jit::Module& module) {
  Program p;
  const torch::jit::Block* body = body_of(graph);
  std::map<const Value*, size_t> index;
  auto reg = [&](const Value* v) {
    const auto it = index.find(v);
    if (it != index.end()) return it->second;
    index.emplace(v, p.registers.size());
    p.registers.emplace_back();
    return p.registers.size() - 1;
  };
  for (const Value* v : graph.inputs()) p.graph_inputs.push_back(reg(v));
  p.registers.at(p.graph_inputs.at(0)) = module._ivalue();
  std::map<const Value*, const Node*> last;  // each value's last reader
  for (const Node* n : body->nodes()) {
    for (const Value* v : n->inputs()) last[v] = n;
  }
  auto is_output = [&](const Value* v) {
    return std::find(body->outputs().begin(), body->outputs().end(), v) != body->outputs().end();
  };
  // Values known at build, their registers filled once: constants, module attributes, and lists
  // and tuples of those.
  std::set<const Value*> known;
  for (const Node* n : body->nodes()) {
    const auto kind = n->kind();
    if (kind == c10::prim::Constant) {
      p.registers.at(reg(n->output())) = torch::jit::toIValue(n->output()).value();
      known.insert(n->output());
      continue;
    }
    if (kind == c10::prim::GetAttr) {
      const c10::IValue& owner = p.registers.at(reg(n->input()));
      if (!owner.isObject()) throw std::runtime_error("GetAttr on a value computed in the pass");
      p.registers.at(reg(n->output())) = owner.toObject()->getAttr(n->s(c10::attr::name));
      known.insert(n->output());
      continue;
    }
    if (kind == c10::prim::If || kind == c10::prim::Loop || kind == c10::prim::CallMethod ||
        kind == c10::prim::CallFunction) {
      throw std::runtime_error(std::string("control flow or a call: ") + kind.toQualString());
    }
    Step s;
    // The interpreter's own instructions, as operations.
    const size_t arity = n->inputs().size();
    if (kind == c10::prim::ListConstruct) {
      const c10::TypePtr element = n->output()->type()->containedType(0);
      s.op = [element, arity](torch::jit::Stack& stack) {
        c10::impl::GenericList list(element);
        list.reserve(arity);
        for (size_t i = stack.size() - arity; i < stack.size(); ++i) list.push_back(stack[i]);
        stack.resize(stack.size() - arity);
        stack.emplace_back(std::move(list));
      };
    } else if (kind == c10::prim::TupleConstruct) {
      s.op = [arity](torch::jit::Stack& stack) {
        std::vector<c10::IValue> items(stack.end() - static_cast<long>(arity), stack.end());
        stack.resize(stack.size() - arity);
        stack.emplace_back(c10::ivalue::Tuple::create(std::move(items)));
      };
    } else if (kind == c10::prim::ListUnpack || kind == c10::prim::TupleUnpack) {
      const bool tuple = kind == c10::prim::TupleUnpack;
      s.op = [tuple](torch::jit::Stack& stack) {
        const c10::IValue v = std::move(stack.back());
        stack.pop_back();
        if (tuple) {
          for (const c10::IValue& item : v.toTupleRef().elements()) stack.push_back(item);
        } else {
          for (const c10::IValue& item : v.toListRef()) stack.push_back(item);
        }
      };
    } else {
      s.op = n->getOperation();
    }
    // A list or tuple of constants is made once (TorchScript's constant propagation does the same
    // in the graph its executor optimizes).
    const bool all_known = std::all_of(n->inputs().begin(), n->inputs().end(),
                                       [&](const Value* v) { return known.count(v) > 0; });
    if ((kind == c10::prim::ListConstruct || kind == c10::prim::TupleConstruct) && all_known) {
      torch::jit::Stack stack;
      for (const Value* v : n->inputs()) stack.push_back(p.registers.at(reg(v)));
      s.op(stack);
      p.registers.at(reg(n->output())) = stack.at(0);
      known.insert(n->output());
      continue;
    }
    const auto ins = n->inputs();
    for (size_t i = 0; i < ins.size(); ++i) {
      const Value* v = ins[i];
      s.inputs.push_back(reg(v));
      // The graph's inputs are the caller's: cleared after the pass, never moved.
      const bool kept = known.count(v) > 0 || v->node()->kind() == c10::prim::Param;
      const bool read_again_here =
          std::find(ins.begin() + static_cast<long>(i) + 1, ins.end(), v) != ins.end();
      s.last_use.push_back(!kept && !read_again_here && last[v] == n && !is_output(v));
    }
    for (const Value* v : n->outputs()) {
      s.outputs.push_back(reg(v));
      if (!v->hasUses() && !is_output(v)) s.unread.push_back(reg(v));
    }
    ++p.kinds[kind.toQualString()];
    s.kind = kind.toQualString();
    p.steps.push_back(std::move(s));
  }
  for (const Value* v : body->outputs()) p.graph_outputs.push_back(reg(v));
  return p;
}

std::string shape_of(const at::Tensor& t) {
  std::string out;
  for (int64_t d : t.sizes()) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

// With `per_kind`, each step's time (ns) is added to its kind's; with `per_step`, to its own.
c10::IValue run(Program& p, const std::vector<c10::IValue>& inputs, torch::jit::Stack& stack,
                std::map<std::string, double>* per_kind = nullptr,
                std::vector<double>* per_step = nullptr,
                std::vector<std::string>* labels = nullptr) {
  for (size_t i = 0; i < inputs.size(); ++i) p.registers[p.graph_inputs[i + 1]] = inputs[i];
  for (size_t k = 0; k < p.steps.size(); ++k) {
    Step& s = p.steps[k];
    const bool timed = per_kind != nullptr || per_step != nullptr;
    const auto t0 =
        timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    stack.clear();
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      if (s.last_use[i]) {
        stack.push_back(std::move(p.registers[s.inputs[i]]));
      } else {
        stack.push_back(p.registers[s.inputs[i]]);
      }
    }
    std::string label;
    if (labels) {
      // The first two tensors read (a convolution's input and weight) and the first written.
      int tensors = 0;
      for (const c10::IValue& v : stack) {
        if (!v.isTensor() || tensors == 2) continue;
        label += (tensors++ ? " w " : " in ") + shape_of(v.toTensor());
      }
    }
    s.op(stack);
    if (labels) {
      if (!stack.empty() && stack[0].isTensor()) label += " -> " + shape_of(stack[0].toTensor());
      labels->at(k) = label;
    }
    for (size_t i = 0; i < s.outputs.size(); ++i) p.registers[s.outputs[i]] = std::move(stack[i]);
    for (size_t r : s.unread) p.registers[r] = c10::IValue();
    if (timed) {
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      if (per_kind) (*per_kind)[s.kind] += ns;
      if (per_step) (*per_step)[k] += ns;
    }
  }
  c10::IValue out = p.registers[p.graph_outputs.at(0)];
  for (size_t i = 1; i < p.graph_inputs.size(); ++i) p.registers[p.graph_inputs[i]] = c10::IValue();
  for (size_t r : p.graph_outputs) p.registers[r] = c10::IValue();
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: flat_probe MODEL.pt --input 1x3x224x224 [--kernels tuned] "
                 "[--passes N] [--rounds R] [--threads T] [--only interpreter|flat|per-kind|per-step|graph]\n");
    return 2;
  }
  std::string model = argv[1], input = "1x3x224x224", kernels = "stock";
  int passes = 500, rounds = 7, threads = 1;
  std::string only;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--input") input = v;
    if (k == "--kernels") kernels = v;
    if (k == "--passes") passes = std::stoi(v);
    if (k == "--rounds") rounds = std::stoi(v);
    if (k == "--threads") threads = std::stoi(v);  // aten's intra-op threads
    // interpreter or flat: one side (perf stat counts it alone); per-kind: the flat loop's time
    // per node kind (each step timed: ~20 ns a step more).
    if (k == "--only") only = v;
  }
  at::set_num_threads(threads);
  std::vector<int64_t> shape;
  std::stringstream in(input);
  for (std::string d; std::getline(in, d, 'x');) shape.push_back(std::stoll(d));
  c10::InferenceMode inference;
  torch::jit::Module m = torch::jit::load(model);
  m.eval();
  const std::vector<c10::IValue> inputs = {at::randn(shape)};
  memoplan::torch_ext::PlanOptions options;
  options.kernels = kernels == "tuned" ? memoplan::torch_ext::Kernels::kTuned
                                       : memoplan::torch_ext::Kernels::kStock;
  setenv("MEMOPLAN_EXECUTOR", "flat", 1);  // this copy on the flat executor
  const memoplan::torch_ext::PlanSummary summary = memoplan::torch_ext::plan(m, inputs, options);
  unsetenv("MEMOPLAN_EXECUTOR");
  const auto graph = m.get_method("forward").graph();
  if (only == "graph") {
    std::printf("%s", graph->toString().c_str());
    return 0;
  }
  Program p = build(*graph, m);
  torch::jit::Stack stack;
  for (int i = 0; i < 20; ++i) {
    m.forward(inputs);
    run(p, inputs, stack);
  }
  const at::Tensor a = m.forward(inputs).toTensor(), b = run(p, inputs, stack).toTensor();
  const bool identical = at::equal(a, b);
  if (only == "per-step") {
    // Each step's time in every pass: its mean and its median (the VM's stalls land in means).
    std::vector<std::vector<double>> samples(p.steps.size(), std::vector<double>(passes));
    std::vector<std::string> labels(p.steps.size());
    run(p, inputs, stack, nullptr, nullptr, &labels);
    std::vector<double> ns(p.steps.size());
    for (int i = 0; i < passes; ++i) {
      std::fill(ns.begin(), ns.end(), 0.0);
      run(p, inputs, stack, nullptr, &ns);
      for (size_t k = 0; k < ns.size(); ++k) samples[k][i] = ns[k];
    }
    std::printf("%s %s kernels %s threads %d: flat loop, per step (us: mean, median):\n",
                model.c_str(), input.c_str(), kernels.c_str(), threads);
    double mean_sum = 0, median_sum = 0;
    for (size_t k = 0; k < samples.size(); ++k) {
      std::vector<double>& v = samples[k];
      double mean = 0;
      for (double x : v) mean += x / passes / 1e3;
      std::nth_element(v.begin(), v.begin() + passes / 2, v.end());
      const double median = v[passes / 2] / 1e3;
      mean_sum += mean;
      median_sum += median;
      std::printf("  %4zu %-28s %8.1f %8.1f %s\n", k, p.steps[k].kind.c_str(), mean, median,
                  labels[k].c_str());
    }
    std::printf("  sum of steps: mean %.1f us, medians %.1f us\n", mean_sum, median_sum);
    return identical ? 0 : 1;
  }
  if (only == "per-kind") {
    std::map<std::string, double> ns;
    for (int i = 0; i < passes; ++i) run(p, inputs, stack, &ns);
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (const auto& [kind, t] : ns) {
      rows.emplace_back(t / passes / 1e3, kind);
      total += t / passes / 1e3;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::printf(
        "%s %s kernels %s: flat loop, %.1f us a pass over %zu steps, per kind (us, steps):\n",
        model.c_str(), input.c_str(), kernels.c_str(), total, p.steps.size());
    for (const auto& [us, kind] : rows)
      std::printf("  %-28s %8.1f %4d\n", kind.c_str(), us, p.kinds[kind]);
    return identical ? 0 : 1;
  }
  // The timed sides: this copy's forward (the flat executor) and a second copy planned with
  // the default (the TorchScript interpreter), in interleaved rounds.
  torch::jit::Module mi = torch::jit::load(model);
  mi.eval();
  memoplan::torch_ext::plan(mi, inputs, options);
  for (int i = 0; i < 20; ++i) mi.forward(inputs);
  const bool same = at::equal(m.forward(inputs).toTensor(), mi.forward(inputs).toTensor());
  // Convolutions writing over their dying residual, per pass of each side: the same where each
  // side moves its last reads as the interpreter does.
  auto in_place = [&](torch::jit::Module& side) {
    const uint64_t before = memoplan::torch_ext::kernel_stats().residuals_in_place;
    for (int i = 0; i < 10; ++i) side.forward(inputs);
    return (memoplan::torch_ext::kernel_stats().residuals_in_place - before) / 10.0;
  };
  std::printf("in place per pass: flat %.1f, interpreter %.1f\n", in_place(m), in_place(mi));
  using Clock = std::chrono::steady_clock;
  std::vector<double> interpreter, flat;
  for (int r = 0; r < rounds; ++r) {
    for (int side = 0; side < 2; ++side) {
      const bool flat_side = (side == 0) == (r % 2 == 1);
      if (!only.empty() && flat_side != (only == "flat")) continue;
      torch::jit::Module& timed = flat_side ? m : mi;
      const auto t0 = Clock::now();
      for (int i = 0; i < passes; ++i) timed.forward(inputs);
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / passes;
      (flat_side ? flat : interpreter).push_back(ms);
    }
  }
  size_t nodes = 0;
  for (const Node* n : graph->nodes()) {
    (void)n;
    ++nodes;
  }
  if (interpreter.empty()) interpreter.push_back(0);
  if (flat.empty()) flat.push_back(0);
  std::printf(
      "%s %s kernels %s: %zu nodes, %zu steps; executor %s; interpreter %.4f ms [%.4f-%.4f], "
      "flat %.4f ms [%.4f-%.4f], flat/interpreter %.3f, %.0f ns a step saved; outputs %s\n",
      model.c_str(), input.c_str(), kernels.c_str(), nodes, p.steps.size(),
      summary.executor.c_str(), median(interpreter),
      *std::min_element(interpreter.begin(), interpreter.end()),
      *std::max_element(interpreter.begin(), interpreter.end()), median(flat),
      *std::min_element(flat.begin(), flat.end()), *std::max_element(flat.begin(), flat.end()),
      median(flat) / median(interpreter),
      (median(interpreter) - median(flat)) * 1e6 / static_cast<double>(p.steps.size()),
      same && identical ? "identical" : "DIFFER");
  for (const auto& [kind, count] : p.kinds) std::printf("  %s %d\n", kind.c_str(), count);
  return same && identical ? 0 : 1;
}
