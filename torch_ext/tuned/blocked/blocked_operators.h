// The TorchScript operators of the blocked region, each defined once (planning/op_descriptor.h):
// blocked_pass.cc makes their nodes, blocked_operators.cc registers them and runs them on
// blocked_ops.cc. `graph` is the region's handle in the layout plan (layout_plan.h); `node` and
// `conversion` index its GraphSpec's nodes and conversions. A post-op chain is three lists of one
// length: onednn::PostOp's kinds, alphas and betas. Torch's IR and ATen types; for blocked/ only.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "planning/op_descriptor.h"
#include "tuned/conv_fields.h"

namespace memoplan::torch_ext::blocked {

// aten::conv2d with what follows it fused: the batch norm (folded), the post-ops, a residual
// addition (kResidualAdd among the post-ops adds `residual`).
struct BconvOp : conv::ConvFields {
  static constexpr const char* kName = "memoplan::bconv";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input;
  int64_t site = -1;  // where its packed weights live (tuned::new_site)
  int64_t graph = -1;
  op::Ints post_kinds;
  op::Floats post_alpha, post_beta;
  c10::optional<at::Tensor> residual;
  int64_t node = -1;
  int64_t residual_conversion = -1;  // the residual's conversion; -1 without one
  static constexpr auto fields() {
    using O = BconvOp;
    return std::tuple_cat(
        std::make_tuple(op::field("input", &O::input)), conv::conv_fields<O>(),
        std::make_tuple(op::field("site", &O::site)), conv::batch_norm_fields<O>(),
        std::make_tuple(op::field("graph", &O::graph), op::field("post_kinds", &O::post_kinds),
                        op::field("post_alpha", &O::post_alpha),
                        op::field("post_beta", &O::post_beta), op::field("residual", &O::residual),
                        op::field("node", &O::node),
                        op::field("residual_conversion", &O::residual_conversion)));
  }
};

// A chain of elementwise ops, on the input's layout.
struct BeltwiseOp {
  static constexpr const char* kName = "memoplan::beltwise";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input;
  op::Ints kinds;
  op::Floats alpha, beta;
  static constexpr auto fields() {
    using O = BeltwiseOp;
    return std::make_tuple(op::field("input", &O::input), op::field("kinds", &O::kinds),
                           op::field("alpha", &O::alpha), op::field("beta", &O::beta));
  }
};

// max_pool2d (avg false) or avg_pool2d, on the input's layout.
struct BpoolOp {
  static constexpr const char* kName = "memoplan::bpool";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input;
  bool avg = false;
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode = false, count_include_pad = true;
  static constexpr auto fields() {
    using O = BpoolOp;
    return std::make_tuple(op::field("input", &O::input), op::field("avg", &O::avg),
                           op::field("kernel", &O::kernel), op::field("stride", &O::stride),
                           op::field("padding", &O::padding), op::field("dilation", &O::dilation),
                           op::field("ceil_mode", &O::ceil_mode),
                           op::field("count_include_pad", &O::count_include_pad));
  }
};

struct BadaptiveAvgPoolOp {
  static constexpr const char* kName = "memoplan::badaptive_avg_pool";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input;
  std::vector<int64_t> output_size;
  static constexpr auto fields() {
    using O = BadaptiveAvgPoolOp;
    return std::make_tuple(op::field("input", &O::input),
                           op::field("output_size", &O::output_size));
  }
};

// aten::batch_norm (not after a convolution: DenseNet's, on a concatenation), then the post-ops,
// on the input's layout.
struct BnormOp {
  static constexpr const char* kName = "memoplan::bnorm";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor input;
  c10::optional<at::Tensor> weight, bias, running_mean, running_var;
  bool training = false;
  double momentum = 0.1, eps = 1e-5;
  op::Ints post_kinds;
  op::Floats post_alpha, post_beta;
  static constexpr auto fields() {
    using O = BnormOp;
    return std::make_tuple(
        op::field("input", &O::input), op::field("weight", &O::weight), op::field("bias", &O::bias),
        op::field("running_mean", &O::running_mean), op::field("running_var", &O::running_var),
        op::field("training", &O::training), op::field("momentum", &O::momentum),
        op::field("eps", &O::eps), op::field("post_kinds", &O::post_kinds),
        op::field("post_alpha", &O::post_alpha), op::field("post_beta", &O::post_beta));
  }
};

// a (kind) b, then the post-ops; operand i is conversion `conversion` + i, to the result's edge.
struct BbinaryOp {
  static constexpr const char* kName = "memoplan::bbinary";
  static constexpr const char* kReturns = "Tensor";
  at::Tensor a, b;
  int64_t kind = 0;  // onednn::BinaryKind
  op::Ints post_kinds;
  op::Floats post_alpha, post_beta;
  int64_t graph = -1, conversion = -1;
  static constexpr auto fields() {
    using O = BbinaryOp;
    return std::make_tuple(op::field("a", &O::a), op::field("b", &O::b),
                           op::field("kind", &O::kind), op::field("post_kinds", &O::post_kinds),
                           op::field("post_alpha", &O::post_alpha),
                           op::field("post_beta", &O::post_beta), op::field("graph", &O::graph),
                           op::field("conversion", &O::conversion));
  }
};

// aten::cat of activations along the channels, then with `groups` > 1 ShuffleNet's channel
// shuffle of the result (x.view(N, groups, C / groups, H, W).transpose(1, 2).contiguous()
// .view(N, -1, H, W)); operand i is conversion `conversion` + i, to the result's edge.
struct BcatOp {
  static constexpr const char* kName = "memoplan::bcat";
  static constexpr const char* kReturns = "Tensor";
  c10::List<at::Tensor> tensors;
  int64_t groups = 1;
  int64_t graph = -1, conversion = -1;
  static constexpr auto fields() {
    using O = BcatOp;
    return std::make_tuple(op::field("tensors", &O::tensors), op::field("groups", &O::groups),
                           op::field("graph", &O::graph), op::field("conversion", &O::conversion));
  }
};

// memoplan::bcat (groups 1) and then the memoplan::bnorm that is its only reader, in one gather
// (DenseNet's norm1 and relu1 of each concatenation); operand i is conversion `conversion` + i.
struct BcatNormOp {
  static constexpr const char* kName = "memoplan::bcat_norm";
  static constexpr const char* kReturns = "Tensor";
  c10::List<at::Tensor> tensors;
  c10::optional<at::Tensor> weight, bias, running_mean, running_var;
  bool training = false;
  double momentum = 0.1, eps = 1e-5;
  op::Ints post_kinds;
  op::Floats post_alpha, post_beta;
  int64_t graph = -1, conversion = -1;
  static constexpr auto fields() {
    using O = BcatNormOp;
    return std::make_tuple(op::field("tensors", &O::tensors), op::field("weight", &O::weight),
                           op::field("bias", &O::bias), op::field("running_mean", &O::running_mean),
                           op::field("running_var", &O::running_var),
                           op::field("training", &O::training), op::field("momentum", &O::momentum),
                           op::field("eps", &O::eps), op::field("post_kinds", &O::post_kinds),
                           op::field("post_alpha", &O::post_alpha),
                           op::field("post_beta", &O::post_beta), op::field("graph", &O::graph),
                           op::field("conversion", &O::conversion));
  }
};

// aten::chunk(self, chunks, 1), each chunk a new activation on self's layout.
struct BchunkOp {
  static constexpr const char* kName = "memoplan::bchunk";
  static constexpr const char* kReturns = "Tensor[]";
  at::Tensor self;
  int64_t chunks = 1;
  static constexpr auto fields() {
    using O = BchunkOp;
    return std::make_tuple(op::field("self", &O::self), op::field("chunks", &O::chunks));
  }
};

// `self` in the layout the plan chose for `conversion`'s edge (NCHW for a use outside the
// region); `self` itself where it has that layout.
struct BlayoutOp {
  static constexpr const char* kName = "memoplan::blayout";
  static constexpr const char* kReturns = "Tensor(a)";
  at::Tensor self;
  int64_t graph = -1, conversion = -1;
  static constexpr auto fields() {
    using O = BlayoutOp;
    return std::make_tuple(op::field("self", &O::self, "Tensor(a)"), op::field("graph", &O::graph),
                           op::field("conversion", &O::conversion));
  }
};

// After a use outside the region wrote into `values`, the converted copy of `self`: written back.
struct BlayoutBackOp {
  static constexpr const char* kName = "memoplan::blayout_back_";
  static constexpr const char* kReturns = "Tensor(a!)";
  at::Tensor self, values;
  static constexpr auto fields() {
    using O = BlayoutBackOp;
    return std::make_tuple(op::field("self", &O::self, "Tensor(a!)"),
                           op::field("values", &O::values));
  }
};

}  // namespace memoplan::torch_ext::blocked
