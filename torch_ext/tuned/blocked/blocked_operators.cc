// The TorchScript operators of the blocked region (blocked_pass.cc puts them in the graph):
// memoplan::bconv, beltwise, bpool, badaptive_avg_pool, bbinary, bnorm, bcat, bcat_norm, bchunk,
// and memoplan::blayout, the conversion the layout plan prices (in front of a use outside the
// region: NCHW; at the end of an If's branch: the If's layout), with blayout_back_ after a use that
// wrote into its copy. Each activation of the region is in the layout the plan chose for it
// (layout_plan.h; blocked while the first pass measures): here the ops learn it, record what the
// plan weighs (each convolution's measurement, each conversion's bytes) and call blocked_ops.cc,
// simple_ops.cc and channel_ops.cc.
#include <torch/csrc/jit/runtime/custom_operator.h>

#include "blocked.h"
#include "blocked_operators.h"
#include "blocked_tensor.h"
#include "memoplan/onednn/onednn.h"
#include "tuned/layout_plan.h"

namespace memoplan::torch_ext::blocked {

using onednn::Format;
using onednn::PostOp;

namespace {

// The post-op chain from its three lists (blocked_rewriter.h's set_post_ops), in an Ops.
template <class Ops = std::vector<PostOp>>
Ops post_ops(c10::ArrayRef<int64_t> kinds, c10::ArrayRef<double> alpha,
             c10::ArrayRef<double> beta) {
  TORCH_CHECK(alpha.size() == kinds.size() && beta.size() == kinds.size(),
              "memoplan: a post-op chain's lists differ in length");
  Ops ops;
  for (size_t i = 0; i < kinds.size(); ++i) {
    ops.push_back(
        {static_cast<int>(kinds[i]), static_cast<float>(alpha[i]), static_cast<float>(beta[i])});
  }
  return ops;
}

// The plan's layout for edge `edge` of `graph` (the spec's default while the first pass
// measures); NCHW for -1 (a use outside the region).
Format planned(int64_t graph, int edge, const layouts::Decision* decision) {
  if (edge < 0) return Format::kNchw;
  if (decision) return static_cast<Format>(decision->edge_layouts.at(static_cast<size_t>(edge)));
  return static_cast<Format>(layouts::graph_spec(graph).default_layout);
}

// memoplan::bconv: measures its layouts in the first pass, then runs with the output in the
// layout the plan gave it.
at::Tensor planned_conv(const at::Tensor& x, ConvArgs& a, int64_t graph, int node,
                        int residual_conversion) {
  const layouts::ConvView& view = layouts::conv_view(graph, node);
  const layouts::ConvCosts* costs = view.costs;
  const auto& decision = view.decision;
  if (!decision) {
    if (!costs && onednn_may_run(x, a)) layouts::record_conv(graph, node, measure(x, a));
    if (a.residual && residual_conversion >= 0) {
      layouts::record_conversion_bytes(graph, residual_conversion, a.residual->nbytes());
    }
  }
  const Format out = planned(graph, view.output_edge, decision.get());
  if (!costs || !onednn_may_run(x, a)) {
    a.output = out;
    a.transient_packing = !decision && !costs;  // measured: the plan may read another packing
    return conv(x, a);
  }
  // The primitive the measurement found cheapest for this pair, with the conversions around it
  // (none where the layouts agree: conv() gives its result in a.output's).
  const at::Tensor input = dense(x, "bconv");
  const Format in = format_of(input);
  const int implementation = costs->implementation[static_cast<int>(in)][static_cast<int>(out)];
  const auto reads = static_cast<Format>(implementation / onednn::kFormats);
  a.output = static_cast<Format>(implementation % onednn::kFormats);
  const at::Tensor y = conv(reads == in ? input : convert(input, reads), a);
  return a.output == out ? y : convert(y, out);
}

// Records the bytes of a conversion the plan prices (first pass only) and answers its target.
Format conversion_target(int64_t graph, int64_t conversion, const at::Tensor& x) {
  const auto decision = layouts::decision(graph, false);
  if (!decision) {
    layouts::record_conversion_bytes(graph, static_cast<int>(conversion), x.nbytes());
  }
  const int edge = layouts::graph_spec(graph).conversions.at(static_cast<size_t>(conversion)).edge;
  return planned(graph, edge, decision.get());
}

at::Tensor bconv(BconvOp op) {
  ConvArgs a;
  a.site = op.site;
  a.post = post_ops<decltype(a.post)>(op.post_kinds, op.post_alpha, op.post_beta);
  a.residual = std::move(op.residual);
  static_cast<conv::Call&>(a) = conv::take_call(std::move(op));
  return planned_conv(op.input, a, op.graph, static_cast<int>(op.node),
                      static_cast<int>(op.residual_conversion));
}

at::Tensor beltwise(BeltwiseOp op) {
  return eltwise(op.input, post_ops(op.kinds, op.alpha, op.beta));
}

at::Tensor bpool(BpoolOp op) {
  const PoolArgs a{op.avg,
                   std::move(op.kernel),
                   std::move(op.stride),
                   std::move(op.padding),
                   std::move(op.dilation),
                   op.ceil_mode,
                   op.count_include_pad};
  return pool(op.input, a);
}

at::Tensor badaptive_avg_pool(BadaptiveAvgPoolOp op) {
  return adaptive_avg_pool(op.input, op.output_size);
}

at::Tensor bbinary(BbinaryOp op) {
  const std::vector<PostOp> post = post_ops(op.post_kinds, op.post_alpha, op.post_beta);
  conversion_target(op.graph, op.conversion + 1, op.b);
  return binary(op.a, op.b, static_cast<onednn::BinaryKind>(op.kind), post,
                conversion_target(op.graph, op.conversion, op.a));
}

// The batch norm's operands of bnorm and bcat_norm.
template <class Op>
BatchNormArgs batch_norm_args(Op& op) {
  auto take = [](c10::optional<at::Tensor>& t) { return t ? std::move(*t) : at::Tensor(); };
  BatchNormArgs a;
  a.weight = take(op.weight);
  a.bias = take(op.bias);
  a.mean = take(op.running_mean);
  a.var = take(op.running_var);
  a.training = op.training;
  a.momentum = op.momentum;
  a.eps = op.eps;
  return a;
}

at::Tensor bnorm(BnormOp op) {
  return batch_norm(op.input, batch_norm_args(op),
                    post_ops(op.post_kinds, op.post_alpha, op.post_beta));
}

// A concatenation's operands, each conversion after the first recorded; the result's layout.
Format joined_layout(const std::vector<at::Tensor>& xs, int64_t graph, int64_t conversion) {
  for (size_t i = 1; i < xs.size(); ++i) {
    conversion_target(graph, conversion + static_cast<int64_t>(i), xs[i]);
  }
  return conversion_target(graph, conversion, xs.at(0));
}

at::Tensor bcat(BcatOp op) {
  std::vector<at::Tensor> xs(op.tensors.begin(), op.tensors.end());
  return cat_channels(xs, op.groups, joined_layout(xs, op.graph, op.conversion));
}

at::Tensor bcat_norm(BcatNormOp op) {
  std::vector<at::Tensor> xs(op.tensors.begin(), op.tensors.end());
  return cat_norm(xs, batch_norm_args(op), post_ops(op.post_kinds, op.post_alpha, op.post_beta),
                  joined_layout(xs, op.graph, op.conversion));
}

c10::List<at::Tensor> bchunk(BchunkOp op) { return chunk_channels(op.self, op.chunks); }

at::Tensor blayout(BlayoutOp op) {
  return convert(op.self, conversion_target(op.graph, op.conversion, op.self));
}

at::Tensor blayout_back(BlayoutBackOp op) { return write_into(op.self, op.values); }

torch::jit::RegisterOperators blocked_operators({
    op::make_operator<BconvOp, &bconv>(),
    op::make_operator<BeltwiseOp, &beltwise>(),
    op::make_operator<BpoolOp, &bpool>(),
    op::make_operator<BadaptiveAvgPoolOp, &badaptive_avg_pool>(),
    op::make_operator<BbinaryOp, &bbinary>(),
    op::make_operator<BnormOp, &bnorm>(),
    op::make_operator<BcatOp, &bcat>(),
    op::make_operator<BcatNormOp, &bcat_norm>(),
    op::make_operator<BchunkOp, &bchunk>(),
    op::make_operator<BlayoutOp, &blayout>(),
    op::make_operator<BlayoutBackOp, &blayout_back>(),
});

}  // namespace

}  // namespace memoplan::torch_ext::blocked
