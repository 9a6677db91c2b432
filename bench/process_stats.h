// What a benchmark process can tell about itself without an allocator's help: /proc/self/status
// fields, resetting the peak RSS, OpenBLAS's thread pool, percentiles.
#ifndef MEMOPLAN_BENCH_PROCESS_STATS_H_
#define MEMOPLAN_BENCH_PROCESS_STATS_H_

#include <vector>

namespace memoplan::bench {

// A field of /proc/self/status in KiB (VmRSS, VmHWM), or -1.
long status_kib(const char* field);

// Sets VmHWM back to the current RSS (Linux >= 4.0), so that it measures what runs next and not
// loading the model, which reads the whole file into memory. False when the kernel refused.
bool reset_peak_rss();

// One OpenBLAS thread per calling worker: Debian's libblas.so.3 with libopenblas0-pthread keeps
// its own pool, sized by the cores, unless told otherwise. Returns OpenBLAS's thread count
// afterwards, or 0 when OpenBLAS is not loaded.
int limit_blas_threads();

// Nearest-rank percentile of sorted, non-empty samples.
double percentile(const std::vector<double>& sorted, double p);

}  // namespace memoplan::bench

#endif  // MEMOPLAN_BENCH_PROCESS_STATS_H_
