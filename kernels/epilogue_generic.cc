// The portable epilogue and attention softmax (any CPU) and the run-time choice between them and
// the AVX2 ones.
#include <cmath>
#include <limits>

#include "epilogue.h"
#include "memoplan/kernels/attention.h"
#include "micro_kernel.h"

namespace memoplan::kernels {

float gelu_scalar(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

float hardswish_scalar(float x) { return x * std::fmin(std::fmax(x + 3.0f, 0.0f), 6.0f) / 6.0f; }

void epilogue_row_generic(float* row, int64_t n, const float* bias, float alpha,
                          Activation activation) {
  if (alpha != 1.0f) {
    for (int64_t j = 0; j < n; ++j) row[j] *= alpha;
  }
  if (bias) {
    for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
  }
  if (activation == Activation::kRelu) {
    for (int64_t j = 0; j < n; ++j) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
  } else if (activation == Activation::kGelu) {
    for (int64_t j = 0; j < n; ++j) row[j] = gelu_scalar(row[j]);
  } else if (activation == Activation::kHardswish) {
    for (int64_t j = 0; j < n; ++j) row[j] = hardswish_scalar(row[j]);
  }
}

void softmax_row_generic(float* row, int64_t n, float scale) {
  if (n <= 0) return;
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::fmax(m, scale * row[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    row[j] = std::exp(scale * row[j] - m);
    sum += row[j];
  }
  const float inverse = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) row[j] *= inverse;
}

SoftmaxRowFn softmax_row() {
  static const SoftmaxRowFn chosen =
      MEMOPLAN_AVX2_OR_GENERIC(softmax_row_avx2, softmax_row_generic);
  return chosen;
}

EpilogueRowFn epilogue_row() {
  static const EpilogueRowFn chosen =
      MEMOPLAN_AVX2_OR_GENERIC(epilogue_row_avx2, epilogue_row_generic);
  return chosen;
}

}  // namespace memoplan::kernels
