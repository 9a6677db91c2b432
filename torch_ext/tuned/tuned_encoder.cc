// memoplan::encoder_layer: aten::_transformer_encoder_layer_fwd (the fused layer that
// nn.TransformerEncoderLayer runs in inference) computed with memoplan's GEMM or oneDNN's matmul
// (tuned::project, the faster per shape): the QKV, output and feed-forward projections on packed
// weights with bias, activation and residual fused into the GEMM's epilogue, the attention per head
// on strided views of the QKV buffer (no transposes copied; kernels/attention.h: the scores in a
// per-thread buffer, the softmax vectorized), aten's layer norm. aten's layer computes the same
// sums with OpenBLAS. Each input shape is measured both ways on first use (during plan()'s warm-up,
// caches flushed before each timed call) and run by the faster; masks, nested tensors and anything
// but float CPU tensors go to aten.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "memoplan/kernels/attention.h"
#include "memoplan/kernels/gemm.h"
#include "planning/choice_cache.h"
#include "planning/op_descriptor.h"
#include "reports.h"
#include "tuned_support.h"

namespace memoplan::torch_ext {
namespace {

using kernels::Activation;
using kernels::MatrixView;

// The 20 arguments of aten::_transformer_encoder_layer_fwd, then memoplan's handle.
// memoplan::encoder_layer: aten::_transformer_encoder_layer_fwd's arguments, then `handle`.
struct LayerArgs {
  static constexpr const char* kName = "memoplan::encoder_layer";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor src;
  int64_t embed_dim = 0, num_heads = 0;
  at::Tensor qkv_weight, qkv_bias, proj_weight, proj_bias;
  bool use_gelu = false, norm_first = false;
  double eps = 0;
  at::Tensor norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2;
  at::Tensor ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2;
  c10::optional<at::Tensor> mask;
  c10::optional<int64_t> mask_type;
  int64_t handle = -1;  // four weight sites: qkv, proj, ffn 1, ffn 2
  static constexpr auto fields() {
    using O = LayerArgs;
    return std::make_tuple(
        op::field("src", &O::src), op::field("embed_dim", &O::embed_dim),
        op::field("num_heads", &O::num_heads), op::field("qkv_weight", &O::qkv_weight),
        op::field("qkv_bias", &O::qkv_bias), op::field("proj_weight", &O::proj_weight),
        op::field("proj_bias", &O::proj_bias), op::field("use_gelu", &O::use_gelu),
        op::field("norm_first", &O::norm_first), op::field("eps", &O::eps),
        op::field("norm_weight_1", &O::norm_weight_1), op::field("norm_bias_1", &O::norm_bias_1),
        op::field("norm_weight_2", &O::norm_weight_2), op::field("norm_bias_2", &O::norm_bias_2),
        op::field("ffn_weight_1", &O::ffn_weight_1), op::field("ffn_bias_1", &O::ffn_bias_1),
        op::field("ffn_weight_2", &O::ffn_weight_2), op::field("ffn_bias_2", &O::ffn_bias_2),
        op::field("mask", &O::mask), op::field("mask_type", &O::mask_type),
        op::field("handle", &O::handle));
  }
};

at::Tensor aten_layer(const LayerArgs& a) {
  return at::_transformer_encoder_layer_fwd(
      a.src, a.embed_dim, a.num_heads, a.qkv_weight, a.qkv_bias, a.proj_weight, a.proj_bias,
      a.use_gelu, a.norm_first, a.eps, a.norm_weight_1, a.norm_bias_1, a.norm_weight_2,
      a.norm_bias_2, a.ffn_weight_1, a.ffn_bias_1, a.ffn_weight_2, a.ffn_bias_2, a.mask,
      a.mask_type);
}

bool supported(const LayerArgs& a) {
  const at::Tensor& s = a.src;
  if (s.is_nested() || s.scalar_type() != at::kFloat || !s.device().is_cpu() || s.dim() != 3 ||
      s.size(2) != a.embed_dim || s.numel() == 0 || a.mask.has_value() || a.num_heads <= 0 ||
      a.embed_dim % a.num_heads != 0) {
    return false;
  }
  if (at::GradMode::is_enabled() && s.requires_grad()) return false;
  for (const at::Tensor* w : {&a.qkv_weight, &a.proj_weight, &a.ffn_weight_1, &a.ffn_weight_2}) {
    if (!tuned::packable(*w)) return false;
  }
  for (const at::Tensor* b : {&a.qkv_bias, &a.proj_bias, &a.ffn_bias_1, &a.ffn_bias_2}) {
    if (b->scalar_type() != at::kFloat || b->dim() != 1 || !b->is_contiguous()) return false;
  }
  return a.qkv_weight.size(0) == 3 * a.embed_dim && a.qkv_weight.size(1) == a.embed_dim;
}

at::Tensor memoplan_layer(const LayerArgs& a) {
  const int64_t batch = a.src.size(0), tokens = a.src.size(1), e = a.embed_dim;
  const int64_t heads = a.num_heads, rows = batch * tokens;
  const at::Tensor src = a.src.contiguous().view({rows, e});
  const std::vector<int64_t> norm_shape{e};
  auto norm = [&](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return at::layer_norm(x, norm_shape, w, b, a.eps);
  };
  // Attention: qkv = x Wqkv^T + b, laid out [rows, 3e]: q, k, v of head h are the column blocks
  // h*d, e + h*d and 2e + h*d, read in place with row stride 3e.
  const at::Tensor x = a.norm_first ? norm(src, a.norm_weight_1, a.norm_bias_1) : src;
  at::Tensor qkv = at::empty({rows, 3 * e}, src.options());
  tuned::project(x, a.qkv_weight, a.qkv_bias.data_ptr<float>(), a.handle, qkv.data_ptr<float>(),
                 3 * e, Activation::kNone, false);
  at::Tensor context = at::empty({rows, e}, src.options());
  tuned::attend(qkv, batch, tokens, e, heads, context);
  // Residual fused: attended = src + context Wproj^T + b.
  at::Tensor attended = src.clone();
  tuned::project(context, a.proj_weight, a.proj_bias.data_ptr<float>(), a.handle + 1,
                 attended.data_ptr<float>(), e, Activation::kNone, true);
  if (!a.norm_first) attended = norm(attended, a.norm_weight_1, a.norm_bias_1);
  // Feed-forward, residual fused again.
  const at::Tensor ffn_in =
      a.norm_first ? norm(attended, a.norm_weight_2, a.norm_bias_2) : attended;
  at::Tensor hidden = at::empty({rows, a.ffn_weight_1.size(0)}, src.options());
  tuned::project(ffn_in, a.ffn_weight_1, a.ffn_bias_1.data_ptr<float>(), a.handle + 2,
                 hidden.data_ptr<float>(), hidden.size(1),
                 a.use_gelu ? Activation::kGelu : Activation::kRelu, false);
  at::Tensor out = attended.clone();
  tuned::project(hidden, a.ffn_weight_2, a.ffn_bias_2.data_ptr<float>(), a.handle + 3,
                 out.data_ptr<float>(), e, Activation::kNone, true);
  if (!a.norm_first) out = norm(out, a.norm_weight_2, a.norm_bias_2);
  return out.view({batch, tokens, e});
}

// Per shape and settings: memoplan's layer or aten's, measured once.
using LayerKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, int>;
ChoiceCache<LayerKey, tuned::Measured>& encoder_choices() {
  static auto* table = new ChoiceCache<LayerKey, tuned::Measured>();
  return *table;
}

bool use_memoplan(const LayerArgs& a) {
  const KernelChoice forced = tuned::choice();
  if (forced != KernelChoice::kMeasure) return forced == KernelChoice::kAlwaysMemoplan;
  const LayerKey key{a.src.size(0), a.src.size(1), a.embed_dim,          a.num_heads,
                     a.use_gelu,    a.norm_first,  at::get_num_threads()};
  // The first (untimed) call of memoplan's layer also measures and caches each GEMM shape. Cold
  // caches: a layer's weights (28 MiB in BERT-base) come from memory in a pass of several layers;
  // its activations come warm from the layer before.
  const auto cold = [&] {
    const at::Tensor* weights[] = {&a.qkv_weight, &a.proj_weight, &a.ffn_weight_1, &a.ffn_weight_2};
    for (int i = 0; i < 4; ++i) tuned::flush_weight(a.handle + i, *weights[i]);
    for (const at::Tensor* t :
         {&a.qkv_bias, &a.proj_bias, &a.ffn_bias_1, &a.ffn_bias_2, &a.norm_weight_1, &a.norm_bias_1,
          &a.norm_weight_2, &a.norm_bias_2}) {
      tuned::flush_tensor(*t);
    }
  };
  return encoder_choices()
      .decide(key,
              [&] {
                return tuned::measure_both([&] { memoplan_layer(a); }, [&] { aten_layer(a); }, 3,
                                           cold);
              })
      .use_memoplan;
}

at::Tensor encoder_layer(const LayerArgs& a) {
  if (!supported(a) || !use_memoplan(a)) {
    tuned::count(false);
    return aten_layer(a);
  }
  tuned::count(true);
  return memoplan_layer(a);
}

const c10::Symbol kAtenLayer = c10::Symbol::fromQualString("aten::_transformer_encoder_layer_fwd");
at::Tensor encoder_layer_op(LayerArgs a) { return encoder_layer(a); }

torch::jit::RegisterOperators encoder_operators(
    {op::make_operator<LayerArgs, &encoder_layer_op>()});

void replace_encoder_in_block(torch::jit::Graph& graph, torch::jit::Block* block, int& replaced) {
  std::vector<torch::jit::Node*> layers;
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks())
      replace_encoder_in_block(graph, inner, replaced);
    if (node->kind() == kAtenLayer && node->inputs().size() == 20) layers.push_back(node);
  }
  for (torch::jit::Node* node : layers) {
    torch::jit::WithInsertPoint point(node);
    const int64_t first_site = tuned::new_site(4);  // qkv, proj, ffn 1, ffn 2
    op::Builder<LayerArgs> b(graph);
    b.set_leading(node->inputs()).constant(&LayerArgs::handle, first_site);
    torch::jit::Node* layer = b.create();
    layer->output()->setType(node->output()->type());
    graph.insertNode(layer);
    node->output()->replaceAllUsesWith(layer->output());
    node->destroy();
    ++replaced;
  }
}

}  // namespace

