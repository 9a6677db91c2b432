// The coverage observer (coverage.h). A thread-local RecordFunction callback over aten's function
// scopes and memoplan's user scopes (planning/op_record.h) keeps a stack of the scopes open on the
// pass's thread, each with its FLOPs read when it begins (at its end the inputs RecordFunction
// holds are a view of a stack the op has consumed). When a scope ends, its FLOPs (op_flops: a known
// convolution or product, from its inputs' sizes) or, for any other op, the FLOPs of the known ops
// that ran inside it, go to its parent; at the outermost level they are booked:
//  - a memoplan operator: its own FLOPs, less the aten products that ran inside it (it chose aten
//    at run time: measured slower, or a shape its kernels do not take), on memoplan. oneDNN's
//    convolution through aten on a weight memoplan packed (aten::mkldnn_convolution) counts as
//    memoplan's;
//  - an aten op: on aten, "not rewritten" when it is a kind the tuned rewrites take (so these
//    operands were not: a weight computed in the graph, a layout or dtype they do not handle),
//    else "unknown form" (conv_transpose2d, conv3d, einsum, multi-head attention, ...).
#include "coverage.h"

#include <ATen/record_function.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace memoplan::torch_ext {
namespace {

bool named(const char* name, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (std::strcmp(name, n) == 0) return true;
  }
  return false;
}

// A call's arguments: aten's by their positions in aten's schemas, memoplan's by their names in
// the operator's registered schema (each made from its descriptor's fields, op_descriptor.h: no
// position of a memoplan operator is assumed here). Looked up once per thread and operator.
class Args {
 public:
  Args(const char* name, c10::ArrayRef<const c10::IValue> in)
      : in_(in), schema_(std::strncmp(name, "memoplan::", 10) == 0 ? schema_of(name) : nullptr) {}

  // The argument `arg` of a memoplan operator, or at `aten` of an aten op; null when absent.
  const c10::IValue* get(const char* arg, size_t aten) const {
    size_t i = aten;
    if (schema_ != nullptr) {
      const auto index = schema_->argumentIndexWithName(arg);
      if (!index) return nullptr;
      i = static_cast<size_t>(*index);
    }
    return i < in_.size() ? &in_[i] : nullptr;
  }
  bool tensor(const char* arg, size_t aten) const {
    const c10::IValue* v = get(arg, aten);
    return v != nullptr && v->isTensor() && v->toTensor().defined();
  }
  std::vector<int64_t> ints(const char* arg, size_t aten) const {
    const c10::IValue* v = get(arg, aten);
    return v != nullptr && v->isIntList() ? v->toIntVector() : std::vector<int64_t>{};
  }

 private:
  static const c10::FunctionSchema* schema_of(const char* name) {
    thread_local std::map<std::string, std::shared_ptr<torch::jit::Operator>> known;
    auto it = known.find(name);
    if (it == known.end()) {
      const auto ops = torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name));
      it = known.emplace(name, ops.empty() ? nullptr : ops.front()).first;
    }
    return it->second ? &it->second->schema() : nullptr;
  }

  c10::ArrayRef<const c10::IValue> in_;
  const c10::FunctionSchema* schema_;
};

// A forward convolution: 2 * N * Cout * prod(output sizes) * (Cin / groups) * prod(kernel).
// The input's sizes are its logical ones in every layout (a blocked activation's too).
double conv_flops(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation) {
  const int64_t spatial = w.dim() - 2;
  if (spatial < 1 || x.dim() < spatial + 1) return 0;
  auto param = [](const std::vector<int64_t>& p, int64_t d, int64_t fallback) {
    if (p.empty()) return fallback;
    return p.size() == 1 ? p[0] : p[static_cast<size_t>(d)];
  };
  double outputs = x.dim() == spatial + 2 ? static_cast<double>(x.size(0)) : 1.0;
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t in = x.size(x.dim() - spatial + d);
    const int64_t k = w.size(2 + d);
    const int64_t o = (in + 2 * param(padding, d, 0) - param(dilation, d, 1) * (k - 1) - 1) /
                          param(stride, d, 1) +
                      1;
    if (o <= 0) return 0;
    outputs *= static_cast<double>(o);
  }
  return 2.0 * outputs * static_cast<double>(w.numel());  // w: Cout x (Cin / groups) x kernel
}

