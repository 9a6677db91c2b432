// The memory budget's slicing (memoplan/torch/budget.h): convolutions that do not fit alone
// computed in slices, still bit-identical; memory min under a budget; a 1x1 convolution at one
// thread; an embedding's resident rows.
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <torch/script.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "budget_support.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/memory_min.h"
#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {
namespace {

using namespace budget_test;

// Convolutions whose weights outweigh their inputs run through memoplan's parts under a budget
// (memoplan::budget_conv2d): at the smallest budget the 4.5 MiB weight is computed a slice of
// output channels at a time, each slice's input, weights and output in the work arena, outputs
// bit-identical, and the slab plus the sampled weights and arena stay under the budget. The
// second convolution's input (256 x 10 x 10) is above the 20480 elements from which aten runs a
// 3x3 convolution of one image through oneDNN at all (below, its own im2col + GEMM: other bytes,
// so those run whole, as the first one does).
TEST_F(Budget, SlicesAConvolutionThatDoesNotFitAloneAndStaysBitIdentical) {
  auto make = [] {
    torch::manual_seed(2);
    torch::jit::Module m("Convolutions");
    m.register_parameter("c1", torch::randn({256, 64, 3, 3}) * 0.05, false);
    m.register_parameter("b1", torch::randn({256}), false);
    m.register_parameter("c2", torch::randn({512, 256, 3, 3}) * 0.02, false);
    m.register_parameter("c3", torch::randn({64, 512, 1, 1}) * 0.05, false);
    m.define(R"(
      def forward(self, x):
          y = torch.relu(torch.conv2d(x, self.c1, self.b1, [1, 1], [1, 1]))
          y = torch.relu(torch.conv2d(y, self.c2, None, [1, 1], [1, 1]))
          return torch.conv2d(y, self.c3, None)
    )");
    m.eval();
    return m;
  };
  torch::jit::Module reference = make();
  torch::jit::Module m = make();
  const at::Tensor input = torch::randn({1, 64, 10, 10});
  const at::Tensor expected = reference.forward({input}).toTensor();
  const PlanSummary plan_summary = plan(m, {input}, budgeted(64 * kMiB, dir));
  const BudgetSummary smallest = set_budget(m, budget_summary(m)->smallest_budget_bytes);
  ASSERT_GE(smallest.sliced_groups, 1u)
      << "budget " << smallest.budget_bytes << " slab " << plan_summary.slab_bytes << " work "
      << smallest.work_bytes << " groups " << smallest.groups;
  EXPECT_GT(smallest.work_bytes, 0u);
  ASSERT_LT(smallest.budget_bytes, plan_summary.slab_bytes + 512 * 256 * 9 * 4);
  sample_resident_weights(m, true);
  resident_weight_peak(m, true);
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_TRUE(torch::equal(m.forward({input}).toTensor(), expected)) << "pass " << pass;
  }
  const uint64_t peak = resident_weight_peak(m, true);  // weights and the work arena
  EXPECT_GE(peak, smallest.work_bytes);
  EXPECT_LE(plan_summary.slab_bytes + peak, smallest.budget_bytes);
  sample_resident_weights(m, false);
  EXPECT_EQ(budget_summary(m)->slicing_refused, 0u);
}

// Under memory = "min", a convolution the budget does not slice (its weight smaller than its
// input) runs in memory min's bands: a smaller slab, so a smaller smallest feasible budget.
TEST_F(Budget, MemoryMinLowersTheSmallestFeasibleBudget) {
  auto make = [] {
    torch::manual_seed(5);
    torch::jit::Module m("Wide");
    m.register_parameter("c1", torch::randn({256, 64, 3, 3}) * 0.05, false);
    m.register_parameter("c2", torch::randn({512, 256, 3, 3}) * 0.02, false);
    m.define(R"(
      def forward(self, x):
          y = torch.relu(torch.conv2d(x, self.c1, None, [1, 1], [1, 1]))
          return torch.conv2d(y, self.c2, None, [2, 2], [1, 1])
    )");
    m.eval();
    return m;
  };
  torch::jit::Module reference = make();
  const at::Tensor input = torch::randn({1, 64, 56, 56});  // c1 weighs less than this
  const at::Tensor expected = reference.forward({input}).toTensor();
  torch::jit::Module offset = make();
  plan(offset, {input}, budgeted(64 * kMiB, dir));
  const uint64_t offset_smallest = budget_summary(offset)->smallest_budget_bytes;
  torch::jit::Module m = make();
  PlanOptions options = budgeted(64 * kMiB, dir);
  options.memory = Memory::kMin;
  const PlanSummary plan_summary = plan(m, {input}, options);
  const BudgetSummary smallest = set_budget(m, budget_summary(m)->smallest_budget_bytes);
  EXPECT_LT(smallest.budget_bytes, offset_smallest);
  sample_resident_weights(m, true);
  resident_weight_peak(m, true);
  const uint64_t in_parts = sliced_counts().convolutions;
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_TRUE(torch::equal(m.forward({input}).toTensor(), expected)) << "pass " << pass;
    EXPECT_TRUE(last_pass().fully_planned());
  }
  EXPECT_GE(sliced_counts().convolutions, in_parts + 3);  // c1 in bands
  EXPECT_LE(plan_summary.slab_bytes + resident_weight_peak(m, true), smallest.budget_bytes);
  sample_resident_weights(m, false);
}

