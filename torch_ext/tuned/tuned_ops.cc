// memoplan::linear: aten::linear (plus a fused relu/gelu) on memoplan's GEMM or oneDNN's matmul
// (tuned::project, projection.cc), with the weight packed once in the layout the faster of the two
// reads. Each distinct shape (M, K, N, activation, bias, intra-op threads) is measured the first
// time it runs (during plan()'s warm-up passes): every candidate configuration of the GEMM
// (kernels/: micro-kernel, blocking, loop order), oneDNN's primitive, and aten's own op
// on the real input; the fastest serves that shape from then on, so replacing never makes an op
// slower than it measured. A weight changed in place (version counter) is repacked; inference
// tensors (no version counter), other dtypes and autograd use aten's op.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <sstream>
#include <tuple>

#include "blocked/blocked.h"
#include "blocked/winograd_conv.h"
#include "cold_caches.h"
#include "layout_plan.h"
#include "memoplan/kernels/gemm.h"
#include "memoplan/kernels/tune.h"
#include "planning/choice_cache.h"
#include "planning/op_descriptor.h"
#include "planning/planning.h"
#include "reports.h"
#include "tuned_support.h"
#include "weight_cache.h"

namespace memoplan::torch_ext {
namespace {

using kernels::Activation;

// aten::linear, then the activation fused after it.
struct LinearOp {
  static constexpr const char* kName = "memoplan::linear";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input, weight;
  c10::optional<at::Tensor> bias;
  int64_t handle = -1;     // where its packed weight lives (tuned::new_site)
  int64_t activation = 0;  // kernels::Activation
  static constexpr auto fields() {
    using O = LinearOp;
    return std::make_tuple(op::field("input", &O::input), op::field("weight", &O::weight),
                           op::field("bias", &O::bias), op::field("handle", &O::handle),
                           op::field("activation", &O::activation));
  }
};

std::atomic<uint64_t> tuned_calls{0}, stock_calls{0}, shapes_tuned{0}, weights_packed{0},
    residuals_in_place{0}, convolutions_run{0}, convolutions_resolved{0};

// What one shape measured: aten vs memoplan's side (tuned::project), milliseconds per call.
using ShapeChoice = tuned::Measured;
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int, bool, int>;  // M K N act bias threads

ChoiceCache<ShapeKey, ShapeChoice>& shapes() {
  static auto* table = new ChoiceCache<ShapeKey, ShapeChoice>();
  return *table;
}

using tuned::PackedWeight;
// A weight's packings: in memoplan's panels (one per panel width), in oneDNN's layouts (one per
// packing layout).
tuned::WeightCache<PackedWeight>& panel_packings() {
  static auto* cache = new tuned::WeightCache<PackedWeight>(
      [](const PackedWeight& w) -> uint64_t { return w.panels.bytes(); });
  return *cache;
}
tuned::WeightCache<tuned::OneDnnWeight>& onednn_packings() {
  static auto* cache = new tuned::WeightCache<tuned::OneDnnWeight>(
      [](const tuned::OneDnnWeight& w) -> uint64_t { return w.bytes.nbytes(); });
  return *cache;
}

at::Tensor activate(at::Tensor y, Activation activation) {
  if (activation == Activation::kRelu) return at::relu_(y);
  if (activation == Activation::kGelu) return at::gelu(y);
  if (activation == Activation::kHardswish) return at::hardswish_(y);
  return y;
}

at::Tensor stock(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b,
                 Activation activation) {
  return activate(at::linear(x, w, b), activation);
}

}  // namespace

namespace tuned {

kernels::ParallelFor intra_op_parallel() {
  if (at::get_num_threads() <= 1) return {};
  return [](int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    at::parallel_for(0, n, 1, body);
  };
}

}  // namespace tuned

namespace {

using tuned::intra_op_parallel;

// Measures a new shape: memoplan's side (tuned::project: its GEMM or oneDNN's matmul, measured
// there on first use) against aten's op, on the real operands into a scratch output.
ShapeChoice measure(const at::Tensor& x2d, const at::Tensor& w, const c10::optional<at::Tensor>& b,
                    Activation activation, int64_t handle) {
  // Beside the pass (ChoiceCache::decide): a scratch output, aten's results.
  at::Tensor out = at::empty({x2d.size(0), w.size(0)}, x2d.options());
  const float* bias = b ? b->data_ptr<float>() : nullptr;
  const ShapeChoice choice = tuned::measure_both(
      [&] {
        tuned::project(x2d, w, bias, handle, out.data_ptr<float>(), w.size(0), activation, false);
      },
      [&] { stock(x2d, w, b, activation); }, 5);
  if (!choice.use_memoplan) tuned::forget_packings(handle);  // aten's op reads the weight as it is
  return choice;
}

}  // namespace

namespace tuned {

std::shared_ptr<const PackedWeight> packed_weight(int64_t handle, const at::Tensor& w, int nr,
                                                  int64_t given_version) {
  return panel_packings().get(
      handle, Sources().add(w, given_version),
      [nr](const PackedWeight& p) { return p.panels.nr() == nr; },
      [&] {
        auto fresh = std::make_shared<PackedWeight>();
        fresh->panels = kernels::PackedB(
            kernels::MatrixView{w.data_ptr<float>(), w.size(0), w.size(1), w.stride(0), w.stride(1)}
                .transposed(),
            nr);
        ++weights_packed;
        return fresh;
      });
}

std::shared_ptr<const OneDnnWeight> onednn_weight(
    int64_t handle, const at::Tensor& w, const std::shared_ptr<const onednn::Matmul>& matmul,
    int64_t given_version) {
  return onednn_packings().get(
      handle, Sources().add(w, given_version),
      [&](const OneDnnWeight& p) { return p.packer->same_packing(*matmul); },
      [&] {
        auto fresh = std::make_shared<OneDnnWeight>();
        fresh->packer = matmul;
        fresh->bytes = at::empty({static_cast<int64_t>(matmul->packed_weights_bytes())}, at::kByte);
        matmul->pack_weights(w.data_ptr<float>(), w.stride(0), w.stride(1),
                             fresh->bytes.data_ptr());
        ++weights_packed;
        return fresh;
      });
}

void forget_packings(int64_t handle) {
  panel_packings().forget(handle);
  onednn_packings().forget(handle);
}

void flush_tensor(const at::Tensor& t) {
  if (!t.defined()) return;  // from its first element to its last (0 bytes when empty)
  flush_from_caches(t.data_ptr(),
                    at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.element_size()));
}

void flush_weight(int64_t site, const at::Tensor& plain) {
  flush_tensor(plain);
  panel_packings().for_each(site, [](const PackedWeight& w) {
    if (!w.panels.empty()) flush_from_caches(w.panels.panel(0), w.panels.bytes());
  });
  onednn_packings().for_each(
      site, [](const OneDnnWeight& w) { flush_from_caches(w.bytes.data_ptr(), w.bytes.nbytes()); });
}

bool packable(const at::Tensor& w) {
  return w.scalar_type() == at::kFloat && w.device().is_cpu() && w.dim() == 2 &&
         !(at::GradMode::is_enabled() && w.requires_grad());
}

void count(bool tuned) { ++(tuned ? tuned_calls : stock_calls); }
void count_in_place() { ++residuals_in_place; }
void count_convolution(bool resolved) {
  convolutions_run.fetch_add(1, std::memory_order_relaxed);
  if (resolved) convolutions_resolved.fetch_add(1, std::memory_order_relaxed);
}

kernels::GemmConfig best_config(int64_t m, int64_t k, int64_t n, Activation activation, bool bias,
                                bool prepacked) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool, bool, int>;
  static auto* configs = new ChoiceCache<Key, kernels::GemmConfig>();
  const Key key{m, k, n, static_cast<int>(activation), bias, prepacked, at::get_num_threads()};
  if (choice() != KernelChoice::kMeasure) {  // tests: what was measured, else nothing measured
    const kernels::GemmConfig* measured = configs->find(key);
    return measured ? *measured : kernels::default_config();
  }
  return configs->decide(key, [&] {
    kernels::TuneOptions options;
    options.repetitions = 3;
    options.budget_ms = 300;
    options.parallel = intra_op_parallel();
    ++shapes_tuned;
    return kernels::tune({m, k, n, prepacked, activation, bias}, options).front().config;
  });
}

}  // namespace tuned

