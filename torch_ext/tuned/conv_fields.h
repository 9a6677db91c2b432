// The arguments memoplan::conv2d and memoplan::bconv share (op descriptors: planning/
// op_descriptor.h): aten::conv2d's after its input, then the batch norm fused after the
// convolution. Each op's struct derives from ConvFields and splices conv_fields<Op>() and
// batch_norm_fields<Op>() into its fields() where its schema has them; the graph passes fill them
// from the nodes they replace (set_conv, set_batch_norm), the kernels take them as a conv::Call
// (take_call). Torch's IR and ATen types; for tuned/ only.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "planning/op_descriptor.h"
#include "tuned/conv_weights.h"

namespace memoplan::torch_ext::conv {

struct ConvFields {
  at::Tensor weight;
  c10::optional<at::Tensor> bias;
  Ints stride, padding, dilation;
  int64_t groups = 1;
  // The batch norm fused after the convolution (read only when has_bn).
  c10::optional<at::Tensor> bn_weight, bn_bias, bn_mean, bn_var;
  bool bn_training = false;
  double bn_momentum = 0.0, bn_eps = 0.0;
  bool has_bn = false;
};

// weight, bias, stride, padding, dilation, groups: aten::conv2d's inputs 1-6.
template <class Op>
constexpr auto conv_fields() {
  using F = ConvFields;
  return std::make_tuple(
      op::field<Op, at::Tensor>("weight", &F::weight),
      op::field<Op, c10::optional<at::Tensor>>("bias", &F::bias),
      op::field<Op, Ints>("stride", &F::stride), op::field<Op, Ints>("padding", &F::padding),
      op::field<Op, Ints>("dilation", &F::dilation), op::field<Op, int64_t>("groups", &F::groups));
}

// The batch norm's weight, bias, running mean and variance, training, momentum, eps (its inputs
// 1-7), then has_bn.
template <class Op>
constexpr auto batch_norm_fields() {
  using F = ConvFields;
  using Tensor = c10::optional<at::Tensor>;
  return std::make_tuple(
      op::field<Op, Tensor>("bn_weight", &F::bn_weight),
      op::field<Op, Tensor>("bn_bias", &F::bn_bias), op::field<Op, Tensor>("bn_mean", &F::bn_mean),
      op::field<Op, Tensor>("bn_var", &F::bn_var),
      op::field<Op, bool>("bn_training", &F::bn_training),
      op::field<Op, double>("bn_momentum", &F::bn_momentum),
      op::field<Op, double>("bn_eps", &F::bn_eps), op::field<Op, bool>("has_bn", &F::has_bn));
}

// The call's operands, moved out of `f`.
inline Call take_call(ConvFields&& f) {
  auto tensor = [](c10::optional<at::Tensor>& t) { return t ? std::move(*t) : at::Tensor(); };
  Call c;
  c.weight = std::move(f.weight);
  c.bias = std::move(f.bias);
  c.stride = std::move(f.stride);
  c.padding = std::move(f.padding);
  c.dilation = std::move(f.dilation);
  c.groups = f.groups;
  if (f.has_bn) {
    c.batch_norm = BatchNorm{tensor(f.bn_weight), tensor(f.bn_bias), tensor(f.bn_mean),
                             tensor(f.bn_var), f.bn_eps};
    c.batch_norm_training = f.bn_training;
    c.batch_norm_momentum = f.bn_momentum;
  }
  return c;
}

// weight .. groups from the aten::conv2d node `conv`.
template <class Op>
void set_conv(op::Builder<Op>& b, const torch::jit::Node* conv) {
  b.set(static_cast<at::Tensor Op::*>(&ConvFields::weight), conv->input(1));
  b.set(static_cast<c10::optional<at::Tensor> Op::*>(&ConvFields::bias), conv->input(2));
  b.set(static_cast<Ints Op::*>(&ConvFields::stride), conv->input(3));
  b.set(static_cast<Ints Op::*>(&ConvFields::padding), conv->input(4));
  b.set(static_cast<Ints Op::*>(&ConvFields::dilation), conv->input(5));
  b.set(static_cast<int64_t Op::*>(&ConvFields::groups), conv->input(6));
}

// The batch norm's fields from the aten::batch_norm node `bn`, or (null) constants for none:
// made at the graph's insertion point.
template <class Op>
void set_batch_norm(op::Builder<Op>& b, torch::jit::Graph& graph, const torch::jit::Node* bn) {
  using Tensor = c10::optional<at::Tensor> Op::*;
  const Tensor tensors[] = {&ConvFields::bn_weight, &ConvFields::bn_bias, &ConvFields::bn_mean,
                            &ConvFields::bn_var};
  if (bn) {
    for (size_t i = 0; i < 4; ++i) b.set(tensors[i], bn->input(i + 1));
    b.set(static_cast<bool Op::*>(&ConvFields::bn_training), bn->input(5));
    b.set(static_cast<double Op::*>(&ConvFields::bn_momentum), bn->input(6));
    b.set(static_cast<double Op::*>(&ConvFields::bn_eps), bn->input(7));
  } else {
    torch::jit::Value* none = graph.insertConstant(c10::IValue());
    for (const Tensor t : tensors) b.set(t, none);
    b.constant(static_cast<bool Op::*>(&ConvFields::bn_training), false);
    b.constant(static_cast<double Op::*>(&ConvFields::bn_momentum), 0.0);
    b.constant(static_cast<double Op::*>(&ConvFields::bn_eps), 0.0);
  }
  b.constant(static_cast<bool Op::*>(&ConvFields::has_bn), bn != nullptr);
}

}  // namespace memoplan::torch_ext::conv
