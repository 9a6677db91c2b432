// The convolution and pooling operators computed in parts, each defined once
// (planning/op_descriptor.h): memoplan::conv2d_sliced and max_pool2d_sliced (sliced_ops.cc makes
// and runs them), and the budget's memoplan::budget_conv2d (budget/ makes and runs it) with
// budget_conv2d_min, which sliced_ops.cc puts in its place under memory "min": defined here,
// below both rooms. Each takes aten's operator's arguments first, in its order. Torch's IR and
// ATen types.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "memory_min/sliced_conv.h"
#include "planning/op_descriptor.h"

namespace memoplan::torch_ext {

// aten::conv2d's seven arguments, as ConvArgs holds them.
template <class Op>
constexpr auto conv2d_fields() {
  using C = ConvArgs;
  using Ints = std::vector<int64_t>;
  return std::make_tuple(
      op::field<Op, at::Tensor>("input", &C::input),
      op::field<Op, at::Tensor>("weight", &C::weight),
      op::field<Op, c10::optional<at::Tensor>>("bias", &C::bias),
      op::field<Op, Ints>("stride", &C::stride), op::field<Op, Ints>("padding", &C::padding),
      op::field<Op, Ints>("dilation", &C::dilation), op::field<Op, int64_t>("groups", &C::groups));
}

struct Conv2dSlicedOp : ConvArgs {
  static constexpr const char* kName = "memoplan::conv2d_sliced";
  static constexpr const char* kReturns = "Tensor";
  static constexpr auto fields() { return conv2d_fields<Conv2dSlicedOp>(); }
};

// aten::max_pool2d's arguments.
struct MaxPool2dSlicedOp {
  static constexpr const char* kName = "memoplan::max_pool2d_sliced";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor self;
  std::vector<int64_t> kernel_size, stride, padding, dilation;
  bool ceil_mode = false;
  static constexpr auto fields() {
    using O = MaxPool2dSlicedOp;
    return std::make_tuple(op::field("self", &O::self), op::field("kernel_size", &O::kernel_size),
                           op::field("stride", &O::stride), op::field("padding", &O::padding),
                           op::field("dilation", &O::dilation),
                           op::field("ceil_mode", &O::ceil_mode));
  }
};

// aten::conv2d under a memory budget: `module`'s budget plan says how it is sliced.
struct BudgetConv2dOp : ConvArgs {
  static constexpr const char* kName = "memoplan::budget_conv2d";
  static constexpr const char* kReturns = "Tensor";
  int64_t module = -1;
  static constexpr auto fields() {
    using O = BudgetConv2dOp;
    return std::tuple_cat(conv2d_fields<O>(), std::make_tuple(op::field("module", &O::module)));
  }
};

// The same under memory "min": what the budget does not slice runs in memory min's parts. Its
// fields are budget_conv2d's.
struct BudgetConv2dMinOp : BudgetConv2dOp {
  static constexpr const char* kName = "memoplan::budget_conv2d_min";
};

}  // namespace memoplan::torch_ext
