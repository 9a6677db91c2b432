// The memory budget (memoplan/torch/budget.h): outputs bit-identical to the module without one,
// the sampled resident weights plus the slab under the budget, a new budget taking effect without
// a profiled pass, a budget below the smallest feasible one refused with that figure, streamed
// weights unmapped after a pass, the weight file written once, and the refusals.
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <torch/script.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "budget/weight_file.h"
#include "budget_support.h"
#include "memoplan/torch/budget.h"
#include "memoplan/torch/kernels.h"
#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {
namespace {

using namespace budget_test;

// The weight file's directory: one named ($MEMOPLAN_WEIGHTS_DIR) is used as named; the user's cache
// where it can be written, else a directory of the user's in /tmp (a service user whose $HOME is
// not its own: memoplan-serve's tuned kernels failed there before).
TEST(WeightsDir, TheCacheWhereWritableElseTmp) {
  const char* names[] = {"MEMOPLAN_WEIGHTS_DIR", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::optional<std::string>> saved;
  for (const char* name : names) {
    const char* v = std::getenv(name);
    saved.push_back(v ? std::optional<std::string>(v) : std::nullopt);
  }
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "memoplan-weights-dir";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  ::unsetenv("MEMOPLAN_WEIGHTS_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", tmp.c_str(), 1);
  EXPECT_EQ(budget::weights_dir(""), (tmp / ".cache/memoplan/weights").string());
  const std::filesystem::path file = tmp / "a-file";
  { std::ofstream(file) << "not a directory"; }
  ::setenv("HOME", file.c_str(), 1);
  EXPECT_EQ(budget::weights_dir(""), "/tmp/memoplan-weights-" + std::to_string(::getuid()));
  ::setenv("MEMOPLAN_WEIGHTS_DIR", (file / "w").c_str(), 1);
  EXPECT_EQ(budget::weights_dir(""), (file / "w").string()) << "named: used as named";
  EXPECT_EQ(budget::weights_dir((tmp / "given").string()), (tmp / "given").string());
  for (size_t i = 0; i < saved.size(); ++i) {
    if (saved[i]) {
      ::setenv(names[i], saved[i]->c_str(), 1);
    } else {
      ::unsetenv(names[i]);
    }
  }
  std::filesystem::remove_all(tmp);
}

// A budget as text (memoplan run's --budget, memoplan-serve's --budget and config.json):
// sizes in bytes with decimal and binary units, or a share; anything else, 0 and 0% refused.
TEST(BudgetText, SizesAndSharesParseAndTheRestIsRefused) {
  EXPECT_EQ(parse_budget("64MiB")->bytes, 64u << 20);
  EXPECT_EQ(parse_budget("1.5GiB")->bytes, 3u << 29);
  EXPECT_EQ(parse_budget("512KB")->bytes, 512000u);
  EXPECT_EQ(parse_budget("100000")->bytes, 100000u);
  EXPECT_EQ(parse_budget("2G")->bytes, 2000000000u);
  EXPECT_DOUBLE_EQ(parse_budget("25%")->percent, 25.0);
  EXPECT_EQ(parse_budget("25%")->bytes, 0u);
  for (const char* bad : {"", "0", "0%", "-5MiB", "12 MiB", "1001%", "MiB", "5XB", "nan", "1e30"}) {
    EXPECT_FALSE(parse_budget(bad)) << bad;
  }
}

TEST_F(Budget, OutputsIdenticalAndResidentUnderTheBudget) {
  torch::jit::Module reference = network();
  torch::jit::Module m = network();
  const at::Tensor expected = reference.forward({x}).toTensor();
  const PlanSummary plan_summary = plan(m, {x}, budgeted(64 * kMiB, dir));
  // Half of the weights plus the slab.
  const uint64_t budget = (budget_summary(m)->weights_bytes + plan_summary.slab_bytes) / 2;
  set_budget(m, budget);
  const std::optional<BudgetSummary> summary = budget_summary(m);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->budget_bytes, budget);
  EXPECT_GE(summary->weights_bytes, kWeights);
  EXPECT_GT(summary->streamed_bytes, 0u);
  EXPECT_LE(summary->planned_peak_bytes, budget);
  EXPECT_EQ(summary->steps, 5u);
  sample_resident_weights(m, true);
  resident_weight_peak(m, true);
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), expected)) << "pass " << pass;
    EXPECT_TRUE(last_pass().fully_planned());
  }
  const uint64_t peak = resident_weight_peak(m, true);
  EXPECT_GT(peak, 0u);
  EXPECT_LE(plan_summary.slab_bytes + peak, budget)
      << "slab " << plan_summary.slab_bytes << " peak " << peak << " planned "
      << budget_summary(m)->planned_peak_bytes;
  sample_resident_weights(m, false);
}