namespace {

bool replaceable(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b) {
  if (!tuned::packable(w) || x.scalar_type() != at::kFloat || !x.device().is_cpu() || x.dim() < 1 ||
      x.size(-1) != w.size(1) || x.numel() == 0) {
    return false;
  }
  // Loaded parameters require grad; that matters only where autograd records (grad mode on).
  if (at::GradMode::is_enabled() && (x.requires_grad() || (b && b->requires_grad()))) {
    return false;
  }
  if (b && (b->scalar_type() != at::kFloat || b->dim() != 1 || b->size(0) != w.size(0) ||
            !b->is_contiguous())) {
    return false;
  }
  return true;
}

}  // namespace

at::Tensor tuned::linear(const at::Tensor& x, const at::Tensor& w,
                         const c10::optional<at::Tensor>& b, int64_t handle,
                         Activation activation) {
  if (!replaceable(x, w, b)) {
    ++stock_calls;
    return stock(x, w, b, activation);
  }
  const at::Tensor x2d = x.reshape({-1, x.size(-1)});
  if (x2d.stride(1) != 1) {
    ++stock_calls;
    return stock(x, w, b, activation);
  }
  const ShapeKey key{x2d.size(0),   x2d.size(1),          w.size(0), static_cast<int>(activation),
                     b.has_value(), at::get_num_threads()};
  ShapeChoice choice;
  const KernelChoice forced = tuned::choice();
  if (forced == KernelChoice::kAlwaysAten) {
    ++stock_calls;
    return stock(x, w, b, activation);
  }
  if (forced == KernelChoice::kAlwaysMemoplan) {
    choice.use_memoplan = true;
  } else {
    choice = shapes().decide(key, [&] { return measure(x2d, w, b, activation, handle); });
  }
  if (!choice.use_memoplan) {
    ++stock_calls;
    return stock(x, w, b, activation);
  }
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  at::Tensor out = at::empty(sizes, x.options().memory_format(at::MemoryFormat::Contiguous));
  tuned::project(x2d, w, b ? b->data_ptr<float>() : nullptr, handle, out.data_ptr<float>(),
                 w.size(0), activation, false);
  ++tuned_calls;
  return out;
}

