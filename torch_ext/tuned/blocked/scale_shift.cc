// A batch norm's scale and shift (scale_shift.h).
#include "scale_shift.h"

#include <ATen/core/grad_mode.h>

namespace memoplan::torch_ext::blocked {

bool scale_shift_applies(int64_t channels, bool input_requires_grad, const BatchNormArgs& a,
                         const std::vector<onednn::PostOp>& post) {
  const bool autograd = at::GradMode::is_enabled();
  auto fits = [&](const at::Tensor& t) {
    return t.defined() && t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == channels &&
           t.is_contiguous() && !(autograd && t.requires_grad());
  };
  const bool relu_or_none = post.empty() || relu_only(post);
  return !a.training && relu_or_none && fits(a.mean) && fits(a.var) &&
         (!a.weight.defined() || fits(a.weight)) && (!a.bias.defined() || fits(a.bias)) &&
         !input_requires_grad;
}

ScaleShift scale_shift_of(const BatchNormArgs& a, int64_t channels, int64_t padded,
                          const std::vector<onednn::PostOp>& post) {
  ScaleShift s;
  s.alpha.assign(static_cast<size_t>(padded), 0.f);
  s.beta.assign(static_cast<size_t>(padded), 0.f);
  s.floor = post.empty() ? -INFINITY : 0.f;
  const float* mean = a.mean.data_ptr<float>();
  const float* var = a.var.data_ptr<float>();
  const float* weight = a.weight.defined() ? a.weight.data_ptr<float>() : nullptr;
  const float* bias = a.bias.defined() ? a.bias.data_ptr<float>() : nullptr;
  for (int64_t c = 0; c < channels; ++c) {
    const float invstd = 1.f / std::sqrt(var[c] + static_cast<float>(a.eps));
    const float alpha = invstd * (weight ? weight[c] : 1.f);
    s.alpha[static_cast<size_t>(c)] = alpha;
    s.beta[static_cast<size_t>(c)] = (bias ? bias[c] : 0.f) - mean[c] * alpha;
  }
  return s;
}

}  // namespace memoplan::torch_ext::blocked
