// self_check (onednn.h): whether oneDNN computes right on this CPU, in the layouts and with the
// epilogues memoplan asks of it. Each case runs through this library's own primitives (the weight
// packing, the post-ops, the blocked layout of layout_block()) on small operands and is compared
// with a double-precision loop. The cases are the kinds the tuned path runs: linears with their
// activations, convolutions dense, depthwise and pointwise, from a plain input and between blocked
// ones, with a folded batch norm's scales packed in and a residual added, a pooling, a binary add
// and the conversions. Channel counts are no multiple of the block (the padding channels too).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "onednn_common.h"

namespace memoplan::onednn {
namespace {

using Corrupt = std::function<void(float*, size_t)>;

// Deterministic operands in [-1, 1): the same on every run and every machine.
std::vector<float> operand(size_t count, uint32_t seed) {
  std::vector<float> v(count);
  uint32_t x = seed * 2654435761u + 1u;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.f;
  }
  return v;
}

// Buffers as oneDNN wants them: 64-byte aligned (a std::vector<float> is only 16).
class Buffer {
 public:
  explicit Buffer(size_t bytes) : data_((bytes + 63) / 64 + 1) {}
  float* floats() { return reinterpret_cast<float*>(data_.data()); }
  void* bytes() { return data_.data(); }

 private:
  struct alignas(64) Line {
    unsigned char b[64];
  };
  std::vector<Line> data_;
};

// Where element (n, c, h, w) of a tensor of shape s lies in format f (the blocked layout's block
// is `block`; its padding channels lie beyond c < s.c).
int64_t offset(Shape s, Format f, int block, int64_t n, int64_t c, int64_t h, int64_t w) {
  switch (f) {
    case Format::kNchw:
      return ((n * s.c + c) * s.h + h) * s.w + w;
    case Format::kNhwc:
      return ((n * s.h + h) * s.w + w) * s.c + c;
    case Format::kBlocked:
      break;
  }
  const int64_t blocks = (s.c + block - 1) / block;
  return (((n * blocks + c / block) * s.h + h) * s.w + w) * block + c % block;
}

size_t floats_of(Shape s, Format f, int block) {
  const int64_t c = f == Format::kBlocked ? (s.c + block - 1) / block * block : s.c;
  return static_cast<size_t>(s.n * c * s.h * s.w);
}

// NCHW values laid out in f (padding channels zero).
std::vector<float> laid_out(const std::vector<float>& nchw, Shape s, Format f, int block) {
  std::vector<float> out(floats_of(s, f, block), 0.f);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t h = 0; h < s.h; ++h)
        for (int64_t w = 0; w < s.w; ++w)
          out[static_cast<size_t>(offset(s, f, block, n, c, h, w))] =
              nchw[static_cast<size_t>(offset(s, Format::kNchw, block, n, c, h, w))];
  return out;
}

double eltwise_reference(double x, int kind) {
  switch (static_cast<Eltwise>(kind)) {
    case Eltwise::kRelu:
      return x > 0 ? x : 0;
    case Eltwise::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Eltwise::kHardswish:
      return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
    default:
      break;
  }
  return x;  // the cases below use no other
}

// The first element of `got` (in format f) off `expected` (NCHW, doubles) by more than a float
// sum of this size may drift, as text; "" where all agree.
std::string compare(const char* what, const std::vector<double>& expected, const float* got,
                    Shape s, Format f, int block) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t h = 0; h < s.h; ++h)
        for (int64_t w = 0; w < s.w; ++w) {
          const double e = expected[static_cast<size_t>(offset(s, Format::kNchw, 0, n, c, h, w))];
          const double g = got[offset(s, f, block, n, c, h, w)];
          if (!(std::abs(g - e) <= 1e-4 * (1 + std::abs(e)))) {  // NaN fails too
            std::ostringstream out;
            out << what << ": element (" << n << ", " << c << ", " << h << ", " << w << ") is " << g
                << ", not " << e;
            return out.str();
          }
        }
  return "";
}

