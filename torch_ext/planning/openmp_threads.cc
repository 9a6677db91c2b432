// release_openmp_threads (memoplan/torch/plan.h): the calling thread's OpenMP worker threads exit.
// libgomp keeps a pool of workers per thread that ever ran a parallel region, and when it manages
// more threads than the machine has CPUs it lets every worker spin only 100 times before it
// sleeps (its "throttled" spin count, 1000 with OMP_WAIT_POLICY=active). A process that plans on
// one thread and serves on another (memoplan run, memoplan-serve) kept the planning thread's
// workers, so on two CPUs the serving thread's worker slept and was woken at every parallel region:
// traced shufflenet_v2 tuned, two intra-op threads, 10.4 ms a pass against 3.5 ms planned and
// served on one thread, its worker switched out 85,000 times against 9 (docs/results/KERNELS.md).
// omp_pause_resource_all (OpenMP 5.0) frees the calling thread's pool; its next parallel region
// makes one again.
#include "memoplan/torch/plan.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace memoplan::torch_ext {

void release_openmp_threads() {
#ifdef _OPENMP
  if (omp_in_parallel() || omp_get_level() > 0) return;  // only a thread's own, outside a region
  omp_pause_resource_all(omp_pause_soft);
#endif
}

}  // namespace memoplan::torch_ext
