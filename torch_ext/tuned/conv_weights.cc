// Folded and pre-packed convolution weights per site (conv_weights.h).
#include "conv_weights.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard (LibTorch 2.x: not through ATen.h)

#include <atomic>
#include <map>
#include <mutex>

#include "planning/planning.h"

namespace memoplan::torch_ext::conv {
namespace {

// What a preparation was made from: each source's storage and version.
struct Source {
  const void* data = nullptr;
  int64_t version = -1;
  bool operator==(const Source& o) const { return data == o.data && version == o.version; }
};
Source source_of(const at::Tensor& t) {
  if (!t.defined()) return {};
  return {t.data_ptr(), t.is_inference() ? -1 : t._version()};
}

struct Site {
  std::vector<Source> sources;
  std::shared_ptr<const Weights> weights;
};
std::mutex mutex;
std::map<int64_t, Site>& sites() {
  static auto* table = new std::map<int64_t, Site>();  // never destroyed: used at exit
  return *table;
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
  runtime_pass::OffPlan off_plan;
  at::NoGradGuard no_grad;
  static std::atomic<int64_t> generations{0};
  auto w = std::make_shared<Weights>();
  w->generation = ++generations;
  if (bn) {
    const at::Tensor scale = scale_of(*bn);
    if (keep != Keep::kPackingsOnly) w->weight = fold(weight, scale);
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

std::shared_ptr<const Weights> weights(int64_t site, const at::Tensor& weight,
                                       const c10::optional<at::Tensor>& bias, const BatchNorm* bn,
                                       const Geometry& geometry, Keep keep) {
  std::vector<Source> sources = {source_of(weight), source_of(bias ? *bias : at::Tensor())};
  if (bn) {
    for (const at::Tensor* t : {&bn->weight, &bn->bias, &bn->mean, &bn->var}) {
      sources.push_back(source_of(*t));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = sites().find(site);
    if (it != sites().end() && it->second.sources == sources) return it->second.weights;
  }
  // Prepared outside the lock (other sites go on); two threads may prepare one site, harmlessly.
  std::shared_ptr<const Weights> fresh = prepare(weight, bias, bn, geometry, keep);
  std::lock_guard<std::mutex> lock(mutex);
  Site& s = sites()[site];
  s.sources = std::move(sources);
  s.weights = fresh;
  return fresh;
}

at::Tensor folded_weight(const Weights& prepared, const at::Tensor& weight,
                         const BatchNorm* batch_norm) {
  if (prepared.weight.defined()) return prepared.weight;
  runtime_pass::OffPlan off_plan;  // a packing's source, dropped once packed
  at::NoGradGuard no_grad;
  return batch_norm ? fold(weight, scale_of(*batch_norm)) : weight.contiguous();
}

}  // namespace memoplan::torch_ext::conv