// Each input element of a transposed convolution meets (Cout / groups) * prod(kernel) weights.
double transposed_flops(const at::Tensor& x, const at::Tensor& w) {
  if (w.dim() < 3 || w.size(0) == 0) return 0;
  return 2.0 * static_cast<double>(x.numel()) * static_cast<double>(w.numel() / w.size(0));
}

// a (..., M, K) times b (..., K, N), batches broadcast.
double product_flops(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() < 1 || b.dim() < 1) return 0;
  const double k = static_cast<double>(a.size(-1));
  const double m = a.dim() >= 2 ? static_cast<double>(a.size(-2)) : 1.0;
  const double n = b.dim() >= 2 ? static_cast<double>(b.size(-1)) : 1.0;
  if (k == 0 || m == 0 || n == 0) return 0;
  const double batch =
      std::max(static_cast<double>(a.numel()) / (m * k), static_cast<double>(b.numel()) / (k * n));
  return 2.0 * batch * m * k * n;
}

// x (..., K) times weight (N, K)^T.
double linear_flops(const at::Tensor& x, const at::Tensor& w) {
  if (x.dim() < 1 || w.dim() != 2) return 0;
  return 2.0 * static_cast<double>(x.numel()) * static_cast<double>(w.size(0));
}

// The encoder layer's (aten::_transformer_encoder_layer_fwd and memoplan::encoder_layer: src,
// embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
// norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ...): its four
// projections and the attention's two batched products, batch first.
double encoder_flops(const Args& in) {
  const c10::IValue* embed_dim = in.get("embed_dim", 1);
  if (!in.tensor("src", 0) || !in.tensor("qkv_weight", 3) || !in.tensor("ffn_weight_1", 14) ||
      embed_dim == nullptr || !embed_dim->isInt()) {
    return 0;
  }
  const at::Tensor& src = in.get("src", 0)->toTensor();
  const double e = static_cast<double>(embed_dim->toInt());
  const double f = static_cast<double>(in.get("ffn_weight_1", 14)->toTensor().size(0));
  if (e <= 0 || src.dim() < 2) return 0;
  const double tokens = static_cast<double>(src.numel()) / e;
  const double sequence = static_cast<double>(src.size(-2));
  return 2.0 * tokens * (4.0 * e * e + 2.0 * e * f) + 4.0 * tokens * sequence * e;
}

// _native_multi_head_attention(query, key, value, embed_dim, ...): the QKV and output projections
// and, per head, q k^T and p v (self-attention).
double attention_flops(const Args& in) {
  const c10::IValue* embed_dim = in.get("embed_dim", 3);
  if (!in.tensor("query", 0) || embed_dim == nullptr || !embed_dim->isInt()) return 0;
  const at::Tensor& x = in.get("query", 0)->toTensor();
  const double e = static_cast<double>(embed_dim->toInt());
  if (e <= 0 || x.dim() < 2) return 0;
  const double tokens = static_cast<double>(x.numel()) / e;
  const double sequence = static_cast<double>(x.size(-2));
  return 2.0 * tokens * 4.0 * e * e + 4.0 * tokens * sequence * e;
}

