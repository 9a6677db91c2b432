// The ops of a blocked-layout region (blocked.h) other than the convolution (blocked_ops.cc):
// elementwise chains, pooling, adaptive average pooling and binary ops, each on oneDNN in
// whichever layout its input has (blocked_tensor.h), the result in its input's layout or the one
// asked for; a batch norm and a global average pooling (NHWC, blocked) of their own. A pooling or
// broadcast oneDNN has no primitive for runs as aten would, through plain tensors, and is converted
// back. The TorchScript operators that call these: blocked_operators.cc.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "blocked.h"
#include "blocked_tensor.h"
#include "memoplan/kernels/column_means.h"
#include "memoplan/onednn/onednn.h"
#include "scale_shift.h"
#include "tuned/tuned_support.h"

namespace memoplan::torch_ext::blocked {

using onednn::Format;
using onednn::PostOp;
using onednn::Shape;

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

at::Tensor eltwise(const at::Tensor& x_in, const std::vector<PostOp>& chain) {
  const at::Tensor x = dense(x_in, "beltwise");
  const auto p = onednn::eltwise(shape_of(x), chain, format_of(x));
  at::Tensor out = new_tensor(shape_of(x), format_of(x), x.options());
  at::Tensor scratch = scratchpad(p->scratchpad_bytes(), x.options());
  p->run(x.data_ptr<float>(), nullptr, out.data_ptr<float>(), data_or_null(scratch));
  return out;
}

namespace {

at::Tensor run_simple(const std::shared_ptr<const onednn::Primitive>& p, const at::Tensor& a,
                      const at::Tensor* b, Format f) {
  at::Tensor out = new_tensor(p->output(), f, a.options());
  at::Tensor scratch = scratchpad(p->scratchpad_bytes(), a.options());
  p->run(a.data_ptr<float>(), b ? b->data_ptr<float>() : nullptr, out.data_ptr<float>(),
         data_or_null(scratch));
  return out;
}

int64_t pick(const std::vector<int64_t>& v, int i, int64_t otherwise) {
  if (v.empty()) return otherwise;
  return v.at(v.size() == 1 ? 0 : static_cast<size_t>(i));
}

// A pooling of `x` in its own layout; the window is the caller's to set.
onednn::PoolSpec pool_spec(const at::Tensor& x) {
  const Shape s = shape_of(x);
  onednn::PoolSpec spec;
  spec.format = format_of(x);
  spec.n = s.n;
  spec.c = s.c;
  spec.h = s.h;
  spec.w = s.w;
  return spec;
}

}  // namespace

at::Tensor pool(const at::Tensor& x_in, const PoolArgs& a) {
  const at::Tensor x = dense(x_in, "bpool");
  const Shape s = shape_of(x);
  onednn::PoolSpec spec = pool_spec(x);
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
    return convert(
        a.avg
            ? at::avg_pool2d(plain, a.kernel, a.stride, a.padding, a.ceil_mode, a.count_include_pad)
            : at::max_pool2d(plain, a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode),
        spec.format);
  }
  return run_simple(onednn::pool(spec), x, nullptr, spec.format);
}

namespace {

// The mean of each image's pixels (output 1x1) where channels are the fastest index (NHWC, and a
// blocked tensor's block). A squeeze-excitation's input of 672x8x8 took oneDNN's pooling 18 us a
// call in mobilenet_v3's pass (ONNX Runtime's GlobalAveragePool: 8). Padded lanes: zeros in, zeros
// out.
at::Tensor global_avg_pool(const at::Tensor& x) {
  const Shape s = shape_of(x);
  const Format f = format_of(x);
  at::Tensor out = new_tensor({s.n, s.c, 1, 1}, f, x.options());
  const int64_t width = f == Format::kNhwc ? s.c : onednn::block_size();
  const int64_t images = f == Format::kNhwc ? s.n : s.n * (onednn::padded_channels(s.c) / width);
  const int64_t pixels = s.h * s.w;
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / (pixels * width));
  at::parallel_for(0, images, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      kernels::column_means(src + i * pixels * width, pixels, width, dst + i * width);
    }
  });
  return out;
}

}  // namespace

