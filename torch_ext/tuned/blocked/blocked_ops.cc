// The ops of a blocked-layout region (blocked_pass.cc puts them in the graph): memoplan::bconv
// (a convolution with the batch norm folded in and its epilogue fused: activations, a residual
// addition), memoplan::beltwise, memoplan::bpool, memoplan::badaptive_avg_pool,
// memoplan::bbinary, and the conversions memoplan::to_blocked / memoplan::to_plain at the region's
// edges. A blocked activation is an ordinary float tensor to everything outside: sizes N x C x H x
// W (size and dim reads see the truth), its storage N x ceil(C/B)*B x H x W floats from the
// allocator (so the memory plan covers it) in oneDNN's nChw{B}c order, then a 64-byte tag that
// names it (is_blocked: the strides alone cannot). Only these ops read its values; the pass puts a
// to_plain in front of every other use.
//
// What is not oneDNN's runs as aten would, through plain tensors, and is converted back: a batch
// norm in training mode, autograd, a dtype other than float, a pooling or broadcast oneDNN has no
// primitive for. The result is the same either way.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "blocked.h"
#include "onednn.h"
#include "planning/planning.h"
#include "tuned/conv_weights.h"
#include "tuned/tuned_support.h"
#include "winograd_conv.h"

namespace memoplan::torch_ext::blocked {
namespace {

using onednn::PostOp;
using onednn::Shape;

Shape shape_of(const at::Tensor& x) { return {x.size(0), x.size(1), x.size(2), x.size(3)}; }

// After the values of every blocked activation, a tag that names it: its strides cannot (with C a
// multiple of the block they are NCHW's), and a region op must refuse a plain tensor rather than
// read it in the wrong order. 64 bytes, inside the allocation the memory plan covers.
struct Tag {
  uint64_t magic;
  int64_t n, c, h, w, block;
};
constexpr uint64_t kTagMagic = 0x6b636f6c626d656dULL;  // "memblock"
constexpr int64_t kTagFloats = 16;
static_assert(sizeof(Tag) <= kTagFloats * sizeof(float));
static_assert(sizeof(Tag) == 6 * sizeof(int64_t), "no padding: tags are compared bytewise");

int64_t blocked_floats(const Shape& s) { return s.n * onednn::padded_channels(s.c) * s.h * s.w; }

Tag tag_of(const Shape& s) { return {kTagMagic, s.n, s.c, s.h, s.w, onednn::block_size()}; }

at::Tensor new_blocked(const Shape& s, const at::TensorOptions& options) {
  const int64_t cp = onednn::padded_channels(s.c);
  at::Tensor storage = at::empty({blocked_floats(s) + kTagFloats}, options.dtype(at::kFloat));
  const Tag tag = tag_of(s);
  std::memcpy(storage.data_ptr<float>() + blocked_floats(s), &tag, sizeof tag);
  return storage.as_strided({s.n, s.c, s.h, s.w}, {cp * s.h * s.w, s.h * s.w, s.w, 1});
}

at::Tensor scratchpad(size_t bytes, const at::TensorOptions& options) {
  return bytes == 0 ? at::Tensor()
                    : at::empty({static_cast<int64_t>(bytes)}, options.dtype(at::kByte));
}
void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// A tensor a region op may read as blocked: what new_blocked made (the pass guarantees it; the
// tag checks it).
void check_blocked(const at::Tensor& x, const char* op) {
  // oneDNN splits over OpenMP's threads: this thread's count set as aten's (a new inference
  // thread would otherwise start at one per core).
  at::internal::lazy_init_num_threads();
  TORCH_CHECK(is_blocked(x), "memoplan::", op,
              ": expected a blocked-layout float activation from the region before it, got ",
              x.toString(), " of sizes ", x.sizes(), " and strides ", x.strides(),
              " not made by a blocked op (MEMOPLAN_BLOCKED_LAYOUT=0 turns the blocked layout off)");
}

onednn::Plain plain_order(const at::Tensor& x) {
  return !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast)
             ? onednn::Plain::kNhwc
             : onednn::Plain::kNchw;
}

}  // namespace

