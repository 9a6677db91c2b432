// memoplan::bn_relu_conv1x1 (bn_relu_conv1x1.h): batch norm, ReLU and a 1x1 convolution with the
// normalized activation made one band of output pixels at a time, each band a GEMM of the
// library aten's convolution calls, blocked as aten's whole call is.
#include "bn_relu_conv1x1.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/batch_norm.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "memoplan/kernels/affine_relu.h"
#include "planning/concat_in_place.h"
#include "planning/planning.h"
#include "sliced_conv.h"

// The BLAS aten's CPU GEMM calls (LibTorch links it; the dynamic linker binds this to the same
// library): C = A B, column-major.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace memoplan::torch_ext {
namespace {

// A band saves at least this many bytes of the normalized activation, or the op runs whole.
constexpr int64_t kWorthBytes = 256 << 10;
// A call covers at least a quarter of the rows (and two of the driver's blocks): each call after
// the first computes one block's worth of leading zeros besides its rows.
constexpr int64_t kCallsPerImage = 4;

// C (m x n, leading dimension ldc) = A (m x k, lda) * B (k x n, leading dimension k), as aten's
// slow_conv2d calls it for a 1x1 convolution without bias (rows: pixels, columns: channels).
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, float* c,
          int64_t ldc) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int ldai = static_cast<int>(lda), ldbi = ki, ldci = static_cast<int>(ldc);
  const float one = 1.0f, zero = 0.0f;
  const char no = 'N';
  sgemm_(&no, &no, &mi, &ni, &ki, &one, a, &ldai, b, &ldbi, &zero, c, &ldci);
}

// How OpenBLAS's level-3 driver cuts a call's rows (driver/level3/level3.c): blocks of p rows
// while at least 2p are left, then the rest in two halves rounded up to `unroll`, or whole.
struct Blocking {
  int64_t p = 0, unroll = 0;
};

std::vector<int64_t> row_blocks(int64_t m, const Blocking& b) {
  std::vector<int64_t> out;
  while (m > 0) {
    int64_t rows = m;
    if (m >= 2 * b.p) {
      rows = b.p;
    } else if (m > b.p) {
      rows = (m / 2 + b.unroll - 1) / b.unroll * b.unroll;
    }
    if (rows <= 0 || rows > m) return {};
    out.push_back(rows);
    m -= rows;
  }
  return out;
}

// One GEMM of a band: rows [start, start + rows) of the whole, behind `lead` rows of zeros whose
// results land on rows [start - lead, start) (computed by a later call: calls run last first).
struct Call {
  int64_t start = 0, rows = 0, lead = 0;
};

// The calls for m rows, each about `target` rows or more, whose blocks are the whole call's: the
// first from row 0 (its first block takes the whole's first block's path), each later one behind
// zeros the driver makes its first block (p rows, or as many as the band's first block). Empty
// when no such cut exists.
std::vector<Call> plan_calls(int64_t m, const Blocking& b, int64_t target) {
  const std::vector<int64_t> whole = row_blocks(m, b);
  std::vector<Call> calls;
  int64_t start = 0;
  for (size_t i = 0; i < whole.size();) {
    bool placed = false;
    int64_t rows = 0;
    for (size_t j = i; j < whole.size() && !placed; ++j) {
      rows += whole[j];
      if (rows < target && j + 1 < whole.size()) continue;
      std::vector<int64_t> want(whole.begin() + static_cast<std::ptrdiff_t>(i),
                                whole.begin() + static_cast<std::ptrdiff_t>(j) + 1);
      if (i == 0) {
        placed = row_blocks(rows, b) == want;
        if (placed) calls.push_back({start, rows, 0});
      } else {
        for (const int64_t lead : {b.p, whole[i]}) {
          if (lead > start) continue;
          std::vector<int64_t> with_lead = want;
          with_lead.insert(with_lead.begin(), lead);
          if (row_blocks(lead + rows, b) == with_lead) {
            calls.push_back({start, rows, lead});
            placed = true;
            break;
          }
        }
      }
      if (placed) {
        i = j + 1;
        start += rows;
      }
    }
    if (!placed) return {};
  }
  return calls;
}