// out = act(x W^T + bias), x M x K, W N x K (as aten::linear takes it), through matmul().
std::string check_matmul(int64_t m, int64_t k, int64_t n, bool bias, int activation,
                         const Corrupt& corrupt) {
  MatmulSpec spec{m, k, n, k, n, bias, {}};
  if (activation != 0) spec.post.push_back({activation});
  const std::shared_ptr<const Matmul> mm = matmul(spec);
  const std::vector<float> x = operand(static_cast<size_t>(m * k), 1);
  const std::vector<float> w = operand(static_cast<size_t>(n * k), 2);
  const std::vector<float> b = operand(static_cast<size_t>(n), 3);
  Buffer packed(mm->packed_weights_bytes()), scratch(mm->scratchpad_bytes());
  Buffer in(x.size() * sizeof(float)), out(static_cast<size_t>(m * n) * sizeof(float));
  std::copy(x.begin(), x.end(), in.floats());
  mm->pack_weights(w.data(), k, 1, packed.bytes());
  mm->run(in.floats(), packed.bytes(), b.data(), out.floats(), scratch.bytes());
  if (corrupt) corrupt(out.floats(), static_cast<size_t>(m * n));
  std::vector<double> expected(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = bias ? b[static_cast<size_t>(j)] : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        sum += static_cast<double>(x[static_cast<size_t>(i * k + p)]) *
               w[static_cast<size_t>(j * k + p)];
      }
      expected[static_cast<size_t>(i * n + j)] =
          activation ? eltwise_reference(sum, activation) : sum;
    }
  }
  std::ostringstream what;
  what << "matmul " << m << "x" << k << "x" << n << " (" << mm->implementation() << ")";
  return compare(what.str().c_str(), expected, out.floats(), {1, 1, m, n}, Format::kNchw, 0);
}

// A convolution with bias, the weight scaled per output channel as it is packed (a folded batch
// norm), then spec.post (activations and at most one kResidualAdd).
std::string check_conv(ConvSpec spec, int block, const Corrupt& corrupt) {
  const std::shared_ptr<const Conv> conv_ = conv(spec);
  const Shape in_shape{spec.n, spec.c, spec.h, spec.w}, out_shape = conv_->output();
  const int64_t per_group = spec.c / spec.groups, out_per_group = spec.out_channels / spec.groups;
  const std::vector<float> x = operand(static_cast<size_t>(spec.n * spec.c * spec.h * spec.w), 4);
  const std::vector<float> w =
      operand(static_cast<size_t>(spec.out_channels * per_group * spec.kh * spec.kw), 5);
  const std::vector<float> b = operand(static_cast<size_t>(spec.out_channels), 6);
  std::vector<float> scales = operand(static_cast<size_t>(spec.out_channels), 7);
  for (float& s : scales) s = 0.5f + std::abs(s);
  std::vector<float> residual_nchw =
      operand(static_cast<size_t>(out_shape.n * out_shape.c * out_shape.h * out_shape.w), 8);
  const std::vector<float> in = laid_out(x, in_shape, spec.input, block);
  const std::vector<float> residual = laid_out(residual_nchw, out_shape, spec.output, block);
  Buffer input(in.size() * sizeof(float)), packed(conv_->packed_weights_bytes()),
      scratch(conv_->scratchpad_bytes());
  const size_t out_floats = floats_of(out_shape, spec.output, block);
  Buffer output(out_floats * sizeof(float));
  std::copy(in.begin(), in.end(), input.floats());
  bool scaled = conv_->pack_weights(w.data(), packed.bytes(), scales.data(), {});
  std::vector<float> folded;
  if (!scaled) {  // the caller's way where oneDNN cannot scale: fold, then pack
    folded = w;
    const size_t per_row = folded.size() / static_cast<size_t>(spec.out_channels);
    for (size_t i = 0; i < folded.size(); ++i) folded[i] *= scales[i / per_row];
    conv_->pack_weights(folded.data(), packed.bytes(), nullptr, {});
  }
  conv_->run(input.floats(), packed.bytes(), b.data(), residual.data(), output.floats(),
             scratch.bytes());
  if (corrupt) corrupt(output.floats(), out_floats);
  std::vector<double> expected(
      static_cast<size_t>(out_shape.n * out_shape.c * out_shape.h * out_shape.w));
  for (int64_t n = 0; n < out_shape.n; ++n)
    for (int64_t o = 0; o < out_shape.c; ++o)
      for (int64_t oh = 0; oh < out_shape.h; ++oh)
        for (int64_t ow = 0; ow < out_shape.w; ++ow) {
          const int64_t g = o / out_per_group;
          double sum = 0;
          for (int64_t ci = 0; ci < per_group; ++ci)
            for (int64_t r = 0; r < spec.kh; ++r)
              for (int64_t q = 0; q < spec.kw; ++q) {
                const int64_t ih = oh * spec.stride[0] - spec.padding[0] + r * spec.dilation[0];
                const int64_t iw = ow * spec.stride[1] - spec.padding[1] + q * spec.dilation[1];
                if (ih < 0 || ih >= spec.h || iw < 0 || iw >= spec.w) continue;
                const int64_t c = g * per_group + ci;
                sum += static_cast<double>(
                           x[static_cast<size_t>(((n * spec.c + c) * spec.h + ih) * spec.w + iw)]) *
                       w[static_cast<size_t>(((o * per_group + ci) * spec.kh + r) * spec.kw + q)];
              }
          double v = sum * scales[static_cast<size_t>(o)] + b[static_cast<size_t>(o)];
          const size_t at = static_cast<size_t>(offset(out_shape, Format::kNchw, 0, n, o, oh, ow));
          for (const PostOp& p : spec.post) {
            v = p.kind == kResidualAdd ? v + residual_nchw[at] : eltwise_reference(v, p.kind);
          }
          expected[at] = v;
        }
  std::ostringstream what;
  what << "convolution " << spec.c << "x" << spec.h << "x" << spec.w << " -> " << spec.out_channels
       << " " << spec.kh << "x" << spec.kw << " /" << spec.groups << " (" << conv_->implementation()
       << ")";
  return compare(what.str().c_str(), expected, output.floats(), out_shape, spec.output, block);
}