namespace tuned {

// q k^T, the scaled softmax and the product with v in one task per (batch, head), the scores in
// that thread's buffer (kernels/attention.h).
void attend(const at::Tensor& qkv, int64_t batch, int64_t tokens, int64_t e, int64_t heads,
            at::Tensor& context) {
  const int64_t d = e / heads;
  const float* q_base = qkv.data_ptr<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const kernels::GemmConfig config = kernels::default_config();
  float* context_base = context.data_ptr<float>();
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const float* rows_b = q_base + b * tokens * 3 * e;
      kernels::attention_head(MatrixView{rows_b + h * d, tokens, d, 3 * e, 1},
                              MatrixView{rows_b + e + h * d, tokens, d, 3 * e, 1},
                              MatrixView{rows_b + 2 * e + h * d, tokens, d, 3 * e, 1}, scale,
                              context_base + b * tokens * e + h * d, e, config);
    }
  });
}

}  // namespace tuned

std::string encoder_report() {
  std::string out;
  encoder_choices().for_each([&](const LayerKey& key, const tuned::Measured& c) {
    const auto& [batch, tokens, e, heads, gelu, norm_first, threads] = key;
    out += "encoder layer " + std::to_string(batch) + "x" + std::to_string(tokens) + "x" +
           std::to_string(e) + " heads " + std::to_string(heads) + (gelu ? " gelu" : " relu") +
           (norm_first ? " norm-first" : "") + " threads " + std::to_string(threads) + ": aten " +
           std::to_string(c.aten_ms) + " ms, memoplan " + std::to_string(c.memoplan_ms) +
           " ms -> " + (c.use_memoplan ? "memoplan" : "aten") + "\n";
  });
  return out;
}

namespace {
const bool encoder_report_registered =
    tuned::add_report(30, &encoder_report);  // kernel_report()'s order
}  // namespace

int replace_encoder_layers(torch::jit::Graph& graph) {
  int replaced = 0;
  replace_encoder_in_block(graph, graph.block(), replaced);
  return replaced;
}

}  // namespace memoplan::torch_ext