namespace {

at::Tensor linear_op(LinearOp op) {
  return tuned::linear(op.input, op.weight, op.bias, op.handle,
                       static_cast<Activation>(op.activation));
}

torch::jit::RegisterOperators tuned_operators({
    op::make_operator<LinearOp, &linear_op>(),
});

}  // namespace

namespace {

// The activation fused after `linear` when its output's only use is one; else kNone.
Activation fusable_activation(torch::jit::Node* linear, torch::jit::Node** activation_node) {
  torch::jit::Value* out = linear->output();
  if (out->uses().size() != 1) return Activation::kNone;
  torch::jit::Node* user = out->uses()[0].user;
  if (user->owningBlock() != linear->owningBlock() || user->inputs()[0] != out) {
    return Activation::kNone;
  }
  if (user->kind() == c10::Symbol::fromQualString("aten::relu") && user->inputs().size() == 1) {
    *activation_node = user;
    return Activation::kRelu;
  }
  // In place or not: the linear's output has no other use.
  if ((user->kind() == c10::Symbol::fromQualString("aten::hardswish") ||
       user->kind() == c10::Symbol::fromQualString("aten::hardswish_")) &&
      user->inputs().size() == 1) {
    *activation_node = user;
    return Activation::kHardswish;
  }
  if (user->kind() == c10::Symbol::fromQualString("aten::gelu") && user->inputs().size() == 2) {
    const auto approximate = torch::jit::constant_as<std::string>(user->input(1));
    if (approximate && *approximate == "none") {
      *activation_node = user;
      return Activation::kGelu;
    }
  }
  return Activation::kNone;
}

void replace_linear_in_block(torch::jit::Graph& graph, torch::jit::Block* block, int& replaced) {
  std::vector<torch::jit::Node*> linears;
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) replace_linear_in_block(graph, inner, replaced);
    if (node->kind() == c10::Symbol::fromQualString("aten::linear") && node->inputs().size() == 3) {
      linears.push_back(node);
    }
  }
  for (torch::jit::Node* node : linears) {
    torch::jit::Node* activation_node = nullptr;
    const Activation activation = fusable_activation(node, &activation_node);
    torch::jit::WithInsertPoint point(node);
    op::Builder<LinearOp> b(graph);
    b.set(&LinearOp::input, node->input(0)).set(&LinearOp::weight, node->input(1));
    b.set(&LinearOp::bias, node->input(2)).constant(&LinearOp::handle, tuned::new_site());
    b.constant(&LinearOp::activation, static_cast<int64_t>(activation));
    torch::jit::Node* tuned = b.create();
    tuned->output()->setType(node->output()->type());
    graph.insertNode(tuned);
    torch::jit::Node* last = activation_node ? activation_node : node;
    last->output()->replaceAllUsesWith(tuned->output());
    if (activation_node) activation_node->destroy();
    node->destroy();
    ++replaced;
  }
}

}  // namespace

