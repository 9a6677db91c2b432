// memoplan::bn_relu_conv1x1 and memoplan::cat_bn_relu_conv1x1 (bn_relu_conv1x1.h): batch norm,
// ReLU and a 1x1 convolution with the normalized activation made one band of output pixels at a
// time, each band a GEMM of the library aten's convolution calls, blocked as aten's whole call is
// (blas_bands.h); the graph rewrite that puts them in is bn_relu_conv1x1_pass.cc.
#include "bn_relu_conv1x1.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/batch_norm.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <array>
#include <cmath>
#include <optional>
#include <vector>

#include "blas_bands.h"
#include "bn_relu_conv1x1_operators.h"
#include "memoplan/kernels/affine_relu.h"
#include "memory_min/concat_in_place.h"
#include "planning/planning.h"
#include "sliced_conv.h"

namespace memoplan::torch_ext {
namespace {

using blas_bands::Blocking;
using blas_bands::Call;

// The batch norm's input -- one tensor, or a concatenation's inputs (concatenated along `dim`)
// -- and its arguments.
struct BnArgs {
  std::vector<at::Tensor> parts;
  c10::optional<c10::List<at::Tensor>> list;  // the concatenation's, when there is one
  int64_t dim = 1;
  c10::optional<at::Tensor> weight, bias, running_mean, running_var;
  bool training = false;
  double momentum = 0.1, eps = 1e-5;
  bool cudnn_enabled = false;
};

bool float_vector(const c10::optional<at::Tensor>& t, int64_t size) {
  return !t || !t->defined() ||
         (t->device().is_cpu() && t->scalar_type() == at::kFloat && t->dim() == 1 &&
          t->size(0) == size && t->is_contiguous() && no_autograd(*t));
}

// A dense float NCHW tensor with elements.
bool plain_nchw(const at::Tensor& x) {
  return x.defined() && x.device().is_cpu() && x.layout() == c10::kStrided &&
         x.scalar_type() == at::kFloat && x.dim() == 4 && x.is_contiguous() &&
         x.suggest_memory_format() == c10::MemoryFormat::Contiguous && no_autograd(x) &&
         x.numel() > 0;
}

// Inference with running statistics, every parameter a float vector of `channels`.
bool normalization(const BnArgs& bn, int64_t channels) {
  return !bn.training && bn.running_mean && bn.running_var && bn.running_mean->defined() &&
         bn.running_var->defined() && float_vector(bn.weight, channels) &&
         float_vector(bn.bias, channels) && float_vector(bn.running_mean, channels) &&
         float_vector(bn.running_var, channels);
}

// The input's shape (images, channels, height, width) when every part is a dense float NCHW tensor
// of the same images, height and width, concatenated along channels.
std::optional<std::array<int64_t, 4>> input_shape(const BnArgs& bn) {
  if (bn.parts.empty() || (bn.list && bn.dim != 1)) return std::nullopt;
  const at::Tensor& first = bn.parts[0];
  std::array<int64_t, 4> shape{0, 0, 0, 0};
  for (const at::Tensor& part : bn.parts) {
    if (!plain_nchw(part) || part.size(0) != first.size(0) || part.size(2) != first.size(2) ||
        part.size(3) != first.size(3)) {
      return std::nullopt;
    }
    shape[1] += part.size(1);
  }
  shape[0] = first.size(0);
  shape[2] = first.size(2);
  shape[3] = first.size(3);
  return shape;
}

// Whether the bands may stand for aten's ops: inference batch norm with running statistics, a
// dense float NCHW input, a bias-free 1x1 convolution of stride 1 without padding, and what aten
// runs as OpenBLAS GEMMs (one intra-op thread, fewer than 16 images: aten's rule for oneDNN).
bool banded_shape(const BnArgs& bn, const std::array<int64_t, 4>& shape, const ConvArgs& conv) {
  const int64_t channels = shape[1];
  if (!normalization(bn, channels)) return false;
  const at::Tensor& w = conv.weight;
  if (!w.defined() || !w.device().is_cpu() || w.scalar_type() != at::kFloat || w.dim() != 4 ||
      !w.is_contiguous() || !no_autograd(w) || w.size(1) != channels || w.size(2) != 1 ||
      w.size(3) != 1 || w.size(0) == 0) {
    return false;
  }
  if (conv.bias && conv.bias->defined()) return false;
  const std::vector<int64_t> ones{1, 1}, zeros{0, 0};
  if (conv.stride != ones || conv.dilation != ones || conv.padding != zeros || conv.groups != 1) {
    return false;
  }
  return at::get_num_threads() == 1 && blas_bands::blas_threads() == 1 && shape[0] < 16;
}

// The per-channel affine map of aten's inference batch norm: alpha = weight / sqrt(var + eps);
// beta = bias - mean * alpha, rounded once or twice as aten's kernel does (`fused_beta`).
struct Affine {
  std::vector<float> alpha, beta;
};

Affine affine(const BnArgs& bn, int64_t channels, bool fused_beta) {
  Affine a;
  a.alpha.resize(static_cast<size_t>(channels));
  a.beta.resize(static_cast<size_t>(channels));
  const float* mean = bn.running_mean->data_ptr<float>();
  const float* var = bn.running_var->data_ptr<float>();
  const float* weight = bn.weight && bn.weight->defined() ? bn.weight->data_ptr<float>() : nullptr;
  const float* bias = bn.bias && bn.bias->defined() ? bn.bias->data_ptr<float>() : nullptr;
  const float eps = static_cast<float>(bn.eps);
  for (int64_t c = 0; c < channels; ++c) {
    const auto i = static_cast<size_t>(c);
    const float invstd = 1.0f / std::sqrt(var[c] + eps);
    const float alpha = invstd * (weight ? weight[c] : 1.0f);
    const float b = bias ? bias[c] : 0.0f;
    a.alpha[i] = alpha;
    if (fused_beta) {
      a.beta[i] = std::fma(-mean[c], alpha, b);
    } else {
      const volatile float product = mean[c] * alpha;  // two roundings, whatever the flags
      a.beta[i] = b - product;
    }
  }
  return a;
}

// How aten rounds its batch norm (beta, then x * alpha + beta): learned once per process from
// aten on random data. nullopt: none of the four ways gives aten's bytes.
struct Rounding {
  bool fused_beta = false, fused_map = false;
};

// Batch norm + ReLU of one image's channels: row c of `in` (pixels long) into row c of `out`
// (which may be `in`).
void normalize(const Affine& a, const Rounding& r, const float* const* in, float* out,
               int64_t channels, int64_t pixels) {
  const kernels::AffineReluRowFn row = kernels::affine_relu_row();
  for (int64_t c = 0; c < channels; ++c) {
    const auto i = static_cast<size_t>(c);
    row(in[c], out + c * pixels, pixels, a.alpha[i], a.beta[i], r.fused_map);
  }
}

// Row pointers of one image's channels, through the parts.
std::vector<const float*> channel_rows(const std::vector<at::Tensor>& parts, int64_t image,
                                       int64_t pixels) {
  std::vector<const float*> rows;
  for (const at::Tensor& part : parts) {
    const int64_t channels = part.size(1);
    const float* base = part.data_ptr<float>() + image * channels * pixels;
    for (int64_t c = 0; c < channels; ++c) rows.push_back(base + c * pixels);
  }
  return rows;
}

// aten's batch norm and ReLU of `x`, into a new tensor.
at::Tensor aten_normalized(const BnArgs& bn, const at::Tensor& x) {
  at::Tensor y = at::batch_norm(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.training,
                                bn.momentum, bn.eps, bn.cudnn_enabled);
  return y.relu_();
}

std::optional<Rounding> find_rounding() {
  at::Generator generator = probe_generator();
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  constexpr int64_t kChannels = 37, kPixels = 29;  // odd: vector bodies and tails
  BnArgs bn;
  const at::Tensor x = at::randn({1, kChannels, kPixels, 1}, generator, f32);
  bn.weight = at::randn({kChannels}, generator, f32);
  bn.bias = at::randn({kChannels}, generator, f32);
  bn.running_mean = at::randn({kChannels}, generator, f32);
  bn.running_var = at::rand({kChannels}, generator, f32).add_(0.5);
  const at::Tensor reference = aten_normalized(bn, x);
  at::Tensor ours = at::empty(reference.sizes(), f32);
  const std::vector<const float*> rows = channel_rows({x}, 0, kPixels);
  for (const bool fused_beta : {true, false}) {
    const Affine a = affine(bn, kChannels, fused_beta);
    for (const bool fused_map : {true, false}) {
      const Rounding r{fused_beta, fused_map};
      normalize(a, r, rows.data(), ours.data_ptr<float>(), kChannels, kPixels);
      if (same_bytes(ours, reference)) return r;
    }
  }
  return std::nullopt;
}

const std::optional<Rounding>& rounding() {
  static const std::optional<Rounding> found = [] {
    runtime_pass::Unrecorded beside_the_pass;
    return find_rounding();
  }();
  return found;
}

// aten's ops: the concatenation (in place where the plan laid its inputs there), batch norm and
// ReLU, the convolution through memoplan::conv2d_sliced. A concatenation that copied every input
// holds bytes no one else reads: normalized in place there (as aten's batch norm output would have
// taken them), where aten's rounding is known.
at::Tensor run_whole(const BnArgs& bn, const ConvArgs& conv) {
  bool own = false;
  at::Tensor x = bn.list ? concat_in_place(*bn.list, bn.dim, &own) : bn.parts[0];
  const bool in_place = own && plain_nchw(x) && normalization(bn, x.size(1)) && rounding();
  if (in_place) {
    const int64_t channels = x.size(1), pixels = x.size(2) * x.size(3);
    const Affine a = affine(bn, channels, rounding()->fused_beta);
    for (int64_t image = 0; image < x.size(0); ++image) {
      const std::vector<const float*> in = channel_rows({x}, image, pixels);
      normalize(a, *rounding(), in.data(), x.data_ptr<float>() + image * channels * pixels,
                channels, pixels);
    }
  }
  ConvArgs on_normalized = conv;
  on_normalized.input = in_place ? x : aten_normalized(bn, x);
  return conv2d_sliced(on_normalized);
}

// The bands: per image, aten's rows cut into calls; A's columns are the input's channels, read
// from the parts (a concatenation is never made).
at::Tensor run_banded(const BnArgs& bn, const std::vector<at::Tensor>& parts,
                      const std::array<int64_t, 4>& shape, const ConvArgs& conv,
                      const std::vector<Call>& calls, const Rounding& r) {
  const int64_t images = shape[0], channels = shape[1], m = shape[2] * shape[3];
  const int64_t n = conv.weight.size(0);
  const at::TensorOptions options = parts[0].options();
  // The band first: the op's first tensor must not be as large as a concatenation of its inputs
  // (sharing_pass.cc would lay the inputs in it), and a band is smaller.
  at::Tensor buffer = at::empty({blas_bands::buffer_rows(calls) * channels}, options);
  at::Tensor out = at::empty({images, n, shape[2], shape[3]}, options);
  const Affine a = affine(bn, channels, r.fused_beta);
  const kernels::AffineReluRowFn row = kernels::affine_relu_row();
  for (int64_t image = 0; image < images; ++image) {
    const std::vector<const float*> rows = channel_rows(parts, image, m);
    const auto fill = [&](int64_t column, int64_t first, int64_t count, float* dst) {
      const auto i = static_cast<size_t>(column);
      row(rows[i] + first, dst, count, a.alpha[i], a.beta[i], r.fused_map);
    };
    blas_bands::run_calls(calls, m, n, channels, conv.weight.data_ptr<float>(),
                          out.data_ptr<float>() + image * n * m, buffer.data_ptr<float>(), fill);
  }
  return out;
}

// The calls for this shape and thread count when they give aten's bytes (checked once, beside the
// pass, on random input and the real parameters); empty: run whole.
std::vector<Call> checked_calls(const BnArgs& bn, const std::array<int64_t, 4>& shape,
                                const ConvArgs& conv) {
  const std::optional<Blocking>& b = blas_bands::blocking();
  const std::optional<Rounding>& r = rounding();
  if (!b || !r) return {};
  const int64_t channels = shape[1], m = shape[2] * shape[3];
  const std::vector<Call> calls = blas_bands::plan_calls(m, *b, blas_bands::calls_target(m, *b));
  if (calls.size() < 2 || (m - blas_bands::buffer_rows(calls)) * channels * 4 < kWorthBytes)
    return {};

  const std::vector<int64_t> key{channels, shape[2], shape[3], conv.weight.size(0),
                                 at::get_num_threads()};
  static auto* checks = new ChoiceCache<std::vector<int64_t>, bool>();
  const bool same = checks->decide(key, [&] {
    at::Generator generator = probe_generator();
    const std::array<int64_t, 4> one{1, channels, shape[2], shape[3]};
    const at::Tensor probe =
        at::randn({1, channels, shape[2], shape[3]}, generator, bn.parts[0].options());
    const at::Tensor reference = conv_whole(conv, aten_normalized(bn, probe));
    const bool matched = same_bytes(run_banded(bn, {probe}, one, conv, calls, *r), reference);
    if (!matched) count_whole_after_check();
    return matched;
  });
  return same ? calls : std::vector<Call>{};
}

at::Tensor bn_relu_conv1x1(const BnArgs& bn, const ConvArgs& conv) {
  const std::optional<std::array<int64_t, 4>> shape = input_shape(bn);
  if (!shape || !banded_shape(bn, *shape, conv)) return run_whole(bn, conv);
  const std::vector<Call> calls = checked_calls(bn, *shape, conv);
  if (calls.empty()) return run_whole(bn, conv);
  count_convolution_in_parts();
  return run_banded(bn, bn.parts, *shape, conv, calls, *rounding());
}

// The arguments after the batch norm's input.
void take_rest(BnReluConvFields&& f, BnArgs& bn, ConvArgs& conv) {
  bn.weight = std::move(f.bn_weight);
  bn.bias = std::move(f.bn_bias);
  bn.running_mean = std::move(f.running_mean);
  bn.running_var = std::move(f.running_var);
  bn.training = f.training;
  bn.momentum = f.momentum;
  bn.eps = f.eps;
  bn.cudnn_enabled = f.cudnn_enabled;
  conv.weight = std::move(f.weight);
  conv.bias = std::move(f.bias);
  conv.stride = std::move(f.stride);
  conv.padding = std::move(f.padding);
  conv.dilation = std::move(f.dilation);
  conv.groups = f.groups;
}

at::Tensor bn_relu_conv1x1_op(BnReluConv1x1Op op) {
  BnArgs bn;
  ConvArgs conv;
  bn.parts = {std::move(op.input)};
  take_rest(std::move(op), bn, conv);
  return bn_relu_conv1x1(bn, conv);
}

at::Tensor cat_bn_relu_conv1x1_op(CatBnReluConv1x1Op op) {
  BnArgs bn;
  ConvArgs conv;
  bn.list = std::move(op.tensors);
  bn.parts = bn.list->vec();
  bn.dim = op.dim;
  take_rest(std::move(op), bn, conv);
  return bn_relu_conv1x1(bn, conv);
}

torch::jit::RegisterOperators operators({
    op::make_operator<BnReluConv1x1Op, &bn_relu_conv1x1_op>(),
    op::make_operator<CatBnReluConv1x1Op, &cat_bn_relu_conv1x1_op>(),
});

}  // namespace

}  // namespace memoplan::torch_ext
