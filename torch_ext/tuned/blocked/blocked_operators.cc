// The TorchScript operators of the blocked region (blocked_pass.cc puts them in the graph):
// memoplan::bconv, beltwise, bpool, badaptive_avg_pool, bbinary, and memoplan::blayout, the
// conversion the layout plan prices (in front of a use outside the region: NCHW; at the end of an
// If's branch: the If's layout), with blayout_back_ after a use that wrote into its copy. Each
// activation of the region is in the layout the plan chose for it (layout_plan.h; blocked while
// the first pass measures): here the ops learn it, record what the plan weighs (each
// convolution's measurement, each conversion's bytes) and call blocked_ops.cc.
#include <torch/csrc/jit/runtime/custom_operator.h>

#include "blocked.h"
#include "blocked_tensor.h"
#include "memoplan/onednn/onednn.h"
#include "planning/op_record.h"
#include "tuned/layout_plan.h"

namespace memoplan::torch_ext::blocked {

using onednn::Format;
using onednn::PostOp;

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
  const layouts::ConvCosts* costs = layouts::conv_costs(graph, node);
  const auto decision = layouts::decision(graph, costs != nullptr);
  const layouts::GraphSpec::Node& spec_node =
      layouts::graph_spec(graph).nodes.at(static_cast<size_t>(node));
  if (!decision) {
    if (!costs && onednn_may_run(x, a)) layouts::record_conv(graph, node, measure(x, a));
    if (a.residual && residual_conversion >= 0) {
      layouts::record_conversion_bytes(graph, residual_conversion, a.residual->nbytes());
    }
  }
  const Format out = planned(graph, spec_node.output, decision.get());
  if (!costs || !onednn_may_run(x, a)) {
    a.output = out;
    return conv(x, a);
  }
  // The primitive the measurement found cheapest for this pair, with the conversions around it.
  const int in = static_cast<int>(format_of(dense(x, "bconv")));
  const int implementation = costs->implementation[in][static_cast<int>(out)];
  const auto reads = static_cast<Format>(implementation / onednn::kFormats);
  a.output = static_cast<Format>(implementation % onednn::kFormats);
  return convert(conv(convert(x, reads), a), out);
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

torch::jit::RegisterOperators blocked_operators({
    recorded_operator(
        "memoplan::bconv(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, "
        "int[] dilation, int groups, int site, Tensor? bn_weight, Tensor? bn_bias, "
        "Tensor? bn_mean, Tensor? bn_var, bool bn_training, float bn_momentum, float bn_eps, "
        "bool has_bn, int graph, int[] post_kinds, float[] post_alpha, float[] post_beta, "
        "Tensor? residual, int node, int residual_conversion) -> Tensor",
        [](torch::jit::Stack& stack) {
          constexpr size_t kArgs = 23;
          const c10::IValue* args = &stack[stack.size() - kArgs];
          ConvArgs a;
          static_cast<conv::Call&>(a) = conv::read_call(args, 8);
          a.site = args[7].toInt();
          const int64_t graph = args[16].toInt();
          a.post = post_ops(args[17], args[18], args[19]);
          if (!args[20].isNone()) a.residual = args[20].toTensor();
          const int node = static_cast<int>(args[21].toInt());
          const int residual_conversion = static_cast<int>(args[22].toInt());
          const at::Tensor x = args[0].toTensor();
          torch::jit::drop(stack, kArgs);
          stack.emplace_back(planned_conv(x, a, graph, node, residual_conversion));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    recorded_operator(
        "memoplan::beltwise(Tensor input, int[] kinds, float[] alpha, float[] beta) -> Tensor",
        [](torch::jit::Stack& stack) {
          const std::vector<PostOp> chain =
              post_ops(stack[stack.size() - 3], stack[stack.size() - 2], stack.back());
          const at::Tensor x = stack[stack.size() - 4].toTensor();
          torch::jit::drop(stack, 4);
          stack.emplace_back(eltwise(x, chain));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    recorded_operator(
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
    recorded_operator(
        "memoplan::badaptive_avg_pool(Tensor input, int[] output_size) -> Tensor",
        [](torch::jit::Stack& stack) {
          const std::vector<int64_t> size = stack.back().toIntVector();
          const at::Tensor x = stack[stack.size() - 2].toTensor();
          torch::jit::drop(stack, 2);
          stack.emplace_back(adaptive_avg_pool(x, size));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    recorded_operator(
        "memoplan::bbinary(Tensor a, Tensor b, int kind, int[] post_kinds, float[] post_alpha, "
        "float[] post_beta, int graph, int conversion) -> Tensor",
        [](torch::jit::Stack& stack) {
          // Operand i is conversion `conversion` + i, to the result's edge.
          const c10::IValue* args = &stack[stack.size() - 8];
          const auto kind = static_cast<onednn::BinaryKind>(args[2].toInt());
          const std::vector<PostOp> post = post_ops(args[3], args[4], args[5]);
          const at::Tensor a = args[0].toTensor(), b = args[1].toTensor();
          const int64_t graph = args[6].toInt(), conversion = args[7].toInt();
          torch::jit::drop(stack, 8);
          conversion_target(graph, conversion + 1, b);
          stack.emplace_back(binary(a, b, kind, post, conversion_target(graph, conversion, a)));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    // Converts to the layout the plan chose for `conversion`'s edge (NCHW for a use outside the
    // region); the input itself where it has that layout.
    recorded_operator(
        "memoplan::blayout(Tensor(a) self, int graph, int conversion) -> Tensor(a)",
        [](torch::jit::Stack& stack) {
          const int64_t conversion = stack.back().toInt();
          const int64_t graph = stack[stack.size() - 2].toInt();
          const at::Tensor x = stack[stack.size() - 3].toTensor();
          torch::jit::drop(stack, 3);
          stack.emplace_back(convert(x, conversion_target(graph, conversion, x)));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
    // After an op outside the region wrote into the converted copy of an activation.
    recorded_operator(
        "memoplan::blayout_back_(Tensor(a!) self, Tensor values) -> Tensor(a!)",
        [](torch::jit::Stack& stack) {
          const at::Tensor values = stack.back().toTensor();
          at::Tensor target = stack[stack.size() - 2].toTensor();
          torch::jit::drop(stack, 2);
          stack.emplace_back(write_into(target, values));
        },
        c10::AliasAnalysisKind::FROM_SCHEMA),
});

}  // namespace

}  // namespace memoplan::torch_ext::blocked