int64_t buffer_rows(const std::vector<Call>& calls) {
  int64_t most = 0;
  for (const Call& c : calls) most = std::max(most, c.lead + c.rows);
  return most;
}

// c (m rows, n columns, ldc = m) = A * w, A's k columns filled band by band by
// fill(column, first row, rows, destination) into `buffer` (buffer_rows(calls) x k floats).
template <typename Fill>
void run_calls(const std::vector<Call>& calls, int64_t m, int64_t n, int64_t k, const float* w,
               float* c, float* buffer, const Fill& fill) {
  for (auto call = calls.rbegin(); call != calls.rend(); ++call) {
    const int64_t ld = call->lead + call->rows;
    for (int64_t column = 0; column < k; ++column) {
      float* dst = buffer + column * ld;
      std::fill(dst, dst + call->lead, 0.0f);
      fill(column, call->start, call->rows, dst + call->lead);
    }
    gemm(ld, n, k, buffer, ld, w, c + (call->start - call->lead), m);
  }
}

int64_t calls_target(int64_t m, const Blocking& b) {
  return std::max<int64_t>(2 * b.p, (m + kCallsPerImage - 1) / kCallsPerImage);
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous() &&
         a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

at::Generator probe_generator() {
  return at::make_generator<at::CPUGeneratorImpl>(0x6d656d6f706c616eULL);
}

// Whether bands cut by plan_calls give the whole call's bytes for m rows of random data.
bool bands_match(int64_t m, const Blocking& b, int64_t target) {
  constexpr int64_t kN = 64, kK = 64;
  const std::vector<Call> calls = plan_calls(m, b, target);
  if (calls.size() < 2) return false;
  at::Generator generator = probe_generator();
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor a = at::randn({kK, m}, generator, f32);   // column-major m x k
  const at::Tensor w = at::randn({kN, kK}, generator, f32);  // column-major k x n
  at::Tensor whole = at::empty({kN, m}, f32);
  gemm(m, kN, kK, a.data_ptr<float>(), m, w.data_ptr<float>(), whole.data_ptr<float>(), m);
  at::Tensor banded = at::full({kN, m}, std::nanf(""), f32);
  std::vector<float> buffer(static_cast<size_t>(buffer_rows(calls) * kK));
  const float* columns = a.data_ptr<float>();
  run_calls(calls, m, kN, kK, w.data_ptr<float>(), banded.data_ptr<float>(), buffer.data(),
            [&](int64_t column, int64_t first, int64_t rows, float* dst) {
              std::memcpy(dst, columns + column * m + first,
                          static_cast<size_t>(rows) * sizeof(float));
            });
  return same_bytes(banded, whole);
}

// The driver's blocking, from the library itself. p first: 4p rows are 4 blocks of p whatever
// the rounding, cut as [p, p] and [p | p, p]; the likeliest candidates are tried first: a product
// of identical rows changes where a block's edge rows take other code paths, so block starts lie
// at or between such rows; then every multiple of 8 up to 2048. Then the rounding, on rows whose
// tail the driver halves.
std::optional<Blocking> find_blocking() {
  constexpr int64_t kM = 4096, kN = 64, kK = 64, kMostP = 2048;
  constexpr size_t kMostTries = 320;
  at::Generator generator = probe_generator();
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor same_rows = at::randn({kK, 1}, generator, f32).expand({kK, kM}).contiguous();
  const at::Tensor w = at::randn({kN, kK}, generator, f32);
  at::Tensor product = at::empty({kN, kM}, f32);
  gemm(kM, kN, kK, same_rows.data_ptr<float>(), kM, w.data_ptr<float>(), product.data_ptr<float>(),
       kM);
  const float* out = product.data_ptr<float>();
  std::vector<int64_t> changes;
  for (int64_t row = 1; row < kM; ++row) {
    for (int64_t col = 0; col < kN; ++col) {
      if (std::memcmp(out + col * kM + row, out + col * kM + row - 1, sizeof(float)) != 0) {
        changes.push_back(row);
        break;
      }
    }
  }
  std::vector<int64_t> candidates;
  for (size_t i = 0; i + 1 < changes.size(); ++i) {
    candidates.push_back((changes[i] + changes[i + 1]) / 2);
  }
  candidates.insert(candidates.end(), changes.begin(), changes.end());
  for (int64_t p = 8; p <= kMostP; p += 8) candidates.push_back(p);
  std::vector<int64_t> tried;
  for (const int64_t p : candidates) {
    if (p < 8 || p > kMostP || std::find(tried.begin(), tried.end(), p) != tried.end()) continue;
    if (tried.size() == kMostTries) break;
    tried.push_back(p);
    if (!bands_match(4 * p, Blocking{p, 1}, 2 * p)) continue;
    for (const int64_t unroll : {8, 16, 4, 32, 64, 24, 48, 2, 1}) {
      const Blocking b{p, unroll};
      if (bands_match(3 * p + p / 2 + 3, b, 2 * p) && bands_match(kM, b, calls_target(kM, b))) {
        return b;
      }
    }
    return std::nullopt;
  }
  return std::nullopt;
}

const std::optional<Blocking>& blocking() {
  static const std::optional<Blocking> found = [] {
    runtime_pass::Unrecorded beside_the_pass;
    return find_blocking();
  }();
  return found;
}

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

struct ConvArgs {
  at::Tensor weight;
  c10::optional<at::Tensor> bias;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};

// OpenBLAS's own thread count (its threaded driver cuts rows otherwise); 1 for another BLAS,
// whose blocking find_blocking() does not find.
int blas_threads() {
  using Getter = int (*)();
  static const auto get = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get ? get() : 1;
}

bool no_autograd(const at::Tensor& t) { return !(at::GradMode::is_enabled() && t.requires_grad()); }

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
  return at::get_num_threads() == 1 && blas_threads() == 1 && shape[0] < 16;
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
  at::Tensor reference = at::batch_norm(x, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                        false, 0.1, bn.eps, false);
  reference.relu_();
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
  at::Tensor normalized;
  if (own && plain_nchw(x) && normalization(bn, x.size(1)) && rounding()) {
    const int64_t channels = x.size(1), pixels = x.size(2) * x.size(3);
    const Affine a = affine(bn, channels, rounding()->fused_beta);
    for (int64_t image = 0; image < x.size(0); ++image) {
      float* rows = x.data_ptr<float>() + image * channels * pixels;
      const std::vector<const float*> in = channel_rows({x}, image, pixels);
      normalize(a, *rounding(), in.data(), rows, channels, pixels);
    }
    normalized = x;
  } else {
    normalized = at::batch_norm(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.training,
                                bn.momentum, bn.eps, bn.cudnn_enabled);
    normalized.relu_();
  }
  return conv2d_sliced(normalized, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation,
                       conv.groups);
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
  at::Tensor buffer = at::empty({buffer_rows(calls) * channels}, options);
  at::Tensor out = at::empty({images, n, shape[2], shape[3]}, options);
  const Affine a = affine(bn, channels, r.fused_beta);
  const kernels::AffineReluRowFn row = kernels::affine_relu_row();
  for (int64_t image = 0; image < images; ++image) {
    const std::vector<const float*> rows = channel_rows(parts, image, m);
    const auto fill = [&](int64_t column, int64_t first, int64_t count, float* dst) {
      const auto i = static_cast<size_t>(column);
      row(rows[i] + first, dst, count, a.alpha[i], a.beta[i], r.fused_map);
    };
    run_calls(calls, m, n, channels, conv.weight.data_ptr<float>(),
              out.data_ptr<float>() + image * n * m, buffer.data_ptr<float>(), fill);
  }
  return out;
}