at::Tensor adaptive_avg_pool(const at::Tensor& x_in, const std::vector<int64_t>& output_size) {
  const at::Tensor x = dense(x_in, "badaptive_avg_pool");
  const Shape s = shape_of(x);
  const int64_t oh = pick(output_size, 0, 1), ow = pick(output_size, 1, oh);
  if (oh <= 0 || ow <= 0 || s.h % oh != 0 || s.w % ow != 0) {
    return convert(at::adaptive_avg_pool2d(to_plain(x), output_size), format_of(x));
  }
  if (oh == 1 && ow == 1 && format_of(x) != Format::kNchw && s.h * s.w > 0) {
    return global_avg_pool(x);
  }
  onednn::PoolSpec spec = pool_spec(x);
  spec.kind = onednn::PoolKind::kAvgExcludePadding;
  spec.kernel[0] = spec.stride[0] = s.h / oh;
  spec.kernel[1] = spec.stride[1] = s.w / ow;
  return run_simple(onednn::pool(spec), x, nullptr, spec.format);
}

at::Tensor binary(const at::Tensor& a_in, const at::Tensor& b_in, onednn::BinaryKind kind,
                  const std::vector<PostOp>& post, Format output) {
  // Both kinds commute: the full-size operand goes first.
  const bool swap = a_in.numel() < b_in.numel();
  const at::Tensor a = convert(swap ? b_in : a_in, output);
  const at::Tensor b = convert(swap ? a_in : b_in, output);
  const Shape sa = shape_of(a), sb = shape_of(b);
  const bool same = sa.n == sb.n && sa.c == sb.c && sa.h == sb.h && sa.w == sb.w;
  const bool per_channel = sa.n == sb.n && sa.c == sb.c && sb.h == 1 && sb.w == 1;
  if (!same && !per_channel) {  // another broadcast: as aten would
    tuned::count(false);
    at::Tensor y =
        kind == onednn::BinaryKind::kAdd ? to_plain(a) + to_plain(b) : to_plain(a) * to_plain(b);
    for (const PostOp& op : post) y = apply_eltwise(y, op);
    return convert(y, output);
  }
  return run_simple(onednn::binary(kind, sa, sb, post, output), a, &b, output);
}

at::Tensor batch_norm(const at::Tensor& x_in, const BatchNormArgs& a,
                      const std::vector<PostOp>& post) {
  const at::Tensor x = dense(x_in, "bnorm");
  const int64_t c = x.size(1);
  const bool needs_grad = at::GradMode::is_enabled() && x.requires_grad();
  if (!scale_shift_applies(c, needs_grad, a, {})) {  // as aten
    tuned::count(false);
    at::Tensor y = at::batch_norm(to_plain(x), a.weight, a.bias, a.mean, a.var, a.training,
                                  a.momentum, a.eps, false);
    for (const PostOp& op : post) y = apply_eltwise(y, op);
    return convert(y, format_of(x));
  }
  const Shape s = shape_of(x);
  const Format f = format_of(x);
  const int64_t block = f == Format::kBlocked ? onednn::block_size() : 1;
  const int64_t channels = f == Format::kBlocked ? onednn::padded_channels(s.c) : s.c;
  const bool relu = relu_only(post);
  const ScaleShift ss = scale_shift_of(a, s.c, channels, relu ? post : std::vector<PostOp>{});
  at::Tensor out = new_tensor(s, f, x.options());
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const float* al = ss.alpha.data();
  const float* be = ss.beta.data();
  const int64_t pixels = s.h * s.w;
  // Rows: NCHW a channel's plane; NHWC a pixel's channels; blocked a channel block's pixels.
  const int64_t rows = f == Format::kNhwc ? s.n * pixels : s.n * (channels / block);
  const int64_t width = f == Format::kNhwc ? channels : pixels * block;  // floats a row
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, width));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (f == Format::kNhwc) {
        scale_shift(src + r * channels, dst + r * channels, channels, al, be, 0, ss.floor);
      } else if (f == Format::kNchw) {
        scale_shift(src + r * pixels, dst + r * pixels, pixels, al + r % channels,
                    be + r % channels, 1, ss.floor);
      } else {
        const int64_t first = (r % (channels / block)) * block;
        for (int64_t p = 0; p < pixels; ++p) {
          const int64_t at = (r * pixels + p) * block;
          scale_shift(src + at, dst + at, block, al + first, be + first, 0, ss.floor);
        }
      }
    }
  });
  if (!relu && !post.empty()) return eltwise(out, post);
  return out;
}

}  // namespace memoplan::torch_ext::blocked
