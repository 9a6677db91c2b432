// SiLU at the end of a convolution's epilogue: oneDNN's swish post-op or memoplan's kernel over
// the output after the call (onednn_common.h). Fused, oneDNN 2.6's swish slowed EfficientNet-B0's
// convolutions by more than a separate AVX-512 pass of kernels::silu costs (Zen 4, traced at
// 224x224, `memoplan run --kernels tuned`, 4 alternated pairs: 7.7-8.2 ms a pass fused against
// 6.9-7.2 at one thread; 5.1-6.8 against 4.8-6.4 at two). A small convolution timed alone did not
// show it (the same cost either way), so no measurement here decides: where kernels::silu has
// AVX-512 the pass runs, elsewhere (its AVX2 kernel, unmeasured against the post-op) oneDNN's.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "memoplan/kernels/silu.h"
#include "onednn_common.h"

namespace memoplan::onednn::detail {

bool silu_after_the_call() {
  static const bool after = [] {
    const char* forced = std::getenv("MEMOPLAN_SILU");
    if (forced && std::strcmp(forced, "onednn") == 0) return false;
    if (forced && std::strcmp(forced, "memoplan") == 0) return true;
    return kernels::silu_is_avx512();
  }();
  return after;
}

void silu_in_place(float* x, size_t count) {
  const kernels::SiluFn silu = kernels::silu();
  constexpr size_t kChunk = size_t{1} << 14;  // 64 KiB a piece
  const auto chunks = static_cast<int64_t>((count + kChunk - 1) / kChunk);
#ifdef _OPENMP
  if (chunks > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < chunks; ++i) {
      const size_t first = static_cast<size_t>(i) * kChunk;
      silu(x + first, static_cast<int64_t>(std::min(kChunk, count - first)));
    }
    return;
  }
#endif
  (void)chunks;
  silu(x, static_cast<int64_t>(count));
}

}  // namespace memoplan::onednn::detail
