// memoplan::conv2d_sliced and memoplan::max_pool2d_sliced (sliced_ops.h): a convolution in bands
// of output rows or slices of output channels through oneDNN (memoplan/onednn/onednn.h's
// SlicedConv), max pooling by aten on slices of images and channels; each part written to its place
// in the output.
#include "sliced_ops.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/max_pool2d_with_indices.h>
#include <ATen/ops/randn.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <vector>

#include "allocation_peak.h"
#include "bn_relu_conv1x1.h"
#include "memoplan/onednn/onednn.h"
#include "memoplan/torch/fuser.h"
#include "planning/planning.h"
#include "sliced_conv.h"
#include "sliced_operators.h"

namespace memoplan::torch_ext {
namespace {

// A convolution runs in about this many parts (slices of at least 8 channels, a multiple of 8:
// oneDNN's AVX2 channel block); a pooling's images in 16 slices of channels each.
constexpr int64_t kConvParts = 8;
constexpr int64_t kPoolSlices = 16;

std::atomic<uint64_t> sliced_convolutions{0}, sliced_poolings{0}, whole_after_check{0},
    whole_saving_little{0};

// A dense float NCHW tensor on the CPU, as aten's oneDNN path takes it without converting it.
bool plain_float(const at::Tensor& t, int64_t dim) {
  return t.defined() && t.device().is_cpu() && t.layout() == c10::kStrided &&
         t.scalar_type() == at::kFloat && t.dim() == dim && t.numel() > 0 && t.is_contiguous() &&
         (dim != 4 || t.suggest_memory_format() == c10::MemoryFormat::Contiguous) && no_autograd(t);
}

int64_t slice_channels(int64_t out_channels) {
  const int64_t per = (out_channels + kConvParts - 1) / kConvParts;
  return std::max<int64_t>(8, (per + 7) / 8 * 8);
}

}  // namespace

std::optional<onednn::SlicedConvSpec> conv_spec(const ConvArgs& a) {
  if (!plain_float(a.input, 4) || !plain_float(a.weight, 4)) return std::nullopt;
  if (a.bias && a.bias->defined() && !plain_float(*a.bias, 1)) return std::nullopt;
  if (a.stride.size() != 2 || a.padding.size() != 2 || a.dilation.size() != 2) return std::nullopt;
  onednn::SlicedConvSpec s;
  s.n = a.input.size(0);
  s.c = a.input.size(1);
  s.h = a.input.size(2);
  s.w = a.input.size(3);
  s.out_channels = a.weight.size(0);
  s.kh = a.weight.size(2);
  s.kw = a.weight.size(3);
  s.groups = a.groups;
  s.bias = a.bias && a.bias->defined();
  for (int i = 0; i < 2; ++i) {
    s.stride[i] = a.stride[static_cast<size_t>(i)];
    s.padding[i] = a.padding[static_cast<size_t>(i)];
    s.dilation[i] = a.dilation[static_cast<size_t>(i)];
    if (s.stride[i] < 1 || s.padding[i] < 0 || s.dilation[i] < 1) return std::nullopt;
  }
  const bool depthwise =
      s.groups > 1 && s.groups == s.c && s.groups == s.out_channels && a.weight.size(1) == 1;
  if (s.groups != 1 && !depthwise) return std::nullopt;
  if (s.groups == 1 && a.weight.size(1) != s.c) return std::nullopt;
  const int64_t oh = onednn::conv_output_side(s.h, s.padding[0], s.dilation[0], s.kh, s.stride[0]);
  const int64_t ow = onednn::conv_output_side(s.w, s.padding[1], s.dilation[1], s.kw, s.stride[1]);
  if (oh <= 0 || ow <= 0) return std::nullopt;
  return s;
}

namespace {

// The parts a convolution runs in, if any: the plan with fewer temporaries of the two (bands of
// rows: the weights whole, input and output a band's; slices of channels: the input whole for a
// dense convolution, weights and output a slice's), taken where it leaves at most half of what
// aten's whole call lays out and saves at least kWorthBytes.
std::optional<onednn::SlicedConvSpec> parts_for(const ConvArgs& a) {
  std::optional<onednn::SlicedConvSpec> spec = conv_spec(a);
  if (!spec) return std::nullopt;
  onednn::SlicedConvSpec& s = *spec;
  const bool depthwise = s.groups > 1;
  const int64_t oh = onednn::conv_output_side(s.h, s.padding[0], s.dilation[0], s.kh, s.stride[0]);
  const int64_t ow = onednn::conv_output_side(s.w, s.padding[1], s.dilation[1], s.kw, s.stride[1]);
  const double in = static_cast<double>(a.input.nbytes());
  const double weights = static_cast<double>(a.weight.nbytes());
  const double out = static_cast<double>(s.n * s.out_channels * oh * ow * 4);
  // aten: input and weights laid out beside the blocked output, then that output beside the plain
  // one it is copied into (what is there besides the plain output).
  const double whole = std::max(in + weights, out);
  const int64_t bands = std::min<int64_t>(oh, kConvParts);
  const int64_t band_rows = (oh + bands - 1) / bands;
  const double by_rows = weights + (in + out) / static_cast<double>(bands);
  const int64_t channels = slice_channels(s.out_channels);
  const double slices = static_cast<double>((s.out_channels + channels - 1) / channels);
  const double by_channels =
      depthwise ? (in + weights + out) / slices : in + (weights + out) / slices;
  const double best = std::min(by_rows, slices > 1 ? by_channels : by_rows);
  if (whole - best < kWorthBytes || best > 0.5 * whole) return std::nullopt;
  if (by_rows <= by_channels || slices <= 1) {
    if (bands <= 1) return std::nullopt;
    s.band_rows = band_rows;
  } else {
    s.slice_channels = channels;
  }
  return s;
}

}  // namespace

at::Tensor conv_whole(const ConvArgs& a, const at::Tensor& input) {
  return at::conv2d(input, a.weight, a.bias, a.stride, a.padding, a.dilation, a.groups);
}

namespace {

// Each buffer a planned tensor of its own (the plan gives it a slot like any temporary).
at::Tensor buffer(size_t bytes, const at::Tensor& like) {
  if (bytes == 0) return at::Tensor();
  return at::empty({static_cast<int64_t>((bytes + 3) / 4)}, like.options());
}

void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

at::Tensor conv_in_parts(const ConvArgs& a, const at::Tensor& input,
                         const onednn::SlicedConv& conv) {
  const onednn::Shape o = conv.output();
  at::Tensor out = at::empty({o.n, o.c, o.h, o.w}, input.options());
  const onednn::SlicedConv::Buffers b = conv.buffers();
  const at::Tensor in_part = buffer(b.input, input), weights_part = buffer(b.weights, input);
  const at::Tensor out_part = buffer(b.output, input), scratch = buffer(b.scratchpad, input);
  const float* bias = a.bias && a.bias->defined() ? a.bias->data_ptr<float>() : nullptr;
  conv.run(input.data_ptr<float>(), a.weight.data_ptr<float>(), bias, out.data_ptr<float>(),
           data_or_null(in_part), data_or_null(weights_part), data_or_null(out_part),
           data_or_null(scratch), nullptr, nullptr);
  return out;
}

}  // namespace

// Whether the parts compute aten's bytes for this shape and thread count: aten may run the
// convolution elsewhere (OpenBLAS, whose results depend on the matrix sizes) or oneDNN may pick
// another kernel for a part's shape. Checked once, on random input (the pass's own could hide a
// difference: zeros after a ReLU), beside the pass.
std::shared_ptr<const onednn::SlicedConv> checked_parts(const ConvArgs& a,
                                                        const onednn::SlicedConvSpec& s) {
  std::vector<int64_t> key = onednn::spec_key(s);
  key.push_back(at::get_num_threads());
  using Parts = std::shared_ptr<const onednn::SlicedConv>;
  static auto* checks = new ChoiceCache<std::vector<int64_t>, Parts>();
  return checks->decide(key, [&]() -> Parts {
    Parts conv;
    try {
      auto parts = onednn::sliced_conv(s);
      at::Generator generator = probe_generator();
      const at::Tensor probe = at::randn(a.input.sizes(), generator, a.input.options());
      if (same_bytes(conv_in_parts(a, probe, *parts), conv_whole(a, probe))) conv = parts;
    } catch (const std::exception&) {
      conv = nullptr;  // oneDNN takes no part's shape: whole
    }
    if (!conv) ++whole_after_check;
    return conv;
  });
}

namespace {

// Whether the parts save what parts_for estimated: aten's whole call and the parts, their
// temporaries measured on a probe (allocation_peak.h), once per shape and thread count. Kept where
// they save at least kWorthBytes and leave at most half of aten's; the estimate stands where the
// allocator reports nothing.
bool parts_save(const ConvArgs& a, const onednn::SlicedConvSpec& s,
                const onednn::SlicedConv& parts) {
  std::vector<int64_t> key = onednn::spec_key(s);
  key.push_back(at::get_num_threads());
  static auto* checks = new ChoiceCache<std::vector<int64_t>, bool>();
  return checks->decide(key, [&] {
    at::Generator generator = probe_generator();
    const at::Tensor probe = at::randn(a.input.sizes(), generator, a.input.options());
    const auto whole = peak_temporaries([&] { return conv_whole(a, probe); });
    const auto in_parts = peak_temporaries([&] { return conv_in_parts(a, probe, parts); });
    if (whole && in_parts && (*whole - *in_parts < kWorthBytes || 2 * *in_parts > *whole)) {
      ++whole_saving_little;
      return false;
    }
    return true;
  });
}

}  // namespace

at::Tensor conv2d_sliced(const ConvArgs& a) {
  const std::optional<onednn::SlicedConvSpec> spec = parts_for(a);
  if (!spec) return conv_whole(a, a.input);
  const std::shared_ptr<const onednn::SlicedConv> conv = checked_parts(a, *spec);
  if (!conv || !parts_save(a, *spec, *conv)) return conv_whole(a, a.input);
  ++sliced_convolutions;
  return conv_in_parts(a, a.input, *conv);
}

namespace {

// Max pooling: aten's max_pool2d computes indices (8 bytes an output element) and drops them.
// Sliced by image and by channels, each slice contiguous in the input and in the output; the
// maximum of a window is the same whichever slice it is computed in.
at::Tensor max_pool2d_sliced(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                             at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  const bool sliceable = self.defined() && self.device().is_cpu() &&
                         self.layout() == c10::kStrided && self.is_floating_point() &&
                         self.dim() == 4 && self.numel() > 0 && self.is_contiguous() &&
                         self.suggest_memory_format() == c10::MemoryFormat::Contiguous &&
                         no_autograd(self) && kernel.size() == 2;
  // An empty stride is the kernel's (aten's rule).
  const at::IntArrayRef steps = stride.empty() ? kernel : stride;
  if (!sliceable || steps.size() != 2 || steps[0] < 1 || steps[1] < 1 ||
      self.numel() / (steps[0] * steps[1]) * 8 < kWorthBytes) {
    return at::max_pool2d(self, kernel, stride, padding, dilation, ceil_mode);
  }
  ++sliced_poolings;
  const int64_t images = self.size(0), channels = self.size(1);
  const int64_t step = std::max<int64_t>(1, (channels + kPoolSlices - 1) / kPoolSlices);
  at::Tensor out, indices;
  for (int64_t n = 0; n < images; ++n) {
    for (int64_t c0 = 0; c0 < channels; c0 += step) {
      const int64_t k = std::min(step, channels - c0);
      const at::Tensor in = self.narrow(0, n, 1).narrow(1, c0, k);
      if (!out.defined()) {  // the first slice tells the output's size
        auto first = at::max_pool2d_with_indices(in, kernel, stride, padding, dilation, ceil_mode);
        indices = std::get<1>(first);
        const at::Tensor& part = std::get<0>(first);
        out = at::empty({images, channels, part.size(2), part.size(3)}, part.options());
        out.narrow(0, n, 1).narrow(1, c0, k).copy_(part);
        continue;
      }
      at::Tensor place = out.narrow(0, n, 1).narrow(1, c0, k);
      at::Tensor slots = indices.narrow(1, 0, k);
      at::max_pool2d_with_indices_out(place, slots, in, kernel, stride, padding, dilation,
                                      ceil_mode);
    }
  }
  return out;
}

at::Tensor conv2d_sliced_op(Conv2dSlicedOp op) { return conv2d_sliced(op); }

at::Tensor max_pool2d_sliced_op(MaxPool2dSlicedOp op) {
  return max_pool2d_sliced(op.self, op.kernel_size, op.stride, op.padding, op.dilation,
                           op.ceil_mode);
}

torch::jit::RegisterOperators sliced_operators({
    op::make_operator<Conv2dSlicedOp, &conv2d_sliced_op>(),
    op::make_operator<MaxPool2dSlicedOp, &max_pool2d_sliced_op>(),
});

}  // namespace
}  // namespace memoplan::torch_ext