// 0 for an op that is not a known convolution or product.
double op_flops(const char* name, c10::ArrayRef<const c10::IValue> values) {
  const Args in(name, values);
  auto t = [&](const char* arg, size_t aten) { return in.get(arg, aten)->toTensor(); };
  if (named(name, {"aten::conv1d", "aten::conv2d", "aten::conv3d", "memoplan::conv2d",
                   "memoplan::bconv", "memoplan::conv2d_sliced", "memoplan::budget_conv2d",
                   "memoplan::budget_conv2d_min"})) {
    if (!in.tensor("input", 0) || !in.tensor("weight", 1)) return 0;
    return conv_flops(t("input", 0), t("weight", 1), in.ints("stride", 3), in.ints("padding", 4),
                      in.ints("dilation", 5));
  }
  if (named(name, {"aten::_convolution", "aten::convolution"})) {
    const c10::IValue* transposed = in.get("transposed", 6);
    if (!in.tensor("input", 0) || !in.tensor("weight", 1) || !transposed || !transposed->isBool()) {
      return 0;
    }
    if (transposed->toBool()) return transposed_flops(t("input", 0), t("weight", 1));
    return conv_flops(t("input", 0), t("weight", 1), in.ints("stride", 3), in.ints("padding", 4),
                      in.ints("dilation", 5));
  }
  if (named(name, {"aten::mkldnn_convolution"})) {  // input, weight, bias, padding, stride, ...
    if (!in.tensor("input", 0) || !in.tensor("weight", 1)) return 0;
    return conv_flops(t("input", 0), t("weight", 1), in.ints("stride", 4), in.ints("padding", 3),
                      in.ints("dilation", 5));
  }
  if (named(name, {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"})) {
    if (!in.tensor("input", 0) || !in.tensor("weight", 1)) return 0;
    return transposed_flops(t("input", 0), t("weight", 1));
  }
  // memoplan::bn_relu_conv1x1 (input, ...) and cat_bn_relu_conv1x1 (tensors, ...): the 1x1
  // convolution over the input's channels.
  if (named(name, {"memoplan::bn_relu_conv1x1"}) && in.tensor("input", 0) &&
      in.tensor("weight", 0)) {
    const at::Tensor x = t("input", 0);
    return x.dim() == 4 ? 2.0 * x.size(0) * x.size(2) * x.size(3) * t("weight", 0).numel() : 0;
  }
  if (named(name, {"memoplan::cat_bn_relu_conv1x1"}) && in.get("tensors", 0) &&
      in.get("tensors", 0)->isTensorList() && in.tensor("weight", 0)) {
    const auto list = in.get("tensors", 0)->toTensorList();
    if (list.empty()) return 0;
    const at::Tensor x = list.get(0);
    return x.dim() == 4 ? 2.0 * x.size(0) * x.size(2) * x.size(3) * t("weight", 0).numel() : 0;
  }
  if (named(name, {"aten::linear", "memoplan::linear", "memoplan::budget_linear"})) {
    if (!in.tensor("input", 0) || !in.tensor("weight", 1)) return 0;
    return linear_flops(t("input", 0), t("weight", 1));
  }
  if (named(name, {"aten::matmul", "aten::mm", "aten::bmm", "memoplan::matmul", "memoplan::bmm",
                   "memoplan::matmul_add"})) {
    const char* other = named(name, {"memoplan::bmm"}) ? "mat2" : "other";
    if (!in.tensor("self", 0) || !in.tensor(other, 1)) return 0;
    return product_flops(t("self", 0), t(other, 1));
  }
  if (named(name, {"aten::addmm", "aten::baddbmm", "memoplan::addmm", "memoplan::baddbmm"})) {
    const bool batched = named(name, {"memoplan::baddbmm"});
    const char* first = batched ? "batch1" : "mat1";
    const char* second = batched ? "batch2" : "mat2";
    if (!in.tensor(first, 1) || !in.tensor(second, 2)) return 0;
    return product_flops(t(first, 1), t(second, 2));
  }
  if (named(name, {"aten::_transformer_encoder_layer_fwd", "memoplan::encoder_layer"})) {
    return encoder_flops(in);
  }
  if (named(name, {"aten::_native_multi_head_attention", "memoplan::attention"})) {
    return attention_flops(in);
  }
  return 0;
}

// The aten ops a tuned rewrite takes when their operands suit it (tuned/: tuned_ops.cc,
// tuned_matmul.cc, tuned_encoder.cc, layout_pass.cc, blocked/blocked_pass.cc).
bool rewritten_kind(const char* name) {
  return named(name, {"aten::conv2d", "aten::linear", "aten::matmul", "aten::bmm", "aten::addmm",
                      "aten::baddbmm", "aten::_transformer_encoder_layer_fwd",
                      "aten::_native_multi_head_attention"});
}

struct Frame {
  const void* key;  // the RecordFunction, to find at its end
  double own = 0;   // op_flops, read when it begins: its inputs are a view of the caller's stack
  double nested_aten = 0;      // known aten ops' FLOPs inside it
  double nested_memoplan = 0;  // FLOPs inside it booked to memoplan (mkldnn on a packed weight)
};

struct Observer {
  std::thread::id owner;
  std::vector<Frame> frames;
  Coverage coverage;
  std::map<std::pair<std::string, std::string>, Coverage::Left> left;

  void book_left(const std::string& op, const char* reason, double flops) {
    Coverage::Left& l = left[{op, reason}];
    l.op = op;
    l.reason = reason;
    ++l.calls;
    l.flops += flops;
  }

  void end(const at::RecordFunction& fn) {
    size_t i = frames.size();
    while (i > 0 && frames[i - 1].key != &fn) --i;
    if (i == 0) return;  // began before the observer
    const Frame frame = frames[i - 1];
    frames.resize(i - 1);
    const char* name = fn.name();
    const double own = frame.own;
    const bool memoplan_op = std::strncmp(name, "memoplan::", 10) == 0;
    if (!frames.empty()) {  // inside another op: its parent books it
      Frame& parent = frames.back();
      if (own > 0 && std::strcmp(name, "aten::mkldnn_convolution") == 0) {
        parent.nested_memoplan += own;
      } else if (own > 0 && !memoplan_op) {
        parent.nested_aten += own;
      } else {
        parent.nested_aten += frame.nested_aten;
        parent.nested_memoplan += frame.nested_memoplan;
      }
      return;
    }
    if (memoplan_op) {
      const double total = own > 0 ? own : frame.nested_aten + frame.nested_memoplan;
      const double on_aten = std::min(frame.nested_aten, total);
      coverage.flops += total;
      coverage.tuned_flops += total - on_aten;
      if (on_aten > 0) book_left(name, "chose aten at run time", on_aten);
      return;
    }
    const double total = own > 0 ? own : frame.nested_aten + frame.nested_memoplan;
    if (total <= 0) return;
    coverage.flops += total;
    book_left(name, own > 0 && rewritten_kind(name) ? "not rewritten" : "unknown form", total);
  }
};

thread_local Observer* t_observer = nullptr;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  Observer* o = t_observer;
  if (o != nullptr && std::this_thread::get_id() == o->owner) {
    o->frames.push_back(Frame{&fn, op_flops(fn.name(), fn.inputs())});
  }
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  Observer* o = t_observer;
  if (o != nullptr && std::this_thread::get_id() == o->owner) o->end(fn);
}

}  // namespace