TEST_F(Budget, SlicesALinearThatDoesNotFitAloneAndStaysBitIdentical) {
  torch::jit::Module reference = network();
  torch::jit::Module m = network();
  const at::Tensor expected = reference.forward({x}).toTensor();
  const PlanSummary plan_summary = plan(m, {x}, budgeted(64 * kMiB, dir));
  // The smallest feasible budget: w1 (2 MiB) alone does not fit beside the slab there.
  const BudgetSummary smallest = set_budget(m, budget_summary(m)->smallest_budget_bytes);
  ASSERT_GE(smallest.sliced_groups, 1u);
  ASSERT_LT(smallest.budget_bytes, plan_summary.slab_bytes + 2 * kMiB);
  sample_resident_weights(m, true);
  resident_weight_peak(m, true);
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), expected));
  }
  EXPECT_LE(plan_summary.slab_bytes + resident_weight_peak(m, true), smallest.budget_bytes);
  sample_resident_weights(m, false);
  EXPECT_EQ(budget_summary(m)->slicing_refused, 0u);
  // Two rows run whole (OpenBLAS's GEMM may round slices differently): identical, and counted.
  const at::Tensor x2 = torch::randn({2, 3, 32, 32});
  for (int pass = 0; pass < 5; ++pass) {
    EXPECT_TRUE(torch::equal(m.forward({x2}).toTensor(), reference.forward({x2}).toTensor()));
  }
  EXPECT_GE(budget_summary(m)->slicing_refused, 5u);
}

TEST_F(Budget, NewBudgetTakesEffectWithoutAProfiledPass) {
  torch::jit::Module reference = network();
  torch::jit::Module m = network();
  const at::Tensor expected = reference.forward({x}).toTensor();
  plan(m, {x}, budgeted(2 * kMiB, dir));
  const PlanStats before = plan_stats();
  const BudgetSummary ample = set_budget(m, 64 * kMiB);
  EXPECT_EQ(ample.streamed_bytes, 0u);  // everything pinned
  EXPECT_EQ(ample.pinned_bytes, ample.weights_bytes);
  sample_resident_weights(m, true);
  resident_weight_peak(m, true);
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), expected));
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), expected));
  // Pinned: the whole mapping is resident after a pass.
  EXPECT_EQ(resident_weight_peak(m, true), ample.weights_bytes);
  const BudgetSummary tight = set_budget(m, 2 * kMiB);
  EXPECT_GT(tight.streamed_bytes, 0u);
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), expected));
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), expected));
  EXPECT_LT(resident_weight_peak(m, true), ample.weights_bytes);
  sample_resident_weights(m, false);
  const PlanStats run = plan_stats() - before;
  EXPECT_EQ(run.profiled_passes, 0u);
  EXPECT_EQ(run.plans, 0u);
}

TEST_F(Budget, TooSmallABudgetNamesTheSmallestFeasibleOne) {
  torch::jit::Module m = network();
  try {
    plan(m, {x}, budgeted(64 << 10, dir));
    FAIL() << "expected BudgetTooSmall";
  } catch (const BudgetTooSmall& e) {
    EXPECT_GT(e.smallest_bytes, 64u << 10);
    EXPECT_NE(std::string(e.what()).find("smallest feasible budget"), std::string::npos);
    // That smallest budget is feasible, and a re-plan below it is refused and changes nothing.
    const BudgetSummary fits = set_budget(m, e.smallest_bytes);
    EXPECT_EQ(fits.budget_bytes, e.smallest_bytes);
    EXPECT_THROW(set_budget(m, e.smallest_bytes - 1), BudgetTooSmall);
    EXPECT_EQ(budget_summary(m)->budget_bytes, e.smallest_bytes);
  }
  EXPECT_TRUE(torch::equal(m.forward({x}).toTensor(), network().forward({x}).toTensor()));
}

