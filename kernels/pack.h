// Packing operands into the layouts the micro-kernels stream: A in slivers of mr rows (k-major),
// B in panels of nr columns (k-major), zero-padded at the edges so every tile is a full one.
#ifndef MEMOPLAN_KERNELS_PACK_H_
#define MEMOPLAN_KERNELS_PACK_H_

#include <cstddef>
#include <cstdint>

#include "memoplan/kernels/gemm.h"

namespace memoplan::kernels {

// Rows [row0, row0 + rows) and columns [col0, col0 + depth) of `a` into ceil(rows / mr) slivers
// of depth x mr floats each.
void pack_a(const MatrixView& a, int64_t row0, int64_t rows, int64_t col0, int64_t depth, int mr,
            float* out);

// Columns [col0, col0 + cols) of `b` (all of its rows) into ceil(cols / nr) panels of
// b.rows x nr floats each.
void pack_b(const MatrixView& b, int64_t col0, int64_t cols, int nr, float* out);

// 64-byte aligned floats (a cache line; what AVX-512 loads like best).
float* allocate_floats(size_t count);
void free_floats(float* p);

// Scratch floats grown on demand and kept (a thread_local one per use: no allocation per call in
// steady state). The contents do not survive a growth.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  ~FloatBuffer() { free_floats(data_); }
  float* get(size_t need) {
    if (need > floats_) {
      free_floats(data_);
      data_ = nullptr;
      floats_ = 0;
      data_ = allocate_floats(need);
      floats_ = need;
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  size_t floats_ = 0;
};

}  // namespace memoplan::kernels

#endif  // MEMOPLAN_KERNELS_PACK_H_