// A 1x1 convolution at one thread, which aten computes through the BLAS (oneDNN's parts differ
// from it there): sliced by output channels into GEMMs of their own, still bit-identical.
TEST_F(Budget, SlicesAOneByOneConvolutionAtOneThread) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  auto make = [] {
    torch::manual_seed(4);
    torch::jit::Module m("Pointwise");
    m.register_parameter("c1", torch::randn({1024, 256, 1, 1}) * 0.05, false);
    m.register_parameter("c2", torch::randn({64, 1024, 1, 1}) * 0.05, false);
    m.define(R"(
      def forward(self, x):
          y = torch.relu(torch.conv2d(x, self.c1, None))
          return torch.conv2d(y, self.c2, None)
    )");
    m.eval();
    return m;
  };
  torch::jit::Module reference = make();
  torch::jit::Module m = make();
  const at::Tensor input = torch::randn({1, 256, 7, 7});
  const at::Tensor expected = reference.forward({input}).toTensor();
  const PlanSummary plan_summary = plan(m, {input}, budgeted(64 * kMiB, dir));
  const BudgetSummary smallest = set_budget(m, budget_summary(m)->smallest_budget_bytes);
  EXPECT_GE(smallest.sliced_groups, 1u) << "budget " << smallest.budget_bytes;
  EXPECT_LT(smallest.budget_bytes, plan_summary.slab_bytes + 1024 * 256 * 4);
  sample_resident_weights(m, true);
  resident_weight_peak(m, true);
  for (int pass = 0; pass < 3; ++pass) {
    drop_weight_page_cache(m);
    EXPECT_TRUE(torch::equal(m.forward({input}).toTensor(), expected)) << "pass " << pass;
  }
  // The residency bound holds where the kernel maps what was loaded and little more; where it
  // maps large folios whole, the slices of this 1 MiB weight share a folio (known: the budget
  // counts pages), so only the results and the plan are checked there.
  const uint64_t peak = resident_weight_peak(m, true);
  if (!maps_large_folios(dir)) {
    EXPECT_LE(plan_summary.slab_bytes + peak, smallest.budget_bytes);
  } else {
    std::cerr << "memoplan test: the kernel maps large page-cache folios whole; resident weights "
              << peak << " B beside a slab of " << plan_summary.slab_bytes
              << " B under a budget of " << smallest.budget_bytes << " B (not checked)\n";
  }
  sample_resident_weights(m, false);
  EXPECT_EQ(budget_summary(m)->slicing_refused, 0u);
  at::set_num_threads(threads);
}

// An embedding's lookups touch only their rows: its table (5 MiB) is read where it lies, counted
// as what the passes touched, so a budget below the table's size (slab + 2 MiB) fits.
TEST_F(Budget, AnEmbeddingCountsOnlyTheRowsItsLookupsTouch) {
  auto make = [] {
    torch::manual_seed(1);
    torch::jit::Module m("Embedded");
    m.register_parameter("table", torch::randn({5000, 256}), false);
    m.register_parameter("w", torch::randn({64, 256}) * 0.05, false);
    m.define(R"(
      def forward(self, ids):
          return torch.linear(torch.embedding(self.table, ids), self.w, None)
    )");
    m.eval();
    return m;
  };
  torch::jit::Module reference = make();
  torch::jit::Module m = make();
  const at::Tensor ids = torch::randint(0, 5000, {1, 16}, torch::kLong);
  const at::Tensor expected = reference.forward({ids}).toTensor();
  const PlanSummary plan_summary = plan(m, {ids}, budgeted(64 * kMiB, dir));
  // 16 lookups touch at most 32 pages of rows, but each fault maps the 64 KiB around it
  // (fault-around): what the passes touched, measured, is up to 1 MiB.
  const BudgetSummary tight = set_budget(m, plan_summary.slab_bytes + 2 * kMiB);
  EXPECT_LE(tight.smallest_budget_bytes, tight.budget_bytes);
  sample_resident_weights(m, true);
  resident_weight_peak(m, true);
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_TRUE(torch::equal(m.forward({ids}).toTensor(), expected));
  }
  const uint64_t peak = resident_weight_peak(m, true);
  EXPECT_GT(peak, 0u);
  EXPECT_LE(plan_summary.slab_bytes + peak, tight.budget_bytes);
  sample_resident_weights(m, false);
}

}  // namespace
}  // namespace memoplan::torch_ext