namespace {

// Convolutions run as JIT-only operators, which call no RecordFunction: counted from the graph.
void count_unobserved(const torch::jit::Block* block, std::map<std::string, uint64_t>& nodes) {
  for (const torch::jit::Node* node : block->nodes()) {
    for (const torch::jit::Block* inner : node->blocks()) count_unobserved(inner, nodes);
    const char* kind = node->kind().toQualString();
    if (named(kind, {"prim::mkldnn_convolution", "prim::MKLDNNConv2d"})) ++nodes[kind];
  }
}

}  // namespace

Coverage measure_coverage(const std::function<void()>& pass, const torch::jit::Graph& graph) {
  Observer observer;
  observer.owner = std::this_thread::get_id();
  t_observer = &observer;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_enter, &on_exit)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  try {
    pass();
  } catch (...) {
    at::removeCallback(handle);
    t_observer = nullptr;
    throw;
  }
  at::removeCallback(handle);
  t_observer = nullptr;
  Coverage& c = observer.coverage;
  c.measured = true;
  for (auto& [key, l] : observer.left) c.left.push_back(std::move(l));
  std::map<std::string, uint64_t> unobserved;
  count_unobserved(graph.block(), unobserved);
  for (const auto& [kind, count] : unobserved) {
    c.unobserved_nodes += count;
    c.left.push_back({kind, "unknown form", count, 0.0});
  }
  std::sort(c.left.begin(), c.left.end(),
            [](const Coverage::Left& a, const Coverage::Left& b) { return a.flops > b.flops; });
  return c;
}

}  // namespace memoplan::torch_ext
