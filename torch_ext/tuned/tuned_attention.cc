// memoplan::attention: aten::_native_multi_head_attention (what nn.MultiheadAttention runs in
// inference on its fast path: self-attention, batch first; torchvision's ViT) computed as the
// encoder layer computes its attention (tuned_encoder.cc): the QKV and output projections on
// packed weights with the bias in the GEMM's epilogue (tuned::project: memoplan's GEMM or
// oneDNN's matmul, the faster per shape), each head's attention on strided views of the QKV buffer
// (tuned::attend). Each input shape is measured against aten's op on first use (during
// plan()'s warm-up) and run by the faster. A mask, attention weights asked for, distinct query /
// key / value, or anything but float CPU tensors go to aten.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <string>
#include <tuple>

#include "planning/choice_cache.h"
#include "planning/op_descriptor.h"
#include "reports.h"
#include "tuned_support.h"

namespace memoplan::torch_ext {
namespace {

using kernels::Activation;

// The 13 arguments of aten::_native_multi_head_attention, then memoplan's handle.
// memoplan::attention: aten::_native_multi_head_attention's arguments, then `handle`.
struct AttentionArgs {
  static constexpr const char* kName = "memoplan::attention";
  static constexpr const char* kReturns = "(Tensor, Tensor)";
  at::Tensor query, key, value;
  int64_t embed_dim = 0, num_heads = 0;
  at::Tensor qkv_weight, qkv_bias, proj_weight, proj_bias;
  c10::optional<at::Tensor> mask;
  bool need_weights = false, average_weights = false;
  c10::optional<int64_t> mask_type;
  int64_t handle = -1;  // two weight sites: qkv, proj
  static constexpr auto fields() {
    using O = AttentionArgs;
    return std::make_tuple(
        op::field("query", &O::query), op::field("key", &O::key), op::field("value", &O::value),
        op::field("embed_dim", &O::embed_dim), op::field("num_head", &O::num_heads),
        op::field("qkv_weight", &O::qkv_weight), op::field("qkv_bias", &O::qkv_bias),
        op::field("proj_weight", &O::proj_weight), op::field("proj_bias", &O::proj_bias),
        op::field("mask", &O::mask), op::field("need_weights", &O::need_weights),
        op::field("average_attn_weights", &O::average_weights),
        op::field("mask_type", &O::mask_type), op::field("handle", &O::handle));
  }
};

std::tuple<at::Tensor, at::Tensor> aten_attention(const AttentionArgs& a) {
  return at::_native_multi_head_attention(a.query, a.key, a.value, a.embed_dim, a.num_heads,
                                          a.qkv_weight, a.qkv_bias, a.proj_weight, a.proj_bias,
                                          a.mask, a.need_weights, a.average_weights, a.mask_type);
}

bool same_tensor(const at::Tensor& a, const at::Tensor& b) {
  return a.is_same(b) || (a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() &&
                          a.strides() == b.strides() && a.dtype() == b.dtype());
}

bool supported(const AttentionArgs& a) {
  const at::Tensor& x = a.query;
  if (x.is_nested() || x.scalar_type() != at::kFloat || !x.device().is_cpu() || x.dim() != 3 ||
      x.size(2) != a.embed_dim || x.numel() == 0 || a.mask.has_value() || a.need_weights ||
      a.num_heads <= 0 || a.embed_dim % a.num_heads != 0 || !same_tensor(x, a.key) ||
      !same_tensor(x, a.value)) {
    return false;
  }
  if (at::GradMode::is_enabled() && x.requires_grad()) return false;
  if (!tuned::packable(a.qkv_weight) || !tuned::packable(a.proj_weight)) return false;
  for (const at::Tensor* b : {&a.qkv_bias, &a.proj_bias}) {
    if (!b->defined() || b->scalar_type() != at::kFloat || b->dim() != 1 || !b->is_contiguous()) {
      return false;
    }
  }
  return a.qkv_weight.size(0) == 3 * a.embed_dim && a.qkv_weight.size(1) == a.embed_dim &&
         a.proj_weight.size(0) == a.embed_dim && a.proj_weight.size(1) == a.embed_dim;
}

at::Tensor memoplan_attention(const AttentionArgs& a) {
  const int64_t batch = a.query.size(0), tokens = a.query.size(1), e = a.embed_dim;
  const int64_t heads = a.num_heads, rows = batch * tokens;
  const at::Tensor x = a.query.contiguous().view({rows, e});
  // qkv = x Wqkv^T + b, laid out [rows, 3e]: q, k, v of head h are the column blocks h*d,
  // e + h*d and 2e + h*d, read in place with row stride 3e.
  at::Tensor qkv = at::empty({rows, 3 * e}, x.options());
  tuned::project(x, a.qkv_weight, a.qkv_bias.data_ptr<float>(), a.handle, qkv.data_ptr<float>(),
                 3 * e, Activation::kNone, false);
  at::Tensor context = at::empty({rows, e}, x.options());
  tuned::attend(qkv, batch, tokens, e, heads, context);
  qkv.reset();  // its bytes free before the output's: one buffer fewer at the peak
  at::Tensor out = at::empty({rows, e}, x.options());
  tuned::project(context, a.proj_weight, a.proj_bias.data_ptr<float>(), a.handle + 1,
                 out.data_ptr<float>(), e, Activation::kNone, false);
  return out.view({batch, tokens, e});
}

// Per shape: memoplan's attention or aten's, measured once.
using AttentionKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int>;
ChoiceCache<AttentionKey, tuned::Measured>& attention_choices() {
  static auto* table = new ChoiceCache<AttentionKey, tuned::Measured>();
  return *table;
}

bool use_memoplan(const AttentionArgs& a) {
  const KernelChoice forced = tuned::choice();
  if (forced != KernelChoice::kMeasure) return forced == KernelChoice::kAlwaysMemoplan;
  const AttentionKey key{a.query.size(0), a.query.size(1), a.embed_dim, a.num_heads,
                         at::get_num_threads()};
  // Cold caches, as the layers of a pass see their weights.
  const auto cold = [&] {
    tuned::flush_weight(a.handle, a.qkv_weight);
    tuned::flush_weight(a.handle + 1, a.proj_weight);
    tuned::flush_tensor(a.qkv_bias);
    tuned::flush_tensor(a.proj_bias);
  };
  return attention_choices()
      .decide(key,
              [&] {
                return tuned::measure_both([&] { memoplan_attention(a); },
                                           [&] { aten_attention(a); }, 3, cold);
              })
      .use_memoplan;
}

std::tuple<at::Tensor, at::Tensor> attention(const AttentionArgs& a) {
  if (!supported(a) || !use_memoplan(a)) {
    tuned::count(false);
    return aten_attention(a);
  }
  tuned::count(true);
  return {memoplan_attention(a), at::Tensor()};  // aten's second output without weights
}

const c10::Symbol kAtenAttention =
    c10::Symbol::fromQualString("aten::_native_multi_head_attention");
std::tuple<at::Tensor, at::Tensor> attention_op(AttentionArgs a) { return attention(a); }

torch::jit::RegisterOperators attention_operators(
    {op::make_operator<AttentionArgs, &attention_op>()});

void replace_attention_in_block(torch::jit::Graph& graph, torch::jit::Block* block, int& replaced) {
  std::vector<torch::jit::Node*> found;
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks())
      replace_attention_in_block(graph, inner, replaced);
    if (node->kind() == kAtenAttention && node->inputs().size() == 13 &&
        node->outputs().size() == 2) {
      found.push_back(node);
    }
  }
  for (torch::jit::Node* node : found) {
    torch::jit::WithInsertPoint point(node);
    const int64_t first_site = tuned::new_site(2);  // qkv, proj
    op::Builder<AttentionArgs> b(graph);
    b.set_leading(node->inputs()).constant(&AttentionArgs::handle, first_site);
    torch::jit::Node* made = b.create(2);
    for (size_t i = 0; i < 2; ++i) {
      made->output(i)->setType(node->output(i)->type());
      node->output(i)->replaceAllUsesWith(made->output(i));
    }
    graph.insertNode(made);
    node->destroy();
    ++replaced;
  }
}

}  // namespace

std::string attention_report() {
  std::string out;
  attention_choices().for_each([&](const AttentionKey& key, const tuned::Measured& c) {
    const auto& [batch, tokens, e, heads, threads] = key;
    out += "attention " + std::to_string(batch) + "x" + std::to_string(tokens) + "x" +
           std::to_string(e) + " heads " + std::to_string(heads) + " threads " +
           std::to_string(threads) + ": aten " + std::to_string(c.aten_ms) + " ms, memoplan " +
           std::to_string(c.memoplan_ms) + " ms -> " + (c.use_memoplan ? "memoplan" : "aten") +
           "\n";
  });
  return out;
}

namespace {
const bool attention_report_registered =
    tuned::add_report(40, &attention_report);  // kernel_report()'s order
}  // namespace

int replace_attention(torch::jit::Graph& graph) {
  int replaced = 0;
  replace_attention_in_block(graph, graph.block(), replaced);
  return replaced;
}

}  // namespace memoplan::torch_ext