// A 3x3 max pooling, stride 2, in the blocked layout.
std::string check_pool(int block, const Corrupt& corrupt) {
  PoolSpec spec;
  spec.n = 1, spec.c = 21, spec.h = 9, spec.w = 9;
  spec.kernel[0] = spec.kernel[1] = 3;
  spec.stride[0] = spec.stride[1] = 2;
  spec.padding_l[0] = spec.padding_l[1] = spec.padding_r[0] = spec.padding_r[1] = 1;
  const std::shared_ptr<const Primitive> p = pool(spec);
  const Shape in_shape{1, 21, 9, 9}, out_shape = p->output();
  const std::vector<float> x = operand(static_cast<size_t>(21 * 81), 9);
  const std::vector<float> in = laid_out(x, in_shape, Format::kBlocked, block);
  const size_t out_floats = floats_of(out_shape, Format::kBlocked, block);
  Buffer input(in.size() * sizeof(float)), output(out_floats * sizeof(float)),
      scratch(p->scratchpad_bytes());
  std::copy(in.begin(), in.end(), input.floats());
  p->run(input.floats(), nullptr, output.floats(), scratch.bytes());
  if (corrupt) corrupt(output.floats(), out_floats);
  std::vector<double> expected(static_cast<size_t>(out_shape.c * out_shape.h * out_shape.w));
  for (int64_t c = 0; c < out_shape.c; ++c)
    for (int64_t oh = 0; oh < out_shape.h; ++oh)
      for (int64_t ow = 0; ow < out_shape.w; ++ow) {
        double most = -1e300;
        for (int64_t ih = oh * 2 - 1; ih < oh * 2 + 2; ++ih)
          for (int64_t iw = ow * 2 - 1; iw < ow * 2 + 2; ++iw)
            if (ih >= 0 && ih < 9 && iw >= 0 && iw < 9)
              most = std::max<double>(most, x[static_cast<size_t>((c * 9 + ih) * 9 + iw)]);
        expected[static_cast<size_t>((c * out_shape.h + oh) * out_shape.w + ow)] = most;
      }
  return compare("max pooling 21x9x9 3x3 /2", expected, output.floats(), out_shape,
                 Format::kBlocked, block);
}

