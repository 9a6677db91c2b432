// memoplan::conv2d: aten::conv2d inside a layout-planned graph (layout_plan.h). Its first call
// per input key measures every way to compute it on the real input, in both input layouts: aten's
// convolution on NCHW and on NHWC (channels-last) tensors, and for a pointwise (1x1, stride 1,
// no padding, one group) convolution memoplan's GEMM three ways: NHWC in and out (one product of
// [N*H*W, C] by the weight packed once), NCHW in and NHWC out (per image, the input read
// transposed), NCHW in and out (per image W x X). Those times, plus converting the output, give
// the op's cost for every (input layout, output layout): the layout plan's node costs. Every later
// call takes its input as it comes and produces the layout the plan chose for its output.
#include <ATen/ATen.h>
#include <torch/csrc/jit/runtime/custom_operator.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>

#include "conv_weights.h"
#include "layout_operators.h"
#include "layout_plan.h"
#include "memoplan/kernels/gemm.h"
#include "tuned_support.h"

namespace memoplan::torch_ext {
namespace {

using kernels::Activation;
using kernels::MatrixView;
using layouts::kNchw;
using layouts::kNhwc;
using layouts::Layout;

struct ConvArgs : conv::Call {
  int64_t site = -1;                 // Conv2dOp's
  bool weight_is_attribute = false;  // Conv2dOp's
  // Set per call: the weights to compute with (folded and pre-packed).
  std::shared_ptr<const conv::Weights> prepared;
};

enum Implementation : int {  // kImplementationNames below follows this order
  kAtenNchw,                 // aten's convolution on an NCHW input: NCHW out
  kAtenNhwc,                 // aten's convolution on an NHWC input: NHWC out
  kOnednnPacked,             // oneDNN on the weight packed once, input as it comes: NCHW out
  kGemmNhwc,                 // pointwise: [N*H*W, C] x packed W^T -> NHWC
  kGemmNchwToNhwc,           // pointwise: per image X^T [H*W, C] x packed W^T -> NHWC
  kGemmNchw,                 // pointwise: per image W [O, C] x X [C, H*W] -> NCHW
  kImplementations
};

const char* const kImplementationNames[] = {"aten",      "aten",        "oneDNN packed",
                                            "GEMM NHWC", "GEMM NCHW^T", "GEMM NCHW"};

Layout produces(int implementation) {
  return implementation == kAtenNchw || implementation == kGemmNchw ||
                 implementation == kOnednnPacked
             ? kNchw
             : kNhwc;
}

at::MemoryFormat format(Layout layout) {
  return layout == kNhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

Layout layout_of(const at::Tensor& x) {
  return x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast)
             ? kNhwc
             : kNchw;
}

bool all_equal(c10::ArrayRef<int64_t> values, int64_t expected) {
  return std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == expected; });
}

// A convolution memoplan's GEMM computes: 1x1, stride 1, no padding, one group, float weights it
// may pack, float input.
bool pointwise(const at::Tensor& x, const ConvArgs& a) {
  const at::Tensor& w = a.prepared->weight;
  return x.dim() == 4 && x.scalar_type() == at::kFloat && x.device().is_cpu() && x.numel() > 0 &&
         w.dim() == 4 && w.size(2) == 1 && w.size(3) == 1 && w.is_contiguous() &&
         w.size(1) == x.size(1) && a.groups == 1 && all_equal(a.stride, 1) &&
         all_equal(a.padding, 0) && w.scalar_type() == at::kFloat && w.device().is_cpu() &&
         (!a.prepared->bias || a.prepared->bias->scalar_type() == at::kFloat);
}

// aten's convolution then, unfused, the batch norm: what the graph computed before the pass.
at::Tensor stock(const at::Tensor& x, const ConvArgs& a) {
  at::Tensor y = at::conv2d(x, a.weight, a.bias, a.stride, a.padding, a.dilation, a.groups);
  if (!a.batch_norm) return y;
  const conv::BatchNorm& bn = *a.batch_norm;
  return at::batch_norm(y, bn.weight, bn.bias, bn.mean, bn.var, a.batch_norm_training,
                        a.batch_norm_momentum, bn.eps, false);
}

// aten's convolution on the prepared (folded) weights.
at::Tensor aten_conv(const at::Tensor& x, const ConvArgs& a) {
  return at::conv2d(x, a.prepared->weight, a.prepared->bias, a.stride, a.padding, a.dilation,
                    a.groups);
}