bool is_blocked(const at::Tensor& x) {
  if (x.dim() != 4 || x.scalar_type() != at::kFloat || !x.device().is_cpu() ||
      x.storage_offset() != 0 || !x.storage().data()) {
    return false;
  }
  const Shape s = shape_of(x);
  const int64_t cp = onednn::padded_channels(s.c);
  if (x.strides() != at::IntArrayRef({cp * s.h * s.w, s.h * s.w, s.w, 1}) ||
      x.storage().nbytes() != static_cast<size_t>(blocked_floats(s) + kTagFloats) * sizeof(float)) {
    return false;
  }
  const Tag expected = tag_of(s);
  return std::memcmp(static_cast<const float*>(x.storage().data()) + blocked_floats(s), &expected,
                     sizeof expected) == 0;
}

at::Tensor to_plain(const at::Tensor& x) {
  check_blocked(x, "to_plain");
  const Shape s = shape_of(x);
  at::Tensor out = at::empty({s.n, s.c, s.h, s.w}, x.options());
  if (x.numel() == 0) return out;
  const auto p = onednn::to_plain(s, onednn::Plain::kNchw);
  p->run(x.data_ptr<float>(), nullptr, out.data_ptr<float>(), nullptr);
  return out;
}

at::Tensor to_blocked(const at::Tensor& x_in) {
  at::internal::lazy_init_num_threads();
  TORCH_CHECK(x_in.dim() == 4 && x_in.device().is_cpu() && x_in.is_floating_point(),
              "memoplan::to_blocked: a blocked-layout region expected a 4-d float activation, "
              "got ",
              x_in.toString(), " of sizes ", x_in.sizes(),
              " (MEMOPLAN_BLOCKED_LAYOUT=0 turns the blocked layout off)");
  at::Tensor x = x_in.scalar_type() == at::kFloat ? x_in : x_in.to(at::kFloat);
  if (plain_order(x) == onednn::Plain::kNchw) x = x.contiguous();
  const Shape s = shape_of(x);
  at::Tensor out = new_blocked(s, x.options());
  if (x.numel() == 0) return out;
  onednn::to_blocked(s, plain_order(x))
      ->run(x.data_ptr<float>(), nullptr, out.data_ptr<float>(), nullptr);
  return out;
}

at::Tensor to_blocked_into(const at::Tensor& blocked, const at::Tensor& plain_in) {
  check_blocked(blocked, "to_blocked_");
  TORCH_CHECK(plain_in.sizes() == blocked.sizes(), "memoplan::to_blocked_: sizes ",
              plain_in.sizes(), " written into a blocked tensor of sizes ", blocked.sizes());
  at::Tensor plain = plain_in.to(at::kFloat);
  if (plain_order(plain) == onednn::Plain::kNchw) plain = plain.contiguous();
  if (plain.numel() == 0) return blocked;
  onednn::to_blocked(shape_of(plain), plain_order(plain))
      ->run(plain.data_ptr<float>(), nullptr, blocked.data_ptr<float>(), nullptr);
  return blocked;
}

at::Tensor apply_eltwise(const at::Tensor& y, const PostOp& op) {
  switch (static_cast<onednn::Eltwise>(op.kind)) {
    case onednn::Eltwise::kRelu:
      return op.alpha == 0.f ? at::relu(y) : at::leaky_relu(y, op.alpha);
    case onednn::Eltwise::kClip:
      return at::hardtanh(y, op.alpha, op.beta);
    case onednn::Eltwise::kHardswish:
      return at::hardswish(y);
    case onednn::Eltwise::kHardsigmoid:
      return at::hardsigmoid(y);
    case onednn::Eltwise::kSigmoid:
      return at::sigmoid(y);
    case onednn::Eltwise::kSilu:
      return at::silu(y);
    case onednn::Eltwise::kGelu:
      return at::gelu(y);
    case onednn::Eltwise::kTanh:
      return at::tanh(y);
  }
  TORCH_CHECK(false, "memoplan: unknown elementwise kind ", op.kind);
}