// The calls for this shape and thread count when they give aten's bytes (checked once, beside the
// pass, on random input and the real parameters); empty: run whole.
std::vector<Call> checked_calls(const BnArgs& bn, const std::array<int64_t, 4>& shape,
                                const ConvArgs& conv) {
  const std::optional<Blocking>& b = blocking();
  const std::optional<Rounding>& r = rounding();
  if (!b || !r) return {};
  const int64_t channels = shape[1], m = shape[2] * shape[3];
  const std::vector<Call> calls = plan_calls(m, *b, calls_target(m, *b));
  if (calls.size() < 2 || (m - buffer_rows(calls)) * channels * 4 < kWorthBytes) return {};

  const std::vector<int64_t> key{channels, shape[2], shape[3], conv.weight.size(0),
                                 at::get_num_threads()};
  static std::mutex mutex;
  static auto* decided = new std::map<std::vector<int64_t>, bool>();  // never destroyed
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = decided->find(key); it != decided->end()) {
      return it->second ? calls : std::vector<Call>{};
    }
  }
  bool same = false;
  {
    runtime_pass::Unrecorded beside_the_pass;
    at::Generator generator = probe_generator();
    const std::array<int64_t, 4> one{1, channels, shape[2], shape[3]};
    const at::Tensor probe =
        at::randn({1, channels, shape[2], shape[3]}, generator, bn.parts[0].options());
    at::Tensor reference =
        at::batch_norm(probe, bn.weight, bn.bias, bn.running_mean, bn.running_var, false,
                       bn.momentum, bn.eps, bn.cudnn_enabled);
    reference.relu_();
    reference = at::conv2d(reference, conv.weight, conv.bias, conv.stride, conv.padding,
                           conv.dilation, conv.groups);
    same = same_bytes(run_banded(bn, {probe}, one, conv, calls, *r), reference);
  }
  if (!same) count_whole_after_check();
  std::lock_guard<std::mutex> lock(mutex);
  decided->emplace(key, same);
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