at::Tensor gemm_conv(int implementation, const at::Tensor& x_in, const ConvArgs& a,
                     const kernels::GemmConfig& config) {
  const int64_t n = x_in.size(0), c = x_in.size(1), hw = x_in.size(2) * x_in.size(3);
  const int64_t o = a.prepared->weight.size(0);
  const at::Tensor w2d = a.prepared->weight.view({o, c});
  const c10::optional<at::Tensor>& bias_tensor = a.prepared->bias;
  const float* bias = bias_tensor ? bias_tensor->data_ptr<float>() : nullptr;
  const kernels::ParallelFor parallel = tuned::intra_op_parallel();
  const at::Tensor x = x_in.contiguous(format(implementation == kGemmNhwc ? kNhwc : kNchw));
  at::Tensor out = at::empty({n, o, x.size(2), x.size(3)},
                             x.options().memory_format(format(produces(implementation))));
  const float* px = x.data_ptr<float>();
  float* py = out.data_ptr<float>();
  if (implementation == kGemmNchw) {
    const MatrixView weight{w2d.data_ptr<float>(), o, c, c, 1};
    for (int64_t i = 0; i < n; ++i) {
      kernels::gemm(weight, MatrixView{px + i * c * hw, c, hw, hw, 1}, py + i * o * hw, hw, {},
                    config, parallel);
    }
    if (bias_tensor) out.add_(bias_tensor->view({1, o, 1, 1}));
    return out;
  }
  const auto packed = tuned::packed_weight(a.site, w2d, config.kernel.nr, a.prepared->generation);
  const kernels::Epilogue epilogue{bias, Activation::kNone};
  if (implementation == kGemmNhwc) {
    kernels::gemm(MatrixView{px, n * hw, c, c, 1}, packed->panels, py, o, epilogue, config,
                  parallel);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      kernels::gemm(MatrixView{px + i * c * hw, hw, c, 1, hw}, packed->panels, py + i * hw * o, o,
                    epilogue, config, parallel);
    }
  }
  return out;
}

// The GEMM configuration of each pointwise implementation for this input: the NHWC product is
// tuned (tuned::best_config), the per-image ones take the default.
kernels::GemmConfig config_for(int implementation, const at::Tensor& x, const ConvArgs& a) {
  if (implementation != kGemmNhwc || tuned::choice() != KernelChoice::kMeasure) {
    return kernels::default_config();
  }
  return tuned::best_config(x.size(0) * x.size(2) * x.size(3), x.size(1), a.weight.size(0),
                            Activation::kNone, a.prepared->bias.has_value(), true);
}

at::Tensor run(int implementation, const at::Tensor& x, const ConvArgs& a) {
  if (implementation == kAtenNchw) return aten_conv(x.contiguous(), a);
  if (implementation == kAtenNhwc) {
    return aten_conv(x.contiguous(at::MemoryFormat::ChannelsLast), a);
  }
  if (implementation == kOnednnPacked) {
    return at::mkldnn_convolution(x, a.prepared->onednn_weight, a.prepared->bias, a.padding,
                                  a.stride, a.dilation, a.groups);
  }
  return gemm_conv(implementation, x, a, config_for(implementation, x, a));
}

layouts::ConvCosts measure(const at::Tensor& x, const ConvArgs& a) {
  const at::Tensor inputs[2] = {x.contiguous(), x.contiguous(at::MemoryFormat::ChannelsLast)};
  std::vector<int> candidates{kAtenNchw, kAtenNhwc, kOnednnPacked};
  const KernelChoice choice = tuned::choice();
  if (pointwise(x, a) && choice != KernelChoice::kAlwaysAten) {
    candidates = {kGemmNhwc, kGemmNchwToNhwc, kGemmNchw};
    if (choice == KernelChoice::kMeasure) {
      candidates.insert(candidates.begin(), {kAtenNchw, kAtenNhwc, kOnednnPacked});
    }
  }
  double ms[kImplementations][2];
  for (int impl : candidates) {
    for (int in : {kNchw, kNhwc}) {
      ms[impl][in] = tuned::fastest_ms([&] { run(impl, inputs[in], a); }, 3);
    }
  }
  const at::Tensor out = aten_conv(inputs[0], a);
  const double convert_out =
      tuned::fastest_ms([&] { out.contiguous(at::MemoryFormat::ChannelsLast); }, 3);
  const double convert_in =
      tuned::fastest_ms([&] { inputs[0].contiguous(at::MemoryFormat::ChannelsLast); }, 3);
  layouts::ConvCosts costs;
  costs.convert_ms_per_mib = convert_in / (static_cast<double>(x.nbytes()) / (1 << 20));
  for (int in : {kNchw, kNhwc}) {
    for (int out_layout : {kNchw, kNhwc}) {
      double best = 1e300;
      for (int impl : candidates) {
        const double total = ms[impl][in] + (produces(impl) != out_layout ? convert_out : 0.0);
        if (total < best) {
          best = total;
          costs.implementation[in][out_layout] = impl;
        }
      }
      costs.ms[in][out_layout] = best;
    }
  }
  std::ostringstream summary;
  summary << x.size(1) << "x" << x.size(2) << "x" << x.size(3) << " -> " << a.weight.size(0) << " "
          << a.weight.size(2) << "x" << a.weight.size(3) << " /" << a.groups
          << (a.batch_norm ? " +bn" : "") << ":";
  for (int impl : candidates) {
    summary << " " << kImplementationNames[impl]
            << (impl == kOnednnPacked || impl >= kGemmNhwc
                    ? ""
                    : (impl == kAtenNchw ? " NCHW" : " NHWC"))
            << " " << ms[impl][kNchw] << "/" << ms[impl][kNhwc] << " ms";
  }
  costs.summary = summary.str();
  return costs;
}