namespace {

// The primitive's shape: a plain input is read as NCHW (oneDNN's JIT kernels for a plain input of
// few channels take NCHW, not NHWC).
onednn::ConvSpec spec_of(const at::Tensor& x, const ConvArgs& a) {
  onednn::ConvSpec spec;
  spec.n = x.size(0);
  spec.c = x.size(1);
  spec.h = x.size(2);
  spec.w = x.size(3);
  spec.out_channels = a.weight.size(0);
  spec.kh = a.weight.size(2);
  spec.kw = a.weight.size(3);
  spec.groups = a.groups;
  for (int i = 0; i < 2; ++i) {
    spec.stride[i] = a.stride.at(a.stride.size() == 1 ? 0 : i);
    spec.padding[i] = a.padding.at(a.padding.size() == 1 ? 0 : i);
    spec.dilation[i] = a.dilation.at(a.dilation.size() == 1 ? 0 : i);
  }
  spec.input_blocked = a.input_blocked;
  spec.input_plain = onednn::Plain::kNchw;
  spec.post = a.post;
  return spec;
}

// The packed weights of one convolution site: per preparation (generation), one packing per
// weight layout the site's primitives read (usually one for all input shapes).
struct PackedSite {
  int64_t generation = -1;
  std::vector<std::pair<std::shared_ptr<const onednn::Conv>, at::Tensor>> packings;
  at::Tensor zero_bias;
};
std::mutex sites_mutex;
std::map<int64_t, PackedSite>& sites() {
  static auto* table = new std::map<int64_t, PackedSite>();  // never destroyed: used at exit
  return *table;
}

struct Packed {
  at::Tensor weights, bias;
};
Packed packed_for(int64_t site, const conv::Weights& w,
                  const std::shared_ptr<const onednn::Conv>& primitive) {
  std::lock_guard<std::mutex> lock(sites_mutex);
  PackedSite& s = sites()[site];
  if (s.generation != w.generation) s = PackedSite{w.generation, {}, {}};
  at::Tensor bias = w.bias ? *w.bias : at::Tensor();
  runtime_pass::OffPlan off_plan;  // they outlive the pass
  if (!bias.defined()) {
    if (!s.zero_bias.defined()) s.zero_bias = at::zeros({w.weight.size(0)}, at::kFloat);
    bias = s.zero_bias;
  }
  for (const auto& [made_for, packed] : s.packings) {
    if (made_for->same_packing(*primitive)) return {packed, bias};
  }
  at::Tensor packed = at::empty({static_cast<int64_t>(primitive->packed_weights_bytes())},
                                at::TensorOptions().dtype(at::kByte));
  primitive->pack_weights(w.weight.data_ptr<float>(), packed.data_ptr());
  s.packings.emplace_back(primitive, packed);
  return {packed, bias};
}

}  // namespace

