// The TorchScript operators of a layout-planned graph (layout_plan.h), each defined once
// (planning/op_descriptor.h): layout_pass.cc makes their nodes, tuned_conv.cc registers and runs
// them. `graph` is the graph's handle in the layout plan; `node` and `conversion` index its
// GraphSpec's nodes and conversions. Torch's IR and ATen types; for tuned/ only.
#pragma once

#include <cstdint>
#include <tuple>

#include "planning/op_descriptor.h"
#include "tuned/conv_fields.h"

namespace memoplan::torch_ext {

// aten::conv2d, with the batch norm after it folded in when its weights are module attributes.
struct Conv2dOp : conv::ConvFields {
  static constexpr const char* kName = "memoplan::conv2d";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input;
  int64_t graph = -1, node = -1;
  int64_t site = -1;  // where the weight's packings live (tuned::new_site)
  // Only a module attribute's weight is prepared (folded, packed) once and kept; a weight computed
  // in the pass runs on aten's convolution.
  bool weight_is_attribute = false;
  static constexpr auto fields() {
    using O = Conv2dOp;
    return std::tuple_cat(
        std::make_tuple(op::field("input", &O::input)), conv::conv_fields<O>(),
        std::make_tuple(op::field("graph", &O::graph), op::field("node", &O::node),
                        op::field("site", &O::site)),
        conv::batch_norm_fields<O>(),
        std::make_tuple(op::field("weight_is_attribute", &O::weight_is_attribute)));
  }
};

// An activation in the layout the plan chose for `conversion`'s edge (NCHW for a use that needs
// it); itself where it has that layout, and anything not 4-d.
struct LayoutOp {
  static constexpr const char* kName = "memoplan::layout";
  static constexpr const char* kReturns = "Tensor(a)";
  at::Tensor self;
  int64_t graph = -1, conversion = -1;
  static constexpr auto fields() {
    using O = LayoutOp;
    return std::make_tuple(op::field("self", &O::self, "Tensor(a)"), op::field("graph", &O::graph),
                           op::field("conversion", &O::conversion));
  }
};

}  // namespace memoplan::torch_ext
