// Folded and pre-packed convolution weights per site (conv_weights.h).
#include "conv_weights.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (LibTorch 2.x: not through ATen.h)

#include <atomic>

#include "planning/planning.h"
#include "weight_cache.h"

namespace memoplan::torch_ext::conv {
namespace {

// One preparation per site, made again when a source changes (weight_cache.h's rule).
tuned::WeightCache<Weights>& prepared() {
  static auto* cache = new tuned::WeightCache<Weights>([](const Weights& w) -> uint64_t {
    return (w.folded_copy ? w.weight.nbytes() : 0) + (w.bias ? w.bias->nbytes() : 0) +
           (w.onednn_weight.defined() ? w.onednn_weight.nbytes() : 0);
  });
  return *cache;
}

// scale = gamma / sqrt(var + eps), per output channel.
at::Tensor scale_of(const BatchNorm& bn) {
  at::Tensor scale = at::rsqrt(bn.var + bn.eps);
  return bn.weight.defined() ? scale * bn.weight : scale;
}

at::Tensor fold(const at::Tensor& weight, const at::Tensor& scale) {
  return (weight * scale.view({-1, 1, 1, 1})).contiguous();
}

std::shared_ptr<const Weights> prepare(const at::Tensor& weight,
                                       const c10::optional<at::Tensor>& bias, const BatchNorm* bn,
                                       const Geometry& g, Keep keep) {
  at::NoGradGuard no_grad;  // beside the plan: WeightCache::get
  static std::atomic<int64_t> generations{0};
  auto w = std::make_shared<Weights>();
  w->generation = ++generations;
  if (bn) {
    const at::Tensor scale = scale_of(*bn);
    if (keep != Keep::kPackingsOnly) w->weight = fold(weight, scale);
    w->folded_copy = w->weight.defined();
    at::Tensor b = bias ? (*bias - bn->mean) * scale : -bn->mean * scale;
    if (bn->bias.defined()) b = b + bn->bias;
    w->bias = b.contiguous();
  } else {
    w->weight = weight.contiguous();
    if (bias) w->bias = bias->contiguous();
  }
  if (keep == Keep::kAtenPacking) {
    w->onednn_weight = at::mkldnn_reorder_conv2d_weight(w->weight.to_mkldnn(), g.padding, g.stride,
                                                        g.dilation, g.groups);
  }
  return w;
}

}  // namespace

tuned::Sources weight_sources(const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                              const BatchNorm* bn) {
  tuned::Sources sources;
  sources.add(weight).add(bias ? *bias : at::Tensor());
  if (bn) sources.add(bn->weight).add(bn->bias).add(bn->mean).add(bn->var);
  return sources;
}

std::shared_ptr<const Weights> weights(int64_t site, const at::Tensor& weight,
                                       const c10::optional<at::Tensor>& bias, const BatchNorm* bn,
                                       const Geometry& geometry, Keep keep) {
  return prepared().get(
      site, weight_sources(weight, bias, bn), [](const Weights&) { return true; },
      [&] { return prepare(weight, bias, bn, geometry, keep); });
}

at::Tensor folded_weight(const Weights& prepared, const at::Tensor& weight,
                         const BatchNorm* batch_norm) {
  if (prepared.weight.defined()) return prepared.weight;
  runtime_pass::OffPlan off_plan;  // a packing's source, dropped once packed
  at::NoGradGuard no_grad;
  return batch_norm ? fold(weight, scale_of(*batch_norm)) : weight.contiguous();
}

PackingSource packing_source(const Weights& prepared, const at::Tensor& weight,
                             const BatchNorm* batch_norm) {
  if (prepared.weight.defined()) return {prepared.weight, at::Tensor()};
  runtime_pass::OffPlan off_plan;
  at::NoGradGuard no_grad;
  PackingSource source{weight.contiguous(), at::Tensor()};
  if (batch_norm) source.scales = scale_of(*batch_norm).contiguous();
  return source;
}

}  // namespace memoplan::torch_ext::conv
