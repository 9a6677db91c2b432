// memory min's dense-layer bottleneck operators (bn_relu_conv1x1.h), each defined once
// (planning/op_descriptor.h): memoplan::bn_relu_conv1x1(input, ...) and
// memoplan::cat_bn_relu_conv1x1(tensors, dim, ...), the batch norm's arguments after its input,
// then aten::conv2d's after its input. bn_relu_conv1x1_pass.cc makes them (set_bn_conv),
// bn_relu_conv1x1.cc runs them, sharing_pass.cc reads the concatenation's list. Torch's IR and
// ATen types.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "planning/op_descriptor.h"

namespace memoplan::torch_ext {

struct BnReluConvFields {
  c10::optional<at::Tensor> bn_weight, bn_bias, running_mean, running_var;
  bool training = false;
  double momentum = 0.1, eps = 1e-5;
  bool cudnn_enabled = false;
  at::Tensor weight;
  c10::optional<at::Tensor> bias;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};

template <class Op>
constexpr auto bn_relu_conv_fields() {
  using F = BnReluConvFields;
  using Tensor = c10::optional<at::Tensor>;
  using Ints = std::vector<int64_t>;
  return std::make_tuple(
      op::field<Op, Tensor>("bn_weight", &F::bn_weight),
      op::field<Op, Tensor>("bn_bias", &F::bn_bias),
      op::field<Op, Tensor>("running_mean", &F::running_mean),
      op::field<Op, Tensor>("running_var", &F::running_var),
      op::field<Op, bool>("training", &F::training),
      op::field<Op, double>("momentum", &F::momentum), op::field<Op, double>("eps", &F::eps),
      op::field<Op, bool>("cudnn_enabled", &F::cudnn_enabled),
      op::field<Op, at::Tensor>("weight", &F::weight), op::field<Op, Tensor>("bias", &F::bias),
      op::field<Op, Ints>("stride", &F::stride), op::field<Op, Ints>("padding", &F::padding),
      op::field<Op, Ints>("dilation", &F::dilation), op::field<Op, int64_t>("groups", &F::groups));
}

struct BnReluConv1x1Op : BnReluConvFields {
  static constexpr const char* kName = "memoplan::bn_relu_conv1x1";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input;
  static constexpr auto fields() {
    using O = BnReluConv1x1Op;
    return std::tuple_cat(std::make_tuple(op::field("input", &O::input)), bn_relu_conv_fields<O>());
  }
};

// The batch norm's input is the concatenation of `tensors` along `dim`.
struct CatBnReluConv1x1Op : BnReluConvFields {
  static constexpr const char* kName = "memoplan::cat_bn_relu_conv1x1";
  static constexpr const char* kReturns = "Tensor";
  c10::List<at::Tensor> tensors;
  int64_t dim = 1;
  static constexpr auto fields() {
    using O = CatBnReluConv1x1Op;
    return std::tuple_cat(
        std::make_tuple(op::field("tensors", &O::tensors), op::field("dim", &O::dim)),
        bn_relu_conv_fields<O>());
  }
};

// The fields after the batch norm's input: from the aten::batch_norm node `bn` and the
// aten::conv2d node `conv`.
template <class Op>
void set_bn_conv(op::Builder<Op>& b, const torch::jit::Node* bn, const torch::jit::Node* conv) {
  using F = BnReluConvFields;
  using Tensor = c10::optional<at::Tensor> Op::*;
  using Ints = std::vector<int64_t> Op::*;
  b.set(static_cast<Tensor>(&F::bn_weight), bn->input(1));
  b.set(static_cast<Tensor>(&F::bn_bias), bn->input(2));
  b.set(static_cast<Tensor>(&F::running_mean), bn->input(3));
  b.set(static_cast<Tensor>(&F::running_var), bn->input(4));
  b.set(static_cast<bool Op::*>(&F::training), bn->input(5));
  b.set(static_cast<double Op::*>(&F::momentum), bn->input(6));
  b.set(static_cast<double Op::*>(&F::eps), bn->input(7));
  b.set(static_cast<bool Op::*>(&F::cudnn_enabled), bn->input(8));
  b.set(static_cast<at::Tensor Op::*>(&F::weight), conv->input(1));
  b.set(static_cast<Tensor>(&F::bias), conv->input(2));
  b.set(static_cast<Ints>(&F::stride), conv->input(3));
  b.set(static_cast<Ints>(&F::padding), conv->input(4));
  b.set(static_cast<Ints>(&F::dilation), conv->input(5));
  b.set(static_cast<int64_t Op::*>(&F::groups), conv->input(6));
}

}  // namespace memoplan::torch_ext
