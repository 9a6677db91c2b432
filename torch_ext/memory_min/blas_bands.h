// Bands of a GEMM that give OpenBLAS's bytes for the whole call (blas_bands.cc), for memory min's
// ops that make their GEMM's left operand a band of rows at a time (bn_relu_conv1x1.cc).
// OpenBLAS's level-3 driver (driver/level3/level3.c) cuts a call's rows into blocks -- p rows while
// at least 2p are left, then the rest in two halves rounded up to its unroll -- and a call's first
// block takes another path than the later ones (its columns in chunks of 3 x UNROLL_N), its edge
// rows others again: a band computed as a call of its own differs from the whole. The first band
// is therefore a call from row 0 ending on one of the whole call's block boundaries, each later
// one a call behind rows of zeros the driver makes its first block, then cutting the band's rows
// as it cut them in the whole call; the zeros' results land on rows a later call overwrites
// (calls run last band first). p and the unroll are learned from the library once per process.
// No torch headers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace memoplan::torch_ext::blas_bands {

// C (m x n, leading dimension ldc) = A (m x k, lda) * B (k x n, leading dimension k), through the
// BLAS aten's CPU GEMM calls (sgemm_, beta 0): as aten's slow_conv2d calls it for a 1x1
// convolution without bias (rows: pixels, columns: channels).
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, float* c,
          int64_t ldc);

// The driver's blocking: its P and its row rounding.
struct Blocking {
  int64_t p = 0, unroll = 0;
};

// The rows of each block the driver cuts m rows into.
std::vector<int64_t> row_blocks(int64_t m, const Blocking& b);

// One GEMM of a band: rows [start, start + rows) of the whole, behind `lead` rows of zeros whose
// results land on rows [start - lead, start).
struct Call {
  int64_t start = 0, rows = 0, lead = 0;
};

// The calls for m rows, each at least `target` rows (or the rest), whose blocks are the whole
// call's: the first from row 0, each later one behind p rows of zeros or as many as its first
// block. Empty when no such cut exists.
std::vector<Call> plan_calls(int64_t m, const Blocking& b, int64_t target);

// The rows a call's left operand holds at most (leading zeros included).
int64_t buffer_rows(const std::vector<Call>& calls);

// How many rows a call should cover at least: a quarter of m, and two of the driver's blocks
// (each call after the first computes one block of zeros besides its rows).
int64_t calls_target(int64_t m, const Blocking& b);

// c (m rows, n columns, ldc = m) = A * w, A's k columns filled band by band by
// fill(column, first row, rows, destination) into `buffer` (buffer_rows(calls) x k floats).
template <typename Fill>
void run_calls(const std::vector<Call>& calls, int64_t m, int64_t n, int64_t k, const float* w,
               float* c, float* buffer, const Fill& fill) {
  for (auto call = calls.rbegin(); call != calls.rend(); ++call) {
    const int64_t ld = call->lead + call->rows;
    for (int64_t column = 0; column < k; ++column) {
      float* dst = buffer + column * ld;
      std::fill(dst, dst + call->lead, 0.0f);
      fill(column, call->start, call->rows, dst + call->lead);
    }
    gemm(ld, n, k, buffer, ld, w, c + (call->start - call->lead), m);
  }
}

// The blocking of the BLAS this process runs, learned on its first call (nullopt: bands never give
// its bytes, e.g. another BLAS than OpenBLAS).
const std::optional<Blocking>& blocking();

// Slices of columns (a convolution's output channels) that give the whole call's bytes: the
// driver's first block of rows takes its columns in chunks (3 x UNROLL_N), so a slice computed as
// a call of its own matches the whole where it starts on a chunk's first column. The smallest
// such width, learned once per process on random data (0: none found, e.g. another BLAS, or
// OpenBLAS threaded: call it only where blas_threads() is 1).
int64_t column_unit();

// OpenBLAS's own thread count (its threaded driver cuts rows otherwise); 1 for another BLAS.
int blas_threads();

}  // namespace memoplan::torch_ext::blas_bands