// a + b (b per channel, broadcast) then a ReLU, blocked; and NCHW -> blocked -> NHWC conversions.
std::string check_binary_and_reorders(int block, const Corrupt& corrupt) {
  const Shape s{1, 19, 5, 6}, per_channel{1, 19, 1, 1};
  const std::vector<float> a = operand(static_cast<size_t>(19 * 30), 10);
  const std::vector<float> b = operand(19, 11);
  const std::shared_ptr<const Primitive> add = binary(
      BinaryKind::kAdd, s, per_channel, {{static_cast<int>(Eltwise::kRelu)}}, Format::kBlocked);
  const std::vector<float> a_blocked = laid_out(a, s, Format::kBlocked, block);
  const std::vector<float> b_blocked = laid_out(b, per_channel, Format::kBlocked, block);
  const size_t floats = floats_of(s, Format::kBlocked, block);
  Buffer out(floats * sizeof(float)), scratch(add->scratchpad_bytes());
  add->run(a_blocked.data(), b_blocked.data(), out.floats(), scratch.bytes());
  if (corrupt) corrupt(out.floats(), floats);
  std::vector<double> expected(a.size());
  for (size_t i = 0; i < a.size(); ++i) expected[i] = std::max(0.0, double{a[i]} + b[i / 30]);
  std::string failure =
      compare("binary add 19x5x6 +ReLU", expected, out.floats(), s, Format::kBlocked, block);
  if (!failure.empty()) return failure;
  Buffer blocked(floats * sizeof(float)), nhwc(a.size() * sizeof(float)), none(0);
  reorder(s, Format::kNchw, Format::kBlocked)->run(a.data(), nullptr, blocked.floats(), nullptr);
  reorder(s, Format::kBlocked, Format::kNhwc)
      ->run(blocked.floats(), nullptr, nhwc.floats(), nullptr);
  if (corrupt) corrupt(nhwc.floats(), a.size());
  const std::vector<double> same(a.begin(), a.end());
  return compare("conversions NCHW -> blocked -> NHWC 19x5x6", same, nhwc.floats(), s,
                 Format::kNhwc, block);
}

ConvSpec conv_case(Shape in, int64_t out_channels, int64_t kernel, int64_t stride, int64_t groups,
                   Format from, Format to, std::vector<PostOp> post) {
  ConvSpec s;
  s.n = in.n, s.c = in.c, s.h = in.h, s.w = in.w;
  s.out_channels = out_channels, s.kh = s.kw = kernel, s.groups = groups;
  s.stride[0] = s.stride[1] = stride;
  s.padding[0] = s.padding[1] = kernel / 2;
  s.input = from, s.output = to;
  s.post = std::move(post);
  return s;
}

}  // namespace

std::string self_check(const std::function<void(float*, size_t)>& corrupt) {
  const int block = detail::layout_block();
  if (block == 0) return "";
  const PostOp relu{static_cast<int>(Eltwise::kRelu)}, residual{kResidualAdd};
  const auto blocked = Format::kBlocked;
  try {
    // The linears of the tuned-kernel tests (an MLP's three layers) and a wide one.
    for (const auto& [m, k, n, bias, act] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, bool, int>>{
             {33, 64, 96, true, static_cast<int>(Eltwise::kRelu)},
             {33, 96, 80, true, static_cast<int>(Eltwise::kGelu)},
             {33, 80, 64, false, 0},
             {14, 64, 256, true, 0}}) {
      if (std::string f = check_matmul(m, k, n, bias, act, corrupt); !f.empty()) return f;
    }
    const std::vector<ConvSpec> convs = {
        conv_case({2, 3, 11, 11}, 24, 3, 2, 1, Format::kNchw, blocked, {relu}),  // a stem
        conv_case({1, 24, 8, 8}, 24, 3, 1, 1, blocked, blocked, {residual, relu}),
        conv_case({1, 58, 7, 7}, 58, 3, 2, 58, blocked, blocked, {}),  // depthwise
        conv_case({1, 58, 7, 7}, 116, 1, 1, 1, blocked, blocked, {relu}),
        conv_case({1, 40, 6, 6}, 20, 1, 1, 1, blocked, Format::kNchw, {}),
        conv_case({1, 24, 6, 6}, 36, 3, 1, 1, Format::kNhwc, Format::kNhwc, {relu}),
    };
    for (const ConvSpec& s : convs) {
      if (std::string f = check_conv(s, block, corrupt); !f.empty()) return f;
    }
    if (std::string f = check_pool(block, corrupt); !f.empty()) return f;
    return check_binary_and_reorders(block, corrupt);
  } catch (const std::exception& e) {
    return std::string("a primitive could not be made or run: ") + e.what();
  }
}

}  // namespace memoplan::onednn
