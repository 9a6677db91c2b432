#include "memoplan/kernels/attention.h"

#include <stdexcept>

#include "epilogue.h"
#include "pack.h"

namespace memoplan::kernels {
namespace {

thread_local FloatBuffer scores_buffer;

}  // namespace

void attention_head(const MatrixView& q, const MatrixView& k, const MatrixView& v, float scale,
                    float* out, int64_t ldo, const GemmConfig& config) {
  if (q.cols != k.cols || k.rows != v.rows) {
    throw std::invalid_argument("attention_head: q is tq x d, k tk x d, v tk x dv");
  }
  const int64_t tq = q.rows, tk = k.rows;
  if (tq == 0 || v.cols == 0) return;
  float* scores = scores_buffer.get(static_cast<size_t>(tq) * (tk > 0 ? tk : 1));
  gemm(q, k.transposed(), scores, tk, {}, config);
  const SoftmaxRowFn softmax = softmax_row();
  for (int64_t i = 0; i < tq; ++i) softmax(scores + i * tk, tk, scale);
  gemm(MatrixView{scores, tq, tk, tk, 1}, v, out, ldo, {}, config);
}

}  // namespace memoplan::kernels