// The arguments after the input: batch norm's eight, then aten::conv2d's six after its input.
void take_rest(const c10::IValue* args, BnArgs& bn, ConvArgs& conv) {
  bn.weight = args[0].toOptional<at::Tensor>();
  bn.bias = args[1].toOptional<at::Tensor>();
  bn.running_mean = args[2].toOptional<at::Tensor>();
  bn.running_var = args[3].toOptional<at::Tensor>();
  bn.training = args[4].toBool();
  bn.momentum = args[5].toDouble();
  bn.eps = args[6].toDouble();
  bn.cudnn_enabled = args[7].toBool();
  conv.weight = args[8].toTensor();
  conv.bias = args[9].toOptional<at::Tensor>();
  conv.stride = args[10].toIntVector();
  conv.padding = args[11].toIntVector();
  conv.dilation = args[12].toIntVector();
  conv.groups = args[13].toInt();
}

#define MEMOPLAN_BN_RELU_CONV_ARGS                                                              \
  "Tensor? bn_weight, Tensor? bn_bias, Tensor? running_mean, Tensor? running_var, "             \
  "bool training, float momentum, float eps, bool cudnn_enabled, Tensor weight, Tensor? bias, " \
  "int[] stride, int[] padding, int[] dilation, int groups) -> Tensor"

