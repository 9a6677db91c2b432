#include "pack.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

namespace memoplan::kernels {

void pack_a(const MatrixView& a, int64_t row0, int64_t rows, int64_t col0, int64_t depth, int mr,
            float* out) {
  for (int64_t sliver = 0; sliver * mr < rows; ++sliver) {
    float* dst = out + sliver * depth * mr;
    for (int r = 0; r < mr; ++r) {
      const int64_t row = sliver * mr + r;
      if (row >= rows) {
        for (int64_t k = 0; k < depth; ++k) dst[k * mr + r] = 0.0f;
        continue;
      }
      // Reads one row of A in order (row-major A: contiguous), writes with stride mr.
      const float* src = a.data + (row0 + row) * a.row_stride + col0 * a.col_stride;
      for (int64_t k = 0; k < depth; ++k) dst[k * mr + r] = src[k * a.col_stride];
    }
  }
}

void pack_b(const MatrixView& b, int64_t col0, int64_t cols, int nr, float* out) {
  const int64_t depth = b.rows;
  for (int64_t panel = 0; panel * nr < cols; ++panel) {
    float* dst = out + panel * depth * nr;
    const int64_t first = col0 + panel * nr;
    const int64_t width = cols - panel * nr < nr ? cols - panel * nr : nr;
    if (b.col_stride == 1) {
      // Row-major B: each k copies a run of `width` contiguous floats.
      for (int64_t k = 0; k < depth; ++k) {
        const float* src = b.data + k * b.row_stride + first;
        float* row = dst + k * nr;
        for (int64_t j = 0; j < width; ++j) row[j] = src[j];
        for (int64_t j = width; j < nr; ++j) row[j] = 0.0f;
      }
    } else {
      // Column-major B (a transposed weight, W stored N x K): read each column in order.
      for (int64_t j = 0; j < nr; ++j) {
        if (j >= width) {
          for (int64_t k = 0; k < depth; ++k) dst[k * nr + j] = 0.0f;
          continue;
        }
        const float* src = b.data + (first + j) * b.col_stride;
        for (int64_t k = 0; k < depth; ++k) dst[k * nr + j] = src[k * b.row_stride];
      }
    }
  }
}

namespace {

// Every block starts 64 bytes after a header saying how it was made. Packed weights and their
// candidates are megabytes; served from malloc, whose heap keeps what it is given back once its
// mmap threshold has risen (glibc raises it to the largest mmapped block freed: a released
// weight, an activation), the candidates a measurement drops stayed resident and set plan()'s
// peak (traced mobilenet_v2: its classifier's candidates, 5 MB each, grew it 275 -> 331 MB;
// bench/tuned_rss.py --release-weights: 325-335 -> 300 MiB). From kMapBytes on a block is a
// mapping of its own, given back when freed.
constexpr size_t kHeader = 64;
constexpr size_t kMapBytes = size_t{1} << 20;
constexpr size_t kPage = 4096;
constexpr uint64_t kMapped = 0x6d656d6f706c616eULL, kMalloced = 0x6d616c6c6f636564ULL;

struct Header {
  uint64_t how;
  void* base;
  size_t bytes;
};

}  // namespace

float* allocate_floats(size_t count) {
  const size_t bytes = (count ? count : 1) * sizeof(float);
  char* block = nullptr;
  Header header{};
  if (bytes >= kMapBytes) {
    const size_t mapped = (bytes + kPage + kPage - 1) / kPage * kPage;
    void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    block = static_cast<char*>(base) + kPage;
    header = {kMapped, base, mapped};
  } else {
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes + kHeader) != 0) throw std::bad_alloc();
    block = static_cast<char*>(p) + kHeader;
    header = {kMalloced, p, 0};
  }
  *reinterpret_cast<Header*>(block - kHeader) = header;
  return reinterpret_cast<float*>(block);
}

void free_floats(float* p) {
  if (!p) return;
  const Header header = *reinterpret_cast<const Header*>(reinterpret_cast<char*>(p) - kHeader);
  if (header.how == kMapped) {
    ::munmap(header.base, header.bytes);
  } else {
    std::free(header.base);
  }
}

}  // namespace memoplan::kernels