namespace memoplan::torch_ext {
namespace {

// Whether the profiling executor would hand this convolution to its TensorExpr fuser: LibTorch 2.x
// fuses on the CPU by default, and takes a depthwise convolution whose weight and bias are graph
// constants (a frozen module's), computing other bits than aten's. Such a convolution stays
// aten::conv2d, so that the planned graph computes the unplanned one's bytes. A superset of the
// fuser's own test (a 3x3 kernel, equal strides and paddings): a convolution it would not take
// merely keeps aten's temporaries.
bool fuser_takes(const torch::jit::Node* conv) {
  if (!torch::jit::tensorExprFuserEnabled() || !torch::jit::canFuseOnCPU()) return false;
  const auto weight = torch::jit::toIValue(conv->input(1));
  const auto bias = torch::jit::toIValue(conv->input(2));
  const auto groups = torch::jit::toIValue(conv->input(6));
  if (!weight || !weight->isTensor() || !bias || !bias->isTensor() || !groups) return false;
  const at::Tensor& w = weight->toTensor();
  return w.dim() == 4 && w.size(1) == 1 && groups->isInt() && groups->toInt() == w.size(0);
}

void collect_sliceable(torch::jit::Block* block, std::vector<torch::jit::Node*>& out) {
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) collect_sliceable(inner, out);
    const bool conv = node->kind() == c10::aten::conv2d &&
                      node->matches(
                          "aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, "
                          "int[2] stride=1, int[2] padding=0, int[2] dilation=1, int groups=1) -> "
                          "Tensor") &&
                      !fuser_takes(node);
    const bool pool = node->kind() == c10::aten::max_pool2d &&
                      node->matches(
                          "aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], "
                          "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor");
    if (conv || pool || node->kind() == op::symbol<BudgetConv2dOp>()) out.push_back(node);
  }
}

}  // namespace

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.is_contiguous() && b.is_contiguous() &&
         a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