torch::jit::RegisterOperators operators({
    torch::jit::Operator(
        "memoplan::bn_relu_conv1x1(Tensor input, " MEMOPLAN_BN_RELU_CONV_ARGS,
        [](torch::jit::Stack& stack) {
          const c10::IValue* args = &stack[stack.size() - 15];
          BnArgs bn;
          ConvArgs conv;
          bn.parts = {args[0].toTensor()};
          take_rest(args + 1, bn, conv);
          torch::jit::drop(stack, 15);
          stack.emplace_back(bn_relu_conv1x1(bn, conv));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    torch::jit::Operator(
        "memoplan::cat_bn_relu_conv1x1(Tensor[] tensors, int dim, " MEMOPLAN_BN_RELU_CONV_ARGS,
        [](torch::jit::Stack& stack) {
          const c10::IValue* args = &stack[stack.size() - 16];
          BnArgs bn;
          ConvArgs conv;
          bn.list = args[0].toTensorList();
          bn.parts = bn.list->vec();
          bn.dim = args[1].toInt();
          take_rest(args + 2, bn, conv);
          torch::jit::drop(stack, 16);
          stack.emplace_back(bn_relu_conv1x1(bn, conv));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
});

#undef MEMOPLAN_BN_RELU_CONV_ARGS

// The sizes aten::cat's output would have, without making it.
torch::jit::RegisterOperators cat_sizes_operator({torch::jit::Operator(
    "memoplan::cat_sizes(Tensor[] tensors, int dim) -> int[]",
    [](torch::jit::Stack& stack) {
      const c10::List<at::Tensor> tensors = stack[stack.size() - 2].toTensorList();
      const int64_t dim = stack.back().toInt();
      torch::jit::drop(stack, 2);
      TORCH_CHECK(!tensors.empty(), "memoplan::cat_sizes: no tensors");
      std::vector<int64_t> sizes = tensors.get(0).sizes().vec();
      const int64_t rank = static_cast<int64_t>(sizes.size());
      const int64_t d = dim < 0 ? dim + rank : dim;
      TORCH_CHECK(d >= 0 && d < rank, "memoplan::cat_sizes: dimension out of range");
      int64_t total = 0;
      for (size_t i = 0; i < tensors.size(); ++i) total += tensors.get(i).size(d);
      sizes[static_cast<size_t>(d)] = total;
      stack.emplace_back(std::move(sizes));
    },
    c10::AliasAnalysisKind::FROM_SCHEMA)});

const c10::Symbol kFused = c10::Symbol::fromQualString("memoplan::bn_relu_conv1x1");
const c10::Symbol kCatFused = c10::Symbol::fromQualString("memoplan::cat_bn_relu_conv1x1");
const c10::Symbol kCatSizes = c10::Symbol::fromQualString("memoplan::cat_sizes");

// Whether `value` is read after `node`: a later use, or a concatenation of a list read later.
bool read_after(const torch::jit::Value* value, const torch::jit::Node* node) {
  for (const torch::jit::Use& use : value->uses()) {
    if (use.user != node && use.user->isAfter(node)) return true;
  }
  const torch::jit::Node* producer = value->node();
  if (producer->kind() == c10::aten::cat && producer->inputs().size() >= 1) {
    const torch::jit::Value* list = producer->input(0);
    for (const torch::jit::Use& use : list->uses()) {
      if (use.user != producer && use.user->isAfter(producer)) return true;
    }
  }
  return false;
}

bool single_use_by(const torch::jit::Value* value, const torch::jit::Node* user) {
  return value->uses().size() == 1 && value->uses()[0].user == user && value->uses()[0].offset == 0;
}

void collect(torch::jit::Block* block, std::vector<torch::jit::Node*>& out) {
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) collect(inner, out);
    if (node->kind() != c10::aten::conv2d ||
        !node->matches("aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, "
                       "int[2] stride=1, int[2] padding=0, int[2] dilation=1, int groups=1) -> "
                       "Tensor")) {
      continue;
    }
    torch::jit::Node* relu = node->input(0)->node();
    if ((relu->kind() != c10::aten::relu && relu->kind() != c10::aten::relu_) ||
        relu->owningBlock() != block || !single_use_by(relu->output(), node)) {
      continue;
    }
    torch::jit::Node* bn = relu->input(0)->node();
    if (bn->kind() != c10::aten::batch_norm || bn->owningBlock() != block ||
        !bn->matches("aten::batch_norm(Tensor input, Tensor? weight, Tensor? bias, "
                     "Tensor? running_mean, Tensor? running_var, bool training, float momentum, "
                     "float eps, bool cudnn_enabled) -> Tensor") ||
        !single_use_by(bn->output(), relu) || !read_after(bn->input(0), bn)) {
      continue;
    }
    out.push_back(node);
  }
}

// `node`, or the node of `block` that holds it in one of its blocks; nullptr if none does.
const torch::jit::Node* in_block(const torch::jit::Node* node, const torch::jit::Block* block) {
  while (node && node->owningBlock() != block) {
    node = node->owningBlock()->owningNode();
  }
  return node;
}

// The batch norm's input's concatenation, when the batch norm is all that reads its bytes
// (aten::dim and aten::size aside: batch norm's own checks) and nothing uses the concatenated list
// between the concatenation and the convolution (the fused op reads the list there).
torch::jit::Node* own_concat(torch::jit::Node* bn, const torch::jit::Node* conv) {
  torch::jit::Node* cat = bn->input(0)->node();
  if (cat->kind() != c10::aten::cat || cat->inputs().size() != 2 ||
      cat->owningBlock() != bn->owningBlock() ||
      !cat->matches("aten::cat(Tensor[] tensors, int dim=0) -> Tensor")) {
    return nullptr;
  }
  for (const torch::jit::Use& use : cat->output()->uses()) {
    const torch::jit::Node* user = use.user;
    const bool shape = user->kind() == c10::aten::dim ||
                       (user->kind() == c10::aten::size && user->inputs().size() == 1);
    if (user != bn && !shape) return nullptr;
  }
  for (const torch::jit::Use& use : cat->input(0)->uses()) {
    const torch::jit::Node* user = in_block(use.user, cat->owningBlock());
    if (user && user != cat && user->isAfter(cat) && user->isBefore(conv)) return nullptr;
  }
  return cat;
}

// The concatenation's shape checks read its inputs' instead: its rank is its first input's, its
// sizes memoplan::cat_sizes's.
void shape_from_inputs(torch::jit::Graph& graph, torch::jit::Node* cat) {
  std::vector<torch::jit::Node*> users;
  for (const torch::jit::Use& use : cat->output()->uses()) {
    if (use.user->kind() == c10::aten::dim || use.user->kind() == c10::aten::size) {
      users.push_back(use.user);
    }
  }
  for (torch::jit::Node* user : users) {
    torch::jit::WithInsertPoint point(user);
    if (user->kind() == c10::aten::dim) {
      torch::jit::Value* zero = graph.insertConstant(int64_t{0});
      torch::jit::Node* first = graph.create(c10::aten::__getitem__, {cat->input(0), zero}, 1);
      first->output()->setType(c10::TensorType::get());
      graph.insertNode(first);
      user->replaceInput(0, first->output());
    } else {
      torch::jit::Node* sizes = graph.create(kCatSizes, {cat->input(0), cat->input(1)}, 1);
      sizes->output()->setType(user->output()->type());
      graph.insertNode(sizes);
      user->output()->replaceAllUsesWith(sizes->output());
      user->destroy();
    }
  }
}

}  // namespace

int fuse_bn_relu_conv1x1(torch::jit::Graph& graph) {
  std::vector<torch::jit::Node*> convs;
  collect(graph.block(), convs);
  for (torch::jit::Node* conv : convs) {
    torch::jit::Node* relu = conv->input(0)->node();
    torch::jit::Node* bn = relu->input(0)->node();
    torch::jit::Node* cat = own_concat(bn, conv);
    if (cat) shape_from_inputs(graph, cat);
    std::vector<torch::jit::Value*> inputs;
    if (cat) inputs = {cat->input(0), cat->input(1)};
    for (size_t i = cat ? 1 : 0; i < bn->inputs().size(); ++i) inputs.push_back(bn->input(i));
    for (size_t i = 1; i < conv->inputs().size(); ++i) inputs.push_back(conv->input(i));
    torch::jit::Node* fused = graph.create(cat ? kCatFused : kFused, inputs, 1);
    fused->output()->setType(conv->output()->type());
    fused->setSourceRange(conv->sourceRange());
    fused->insertBefore(conv);
    conv->output()->replaceAllUsesWith(fused->output());
    conv->destroy();
    relu->destroy();
    bn->destroy();
    if (cat) cat->destroy();
  }
  return static_cast<int>(convs.size());
}

}  // namespace memoplan::torch_ext