// What may be folded and run on memoplan's paths: float CPU tensors, no autograd, a batch norm in
// eval mode with running statistics.
bool supported(const at::Tensor& x, const ConvArgs& a) {
  if (x.dim() != 4 || x.scalar_type() != at::kFloat || !x.device().is_cpu() || x.numel() == 0 ||
      a.weight.scalar_type() != at::kFloat || a.weight.dim() != 4) {
    return false;
  }
  if (at::GradMode::is_enabled() && (x.requires_grad() || a.weight.requires_grad())) return false;
  if (!a.batch_norm) return true;
  const conv::BatchNorm& bn = *a.batch_norm;
  return !a.batch_norm_training && bn.mean.defined() && bn.var.defined() &&
         !(at::GradMode::is_enabled() && bn.weight.defined() && bn.weight.requires_grad());
}

at::Tensor conv2d(const at::Tensor& x, ConvArgs& a, int64_t graph, int64_t node) {
  const int index = static_cast<int>(node);
  if (!supported(x, a) || !a.weight_is_attribute) {
    tuned::count(false);
    at::Tensor y = stock(x, a);
    // Still the layout the plan gave the output (the plan has no measurements for this one).
    const int edge = layouts::graph_spec(graph).nodes.at(static_cast<size_t>(index)).output;
    const auto decision = layouts::decision(graph, false);
    if (!decision || edge < 0 || y.dim() != 4) return y;
    const Layout out_layout = decision->edge_layouts.at(edge);
    return layout_of(y) == out_layout ? y : y.contiguous(format(out_layout));
  }
  a.prepared = conv::weights(a.site, a.weight, a.bias, a.batch_norm ? &*a.batch_norm : nullptr,
                             {a.stride, a.padding, a.dilation, a.groups});
  const layouts::ConvView& view = layouts::conv_view(graph, index);
  const layouts::ConvCosts* costs = view.costs;
  const auto& decision = view.decision;
  if (!costs && !decision) {
    layouts::record_conv(graph, index, measure(x, a));
    costs = layouts::conv_costs(graph, index);
  }
  const int output_edge = view.output_edge;
  const Layout out_layout =
      decision && output_edge >= 0 ? decision->edge_layouts.at(output_edge) : kNchw;
  const Layout in_layout = layout_of(x);
  int implementation = in_layout == kNhwc ? kAtenNhwc : kAtenNchw;
  if (costs) implementation = costs->implementation[in_layout][out_layout];
  at::Tensor y = run(implementation, x, a);
  tuned::count(implementation >= kGemmNhwc);
  return produces(implementation) == out_layout ? y : y.contiguous(format(out_layout));
}

at::Tensor conv2d_op(Conv2dOp op) {
  ConvArgs a;
  a.site = op.site;
  a.weight_is_attribute = op.weight_is_attribute;
  static_cast<conv::Call&>(a) = conv::take_call(std::move(op));  // its convolution's fields
  return conv2d(op.input, a, op.graph, op.node);
}

at::Tensor layout_op(LayoutOp op) {
  at::Tensor x = std::move(op.self);
  if (x.dim() != 4) return x;
  const auto decision = layouts::decision(op.graph, false);
  const int edge =
      layouts::graph_spec(op.graph).conversions.at(static_cast<size_t>(op.conversion)).edge;
  if (!decision) {
    layouts::record_conversion_bytes(op.graph, static_cast<int>(op.conversion), x.nbytes());
  }
  const Layout target = decision && edge >= 0 ? decision->edge_layouts.at(edge) : kNchw;
  if (target == kNhwc && !x.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    return x.contiguous(at::MemoryFormat::ChannelsLast);
  }
  if (target == kNchw && layout_of(x) == kNhwc) return x.contiguous();
  return x;
}

torch::jit::RegisterOperators conv_operators({
    op::make_operator<Conv2dOp, &conv2d_op>(),
    op::make_operator<LayoutOp, &layout_op>(),
});

}  // namespace

}  // namespace memoplan::torch_ext