at::Generator probe_generator() {
  return at::make_generator<at::CPUGeneratorImpl>(0x6d656d6f706c616eULL);
}

void count_convolution_in_parts() { ++sliced_convolutions; }
void count_whole_after_check() { ++whole_after_check; }

int replace_sliced_ops(torch::jit::Graph& graph) {
  // First: a batch norm + ReLU + 1x1 convolution becomes one op, its convolution no longer a node.
  const int fused = fuse_bn_relu_conv1x1(graph);
  std::vector<torch::jit::Node*> nodes;
  collect_sliceable(graph.block(), nodes);
  for (torch::jit::Node* node : nodes) {
    // Each takes the arguments of the node it replaces, in their order.
    torch::jit::Node* sliced =
        node->kind() == c10::aten::conv2d
            ? op::Builder<Conv2dSlicedOp>(graph).set_leading(node->inputs()).create()
        : node->kind() == op::symbol<BudgetConv2dOp>()
            ? op::Builder<BudgetConv2dMinOp>(graph).set_leading(node->inputs()).create()
            : op::Builder<MaxPool2dSlicedOp>(graph).set_leading(node->inputs()).create();
    sliced->output()->setType(node->output()->type());
    sliced->setSourceRange(node->sourceRange());
    sliced->insertBefore(node);
    node->output()->replaceAllUsesWith(sliced->output());
    node->destroy();
  }
  return fused + static_cast<int>(nodes.size());
}

SlicedCounts sliced_counts() {
  return {sliced_convolutions.load(), sliced_poolings.load(), whole_after_check.load(),
          whole_saving_little.load()};
}

}  // namespace memoplan::torch_ext