// After a pass, no weight that streams stays mapped: loading a weight maps the neighbours' pages
// around its ends (the kernel's fault-around; measured after a pass with a cold page cache: 36-52
// KiB in each of five groups before they were dropped), which are dropped once it is done with.
TEST_F(Budget, NothingButThePinnedWeightsStaysMappedAfterAPass) {
  auto make = [] {
    torch::manual_seed(3);
    torch::jit::Module m("Chain");
    for (int i = 0; i < 6; ++i) {
      m.register_parameter("w" + std::to_string(i), torch::randn({256, 256}) * 0.1, false);
      m.register_parameter("b" + std::to_string(i), torch::randn({256}), false);
    }
    m.define(R"(
      def forward(self, x):
          y = torch.relu(torch.linear(x, self.w0, self.b0))
          y = torch.relu(torch.linear(y, self.w1, self.b1))
          y = torch.relu(torch.linear(y, self.w2, self.b2))
          y = torch.relu(torch.linear(y, self.w3, self.b3))
          y = torch.relu(torch.linear(y, self.w4, self.b4))
          return torch.linear(y, self.w5, self.b5)
    )");
    m.eval();
    return m;
  };
  torch::jit::Module reference = make();
  torch::jit::Module m = make();
  const at::Tensor input = torch::randn({1, 256});
  const at::Tensor expected = reference.forward({input}).toTensor();
  const PlanSummary plan_summary = plan(m, {input}, budgeted(64 * kMiB, dir));
  const BudgetSummary smallest = set_budget(m, budget_summary(m)->smallest_budget_bytes);
  ASSERT_GT(smallest.streamed_bytes, 0u);
  for (int pass = 0; pass < 4; ++pass) {
    if (pass % 2 == 0) drop_weight_page_cache(m);  // cold and warm
    EXPECT_TRUE(torch::equal(m.forward({input}).toTensor(), expected)) << "pass " << pass;
    uint64_t mapped = 0;
    for (const auto& p : m.named_parameters()) {
      mapped += mapped_bytes(p.value.data_ptr(), p.value.nbytes());
    }
    EXPECT_LE(mapped, smallest.pinned_bytes)
        << "pass " << pass << " slab " << plan_summary.slab_bytes;
  }
}

TEST_F(Budget, TheWeightFileIsWrittenOnceAndReused) {
  torch::jit::Module a = network();
  torch::jit::Module b = network();
  plan(a, {x}, budgeted(2 * kMiB, dir));
  plan(b, {x}, budgeted(2 * kMiB, dir));
  EXPECT_EQ(budget_summary(a)->weight_file, budget_summary(b)->weight_file);
  EXPECT_EQ(budget_summary(a)->weight_file.rfind(dir, 0), 0u);
}

TEST_F(Budget, RefusedWithTunedKernelsOrAfterAPlanWithoutOne) {
  torch::jit::Module m = network();
  PlanOptions options = budgeted(2 * kMiB, dir);
  options.kernels = Kernels::kTuned;
  EXPECT_THROW(plan(m, {x}, options), std::runtime_error);
  torch::jit::Module n = network();
  plan(n, {x});
  EXPECT_THROW(plan(n, {x}, budgeted(2 * kMiB, dir)), std::runtime_error);
  EXPECT_FALSE(budget_summary(n));
  EXPECT_THROW(set_budget(n, kMiB), std::runtime_error);
  // A weights directory that cannot be written: an error naming it, the module as it was (it
  // runs, and plans without a budget).
  torch::jit::Module k = network();
  try {
    plan(k, {x}, budgeted(2 * kMiB, "/proc/memoplan-cannot-write"));
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/memoplan-cannot-write"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(budget_summary(k));
  EXPECT_TRUE(torch::equal(k.forward({x}).toTensor(), network().forward({x}).toTensor()));
  plan(k, {x});
  EXPECT_TRUE(torch::equal(k.forward({x}).toTensor(), network().forward({x}).toTensor()));
}

}  // namespace
}  // namespace memoplan::torch_ext