at::Tensor conv(const at::Tensor& x_in, const ConvArgs& a) {
  const bool autograd =
      at::GradMode::is_enabled() &&
      (x_in.requires_grad() || a.weight.requires_grad() || (a.bias && a.bias->requires_grad()));
  bool fast = !a.batch_norm_training && !autograd && a.weight.scalar_type() == at::kFloat &&
              (!a.bias || a.bias->scalar_type() == at::kFloat) && a.weight.dim() == 4 &&
              (a.input_blocked ||
               (x_in.dim() == 4 && x_in.scalar_type() == at::kFloat && x_in.device().is_cpu()));
  at::internal::lazy_init_num_threads();
  if (a.input_blocked) check_blocked(x_in, "bconv");
  std::shared_ptr<const onednn::Conv> primitive;
  if (fast) {
    primitive = best_conv(spec_of(x_in, a));
    // oneDNN's reference loop (a shape its JIT kernels do not take) is far slower than aten.
    fast = primitive->implementation().rfind("ref", 0) != 0;
  }
  if (!fast) {  // aten's convolution and batch norm on plain tensors, then the epilogue
    tuned::count(false);
    const at::Tensor x = a.input_blocked ? to_plain(x_in) : x_in;
    at::Tensor y = at::conv2d(x, a.weight, a.bias, a.stride, a.padding, a.dilation, a.groups);
    if (a.batch_norm) {
      const conv::BatchNorm& bn = *a.batch_norm;
      y = at::batch_norm(y, bn.weight, bn.bias, bn.mean, bn.var, a.batch_norm_training,
                         a.batch_norm_momentum, bn.eps, false);
    }
    for (const PostOp& op : a.post) {
      y = op.kind == onednn::kResidualAdd ? y + to_plain(*a.residual) : apply_eltwise(y, op);
    }
    return to_blocked(y);
  }
  const conv::Geometry geometry{a.stride, a.padding, a.dilation, a.groups};
  const auto prepared = conv::weights(a.site, a.weight, a.bias,
                                      a.batch_norm ? &*a.batch_norm : nullptr, geometry, false);
  const at::Tensor x = a.input_blocked ? x_in : x_in.contiguous();
  const Packed packed = packed_for(a.site, *prepared, primitive);
  const Shape out_shape = primitive->output();
  at::Tensor out = new_blocked(out_shape, x.options());
  if (a.residual) {
    check_blocked(*a.residual, "bconv (residual)");
    TORCH_CHECK(shape_of(*a.residual).c == out_shape.c && shape_of(*a.residual).h == out_shape.h &&
                    shape_of(*a.residual).w == out_shape.w &&
                    shape_of(*a.residual).n == out_shape.n,
                "memoplan::bconv: residual of sizes ", a.residual->sizes(),
                " does not match the convolution's output");
  }
  at::Tensor scratch = scratchpad(primitive->scratchpad_bytes(), x.options());
  primitive->run(x.data_ptr<float>(), packed.weights.data_ptr(), packed.bias.data_ptr<float>(),
                 a.residual ? a.residual->data_ptr<float>() : nullptr, out.data_ptr<float>(),
                 data_or_null(scratch));
  tuned::count(true);
  return out;
}

at::Tensor eltwise(const at::Tensor& x, const std::vector<PostOp>& chain) {
  check_blocked(x, "beltwise");
  const auto p = onednn::eltwise(shape_of(x), chain);
  at::Tensor out = new_blocked(shape_of(x), x.options());
  at::Tensor scratch = scratchpad(p->scratchpad_bytes(), x.options());
  p->run(x.data_ptr<float>(), nullptr, out.data_ptr<float>(), data_or_null(scratch));
  return out;
}

namespace {

at::Tensor run_simple(const std::shared_ptr<const onednn::Primitive>& p, const at::Tensor& a,
                      const at::Tensor* b) {
  at::Tensor out = new_blocked(p->output(), a.options());
  at::Tensor scratch = scratchpad(p->scratchpad_bytes(), a.options());
  p->run(a.data_ptr<float>(), b ? b->data_ptr<float>() : nullptr, out.data_ptr<float>(),
         data_or_null(scratch));
  return out;
}

int64_t pick(const std::vector<int64_t>& v, int i, int64_t otherwise) {
  if (v.empty()) return otherwise;
  return v.at(v.size() == 1 ? 0 : static_cast<size_t>(i));
}

}  // namespace

at::Tensor pool(const at::Tensor& x, const PoolArgs& a) {
  check_blocked(x, "bpool");
  const Shape s = shape_of(x);
  onednn::PoolSpec spec;
  spec.n = s.n;
  spec.c = s.c;
  spec.h = s.h;
  spec.w = s.w;
  bool supported = !a.avg || !a.ceil_mode;
  for (int i = 0; i < 2; ++i) {
    const int64_t in = i == 0 ? s.h : s.w;
    const int64_t k = pick(a.kernel, i, 1), st = pick(a.stride, i, k), p = pick(a.padding, i, 0);
    supported = supported && pick(a.dilation, i, 1) == 1 && k > 0 && st > 0;
    if (!supported) break;
    int64_t out = a.ceil_mode ? (in + 2 * p - k + st - 1) / st + 1 : (in + 2 * p - k) / st + 1;
    if (a.ceil_mode && (out - 1) * st >= in + p) --out;  // the last window starts inside
    spec.kernel[i] = k;
    spec.stride[i] = st;
    spec.padding_l[i] = p;
    spec.padding_r[i] = std::max(p, (out - 1) * st + k - in - p);
    supported = out > 0 && (in + spec.padding_l[i] + spec.padding_r[i] - k) / st + 1 == out;
  }
  spec.kind = !a.avg                ? onednn::PoolKind::kMax
              : a.count_include_pad ? onednn::PoolKind::kAvgIncludePadding
                                    : onednn::PoolKind::kAvgExcludePadding;
  if (!supported) {
    tuned::count(false);
    const at::Tensor plain = to_plain(x);
    return to_blocked(
        a.avg
            ? at::avg_pool2d(plain, a.kernel, a.stride, a.padding, a.ceil_mode, a.count_include_pad)
            : at::max_pool2d(plain, a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode));
  }
  return run_simple(onednn::pool(spec), x, nullptr);
}