int replace_hot_ops(torch::jit::Graph& graph, int64_t module) {
  tuned::RewriteOwner owner(module);  // the sites, layout graphs and report lines made below
  int replaced = 0;
  replace_linear_in_block(graph, graph.block(), replaced);
  replaced += replace_encoder_layers(graph) + replace_attention(graph) + replace_matmul_ops(graph);
  // The blocked layout's regions first; what they leave (convolutions on computed weights) goes
  // to the NCHW / NHWC layout plan.
  replaced += blocked::replace_regions(graph);
  return replaced + replace_convolutions(graph);
}

namespace {

// The linear layers' decisions (kernel_report()'s first lines).
std::string linear_report() {
  std::ostringstream out;
  shapes().for_each([&](const ShapeKey& key, const ShapeChoice& choice) {
    const auto& [m, k, n, act, bias, threads] = key;
    out << "linear " << m << "x" << k << "x" << n << " " << to_string(static_cast<Activation>(act))
        << (bias ? " +bias" : "") << " threads " << threads << ": aten " << choice.aten_ms
        << " ms, memoplan " << choice.memoplan_ms << " ms -> "
        << (choice.use_memoplan ? "memoplan" : "aten") << "\n";
  });
  return out.str();
}
const bool linear_report_registered = tuned::add_report(10, &linear_report);

// kernel_report() (memoplan/torch/plan.h) while this library is loaded.
std::string tuned_report() { return tuned::all_reports(); }

// The planning runtime runs this rewrite for PlanOptions::kernels == "tuned"; registered when
// libmemoplan_tuned.so loads.
// The module will not run again: its packed weights, layout graphs and report lines go.
void forget_module(int64_t module) {
  tuned::forget_sites(module);
  layouts::forget_graphs(module);
  blocked::forget_reports(module);
}

constexpr KernelSet kTunedSet{&replace_hot_ops,   &tuned_report,        &tuned::begin_census,
                              &tuned::end_census, &tuned::packed_bytes, &forget_module};
const bool registered = (register_kernels(Kernels::kTuned, &kTunedSet), true);

}  // namespace

KernelStats kernel_stats() {
  return {tuned_calls.load(),          stock_calls.load(),        shapes_tuned.load(),
          weights_packed.load(),       residuals_in_place.load(), convolutions_run.load(),
          convolutions_resolved.load()};
}

}  // namespace memoplan::torch_ext
