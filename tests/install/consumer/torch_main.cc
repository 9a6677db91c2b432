// Every installed LibTorch header of memoplan, and one call into libmemoplan_torch.so and one into
// libmemoplan_tuned.so.
#include <cstdio>

#include "memoplan/torch/allocator_base.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/cpu_allocator_swap.h"
#include "memoplan/torch/graph_node.h"
#include "memoplan/torch/kernels.h"
#include "memoplan/torch/memory_min.h"
#include "memoplan/torch/plan.h"
#include "memoplan/torch/profiler.h"

int main() {
  const memoplan::torch_ext::PlanStats stats = memoplan::torch_ext::plan_stats();
  std::printf("consumer_torch: %s\n", memoplan::torch_ext::to_string(stats).c_str());
  std::printf("consumer_torch: %llu tuned calls\n",
              static_cast<unsigned long long>(memoplan::torch_ext::kernel_stats().tuned_calls));
  return 0;
}