at::Tensor adaptive_avg_pool(const at::Tensor& x, const std::vector<int64_t>& output_size) {
  check_blocked(x, "badaptive_avg_pool");
  const Shape s = shape_of(x);
  const int64_t oh = pick(output_size, 0, 1), ow = pick(output_size, 1, oh);
  if (oh <= 0 || ow <= 0 || s.h % oh != 0 || s.w % ow != 0) {
    return to_blocked(at::adaptive_avg_pool2d(to_plain(x), output_size));
  }
  onednn::PoolSpec spec;
  spec.n = s.n;
  spec.c = s.c;
  spec.h = s.h;
  spec.w = s.w;
  spec.kind = onednn::PoolKind::kAvgExcludePadding;
  spec.kernel[0] = spec.stride[0] = s.h / oh;
  spec.kernel[1] = spec.stride[1] = s.w / ow;
  return run_simple(onednn::pool(spec), x, nullptr);
}

at::Tensor binary(const at::Tensor& a_in, const at::Tensor& b_in, onednn::BinaryKind kind,
                  const std::vector<PostOp>& post) {
  check_blocked(a_in, "bbinary");
  check_blocked(b_in, "bbinary");
  // Both kinds commute: the full-size operand goes first.
  const bool swap = a_in.numel() < b_in.numel();
  const at::Tensor& a = swap ? b_in : a_in;
  const at::Tensor& b = swap ? a_in : b_in;
  const Shape sa = shape_of(a), sb = shape_of(b);
  const bool same = sa.n == sb.n && sa.c == sb.c && sa.h == sb.h && sa.w == sb.w;
  const bool per_channel = sa.n == sb.n && sa.c == sb.c && sb.h == 1 && sb.w == 1;
  if (!same && !per_channel) {  // another broadcast: as aten would
    tuned::count(false);
    at::Tensor y =
        kind == onednn::BinaryKind::kAdd ? to_plain(a) + to_plain(b) : to_plain(a) * to_plain(b);
    for (const PostOp& op : post) y = apply_eltwise(y, op);
    return to_blocked(y);
  }
  return run_simple(onednn::binary(kind, sa, sb, post), a, &b);
}

