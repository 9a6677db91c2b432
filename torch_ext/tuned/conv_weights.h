// The weights one convolution site computes with, prepared once and again only when a source
// tensor changes (its storage or version counter): the batch norm that follows the convolution
// folded into its weight and bias (eval mode: w' = w * gamma / sqrt(var + eps),
// b' = (b - mean) * gamma / sqrt(var + eps) + beta), and that weight pre-packed for oneDNN, which
// aten's convolution otherwise re-packs on every call. Made outside the slab
// (runtime_pass::OffPlan): they outlive the pass. ATen types; for tuned_conv.cc.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "weight_cache.h"  // tuned::Sources

namespace memoplan::torch_ext::conv {

// An eval-mode batch norm folded into the convolution before it (all four tensors defined but the
// affine pair, which may be undefined).
struct BatchNorm {
  at::Tensor weight, bias, mean, var;
  double eps = 1e-5;
};

// A convolution's strides, paddings, dilations: op::Ints (planning/op_descriptor.h), read off the
// interpreter's stack with no allocation.
using Ints = c10::SmallVector<int64_t, 4>;

struct Geometry {
  Ints stride, padding, dilation;
  int64_t groups = 1;
};

struct Weights {
  at::Tensor weight;               // folded when there is a batch norm, else the convolution's own
                                   // (undefined for Keep::kPackingsOnly with a batch norm)
  c10::optional<at::Tensor> bias;  // likewise
  at::Tensor onednn_weight;        // `weight` in oneDNN's blocked layout for this geometry (aten's
                                   // packing: undefined for the blocked path, which packs its own)
  int64_t generation = 0;          // unique per preparation: what packings of `weight` key on
  bool folded_copy = false;        // `weight` is a folded copy, not the convolution's own
};

// What a convolution op of the tuned graph computes, shared by memoplan::conv2d and
// memoplan::bconv: aten::conv2d's operands and the batch norm folded in (from their arguments:
// conv_fields.h's take_call).
struct Call {
  at::Tensor weight;
  c10::optional<at::Tensor> bias;
  Ints stride, padding, dilation;
  int64_t groups = 1;
  c10::optional<BatchNorm> batch_norm;  // the batch norm fused after it, when there is one
  bool batch_norm_training = false;
  double batch_norm_momentum = 0.1;
};

// What a site keeps besides its folded bias. kAtenPacking: the folded weight and onednn_weight for
// aten's mkldnn_convolution. kFolded: the folded weight. kPackingsOnly: no folded copy of a weight
// with a batch norm (the caller keeps packings of its own and folds anew with folded_weight when
// it needs a new one: resnet50's folded copy is another 98 MB beside the packings).
enum class Keep { kAtenPacking, kFolded, kPackingsOnly };

// What weights() compares on every call: the identity and version of each source.
tuned::Sources weight_sources(const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                              const BatchNorm* batch_norm);

// The weights of `site` for these sources, refreshed when any of them changed since.
std::shared_ptr<const Weights> weights(int64_t site, const at::Tensor& weight,
                                       const c10::optional<at::Tensor>& bias,
                                       const BatchNorm* batch_norm, const Geometry& geometry,
                                       Keep keep = Keep::kAtenPacking);
// `prepared`'s weight (dense, batch norm folded): its own where kept, else folded anew from the
// sources it was prepared from (`weight`, `batch_norm`), the same values.
at::Tensor folded_weight(const Weights& prepared, const at::Tensor& weight,
                         const BatchNorm* batch_norm);

// What a packing of `prepared`'s weight reads: the folded weight where the site kept one (no
// scales); else the convolution's own `weight` (dense) and the batch norm's scale per output
// channel (undefined without one), which the packing multiplies in (onednn::Conv::pack_weights):
// no folded copy is made (a 512 -> 512 layer's is 9 MiB beside its packing: the tuned resnet18's
// planning peak).
struct PackingSource {
  at::Tensor weight, scales;
};
PackingSource packing_source(const Weights& prepared, const at::Tensor& weight,
                             const BatchNorm* batch_norm);

}  // namespace memoplan::torch_ext::conv