namespace {

std::vector<PostOp> post_ops(const c10::IValue& kinds, const c10::IValue& alpha,
                             const c10::IValue& beta) {
  const std::vector<int64_t> k = kinds.toIntVector();
  const std::vector<double> al = alpha.toDoubleVector(), be = beta.toDoubleVector();
  std::vector<PostOp> ops;
  for (size_t i = 0; i < k.size(); ++i) {
    ops.push_back(
        {static_cast<int>(k[i]), static_cast<float>(al.at(i)), static_cast<float>(be.at(i))});
  }
  return ops;
}

torch::jit::RegisterOperators blocked_operators({
    torch::jit::Operator(
        "memoplan::bconv(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, "
        "int[] dilation, int groups, int site, Tensor? bn_weight, Tensor? bn_bias, "
        "Tensor? bn_mean, Tensor? bn_var, bool bn_training, float bn_momentum, float bn_eps, "
        "bool has_bn, bool input_blocked, int[] post_kinds, float[] post_alpha, "
        "float[] post_beta, Tensor? residual) -> Tensor",
        [](torch::jit::Stack& stack) {
          constexpr size_t kArgs = 21;
          const c10::IValue* args = &stack[stack.size() - kArgs];
          ConvArgs a;
          static_cast<conv::Call&>(a) = conv::read_call(args, 8);
          a.site = args[7].toInt();
          a.input_blocked = args[16].toBool();
          a.post = post_ops(args[17], args[18], args[19]);
          if (!args[20].isNone()) a.residual = args[20].toTensor();
          const at::Tensor x = args[0].toTensor();
          torch::jit::drop(stack, kArgs);
          stack.emplace_back(conv(x, a));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    torch::jit::Operator(
        "memoplan::beltwise(Tensor input, int[] kinds, float[] alpha, float[] beta) -> Tensor",
        [](torch::jit::Stack& stack) {
          const std::vector<PostOp> chain =
              post_ops(stack[stack.size() - 3], stack[stack.size() - 2], stack.back());
          const at::Tensor x = stack[stack.size() - 4].toTensor();
          torch::jit::drop(stack, 4);
          stack.emplace_back(eltwise(x, chain));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    torch::jit::Operator(
        "memoplan::bpool(Tensor input, bool avg, int[] kernel, int[] stride, int[] padding, "
        "int[] dilation, bool ceil_mode, bool count_include_pad) -> Tensor",
        [](torch::jit::Stack& stack) {
          const c10::IValue* args = &stack[stack.size() - 8];
          PoolArgs a{args[1].toBool(),      args[2].toIntVector(), args[3].toIntVector(),
                     args[4].toIntVector(), args[5].toIntVector(), args[6].toBool(),
                     args[7].toBool()};
          const at::Tensor x = args[0].toTensor();
          torch::jit::drop(stack, 8);
          stack.emplace_back(pool(x, a));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    torch::jit::Operator(
        "memoplan::badaptive_avg_pool(Tensor input, int[] output_size) -> Tensor",
        [](torch::jit::Stack& stack) {
          const std::vector<int64_t> size = stack.back().toIntVector();
          const at::Tensor x = stack[stack.size() - 2].toTensor();
          torch::jit::drop(stack, 2);
          stack.emplace_back(adaptive_avg_pool(x, size));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    torch::jit::Operator(
        "memoplan::bbinary(Tensor a, Tensor b, int kind, int[] post_kinds, float[] post_alpha, "
        "float[] post_beta) -> Tensor",
        [](torch::jit::Stack& stack) {
          const c10::IValue* args = &stack[stack.size() - 6];
          const auto kind = static_cast<onednn::BinaryKind>(args[2].toInt());
          const std::vector<PostOp> post = post_ops(args[3], args[4], args[5]);
          const at::Tensor a = args[0].toTensor(), b = args[1].toTensor();
          torch::jit::drop(stack, 6);
          stack.emplace_back(binary(a, b, kind, post));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    torch::jit::Operator(
        "memoplan::to_blocked(Tensor input) -> Tensor",
        [](torch::jit::Stack& stack) {
          const at::Tensor x = stack.back().toTensor();
          torch::jit::drop(stack, 1);
          stack.emplace_back(to_blocked(x));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    // After an op outside the region wrote into the plain copy of a blocked tensor.
    torch::jit::Operator(
        "memoplan::to_blocked_(Tensor(a!) self, Tensor plain) -> Tensor(a!)",
        [](torch::jit::Stack& stack) {
          const at::Tensor plain = stack.back().toTensor();
          at::Tensor blocked = stack[stack.size() - 2].toTensor();
          torch::jit::drop(stack, 2);
          stack.emplace_back(to_blocked_into(blocked, plain));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    torch::jit::Operator(
        "memoplan::to_plain(Tensor input) -> Tensor",
        [](torch::jit::Stack& stack) {
          const at::Tensor x = stack.back().toTensor();
          torch::jit::drop(stack, 1);
          stack.emplace_back(to_plain(x));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
});

}  // namespace

}  // namespace memoplan::torch_ext::blocked
