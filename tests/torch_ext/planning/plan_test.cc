// memoplan::torch_ext::plan on TorchScript modules: outputs identical to the unplanned module,
// every planned tensor of a steady-state pass served from the slab, new input keys planned on
// first use, concurrent forward calls on one module from several threads.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "memoplan/torch/plan.h"
#include "torch_test_support.h"

namespace memoplan::torch_ext {
namespace {

// A small CNN with a residual, a pooling op that delegates (max_pool2d -> with_indices) and a
// loop, defined in TorchScript.
torch::jit::Module small_cnn() {
  torch::manual_seed(0);
  torch::jit::Module m("SmallCnn");
  m.register_parameter("w1", torch::randn({16, 3, 3, 3}), false);
  m.register_parameter("w2", torch::randn({16, 16, 3, 3}), false);
  m.register_parameter("fc", torch::randn({10, 16}), false);
  m.define(R"(
    def forward(self, x):
        y = torch.relu(torch.conv2d(x, self.w1, None, [1, 1], [1, 1]))
        r = y
        for _ in range(2):
            y = torch.relu(torch.conv2d(y, self.w2, None, [1, 1], [1, 1]))
        y = torch.max_pool2d(y + r, [2, 2])
        y = torch.flatten(torch.adaptive_avg_pool2d(y, [1, 1]), 1)
        return torch.matmul(y, self.fc.t())
  )");
  m.eval();
  return m;
}

using testing::run;

TEST(Plan, OutputsAreIdenticalAndEveryPlannedTensorComesFromTheSlab) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = small_cnn();
  torch::jit::Module planned = small_cnn();
  const at::Tensor x = torch::randn({2, 3, 32, 32});
  const at::Tensor expected = run(reference, x);

  const PlanSummary summary = plan(planned, {x});
  EXPECT_GT(summary.planned_tensors, 3u);
  EXPECT_GE(summary.slab_bytes, summary.lower_bound_bytes);
  EXPECT_GT(summary.visits, 5u);

  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 10; ++pass) {
    EXPECT_TRUE(torch::equal(run(planned, x), expected)) << "pass " << pass;
  }
  const PlanStats d = (plan_stats() - before);
  EXPECT_EQ(d.planned_passes, 10u);
  EXPECT_EQ(d.planned_hits, 10 * summary.planned_tensors) << to_string(plan_stats());
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(plan_stats());
  // What still reaches the system allocator in a steady-state pass: the outputs, nothing else.
  EXPECT_EQ(d.tensor_mallocs, 10 * summary.escaping_tensors) << to_string(plan_stats());
}

// The warm-up passes before a key's plan give their tensors exact blocks (pages back at the
// free), so what they allocated is not kept by the allocator next to the slab; the profiled and
// planned passes do not.
TEST(Plan, WarmUpPassesUseExactBlocksOnly) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module planned = small_cnn();
  const at::Tensor x = torch::randn({2, 3, 32, 32});  // activations of 128 KiB: exact
  const PlanStats before = plan_stats();
  PlanOptions options;
  options.warmup_passes = 2;
  const PlanSummary summary = plan(planned, {x}, options);
  const PlanStats warm = plan_stats() - before;
  EXPECT_EQ(warm.unplanned_passes, 2u);
  EXPECT_GE(warm.warmup_exact_blocks, 2 * 4u) << to_string(warm);
  const PlanStats after_plan = plan_stats();
  for (int pass = 0; pass < 3; ++pass) run(planned, x);
  EXPECT_EQ((plan_stats() - after_plan).warmup_exact_blocks, 0u);
  EXPECT_GT(summary.planned_tensors, 3u);
}

TEST(Plan, ANewInputShapeIsPlannedOnFirstUseAndBothKeysReplay) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = small_cnn();
  torch::jit::Module planned = small_cnn();
  const at::Tensor small = torch::randn({1, 3, 16, 16});
  const at::Tensor large = torch::randn({4, 3, 24, 24});
  plan(planned, {small});
  for (int pass = 0; pass < 8; ++pass) {  // warm-up, profile, then replay of the new key
    EXPECT_TRUE(torch::equal(run(planned, large), run(reference, large)));
  }
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 4; ++pass) {
    EXPECT_TRUE(torch::equal(run(planned, small), run(reference, small)));
    EXPECT_TRUE(torch::equal(run(planned, large), run(reference, large)));
  }
  const PlanStats d = (plan_stats() - before);
  EXPECT_EQ(d.planned_passes, 8u) << to_string(plan_stats());
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(plan_stats());
}

TEST(Plan, WithoutNewKeysAnUnplannedShapeRunsUnplanned) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module planned = small_cnn();
  PlanOptions options;
  options.plan_new_keys = false;
  plan(planned, {torch::randn({1, 3, 16, 16})}, options);
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 8; ++pass) run(planned, torch::randn({2, 3, 16, 16}));
  const PlanStats d = (plan_stats() - before);
  EXPECT_EQ(d.planned_passes, 0u);
  EXPECT_EQ(d.planned_hits, 0u);
}

TEST(Plan, ConcurrentForwardCallsOnOneModule) {
  at::set_num_threads(1);
  torch::jit::Module reference = small_cnn();
  torch::jit::Module planned = small_cnn();
  const at::Tensor x = torch::randn({2, 3, 32, 32});
  at::Tensor expected;
  {
    c10::InferenceMode guard;
    expected = run(reference, x);
    plan(planned, {x});
  }
  const PlanStats before = plan_stats();
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      at::set_num_threads(1);
      c10::InferenceMode guard;
      for (int pass = 0; pass < 20; ++pass) {
        if (!torch::equal(run(planned, x), expected)) ++mismatches;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  const PlanStats d = (plan_stats() - before);
  EXPECT_EQ(d.planned_passes, 80u) << to_string(plan_stats());
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(plan_stats());
}

TEST(Plan, DefaultArgumentsArePartOfTheKey) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::manual_seed(0);
  torch::jit::Module m("WithDefaults");
  m.register_parameter("w", torch::randn({8, 8}), false);
  m.define(R"(
    def forward(self, x, mask: Optional[Tensor] = None, scale: float = 2.0):
        y = torch.relu(torch.matmul(x, self.w)) * scale
        if mask is not None:
            y = y + mask
        return torch.softmax(y, -1)
  )");
  const at::Tensor x = torch::randn({4, 8});
  const PlanSummary summary = plan(m, {x});  // mask and scale take their defaults
  EXPECT_GT(summary.planned_tensors, 0u);
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 3; ++pass) m.forward({x});
  EXPECT_EQ((plan_stats() - before).planned_passes, 3u) << to_string(plan_stats());
}

// Python caches `forward` as a Method (a pointer to the function) before plan() runs: that handle
// must run the planned graph too.
TEST(Plan, AForwardHandleTakenBeforePlanningRunsPlanned) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = small_cnn();
  torch::jit::Module planned = small_cnn();
  const at::Tensor x = torch::randn({1, 3, 16, 16});
  torch::jit::Method early = planned.get_method("forward");
  for (int pass = 0; pass < 4; ++pass) early({x});  // its executor exists and is warm
  plan(planned, {x});
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_TRUE(torch::equal(early({x}).toTensor(), run(reference, x)));
  }
  EXPECT_EQ((plan_stats() - before).planned_passes, 3u) << to_string(plan_stats());
}

// A mark (memoplan::AllocateTensor) goes before each node that may make tensor storage, and only
// there: attribute reads, container moves and views get none (they were 69-76% of the marks, a
// node each in every copy of the graph the executor keeps). The node's number is an attribute,
// so a mark is one node with no inputs.
TEST(Plan, MarksGoBeforeNodesThatMayMakeStorageOnly) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module planned = small_cnn();
  plan(planned, {torch::randn({1, 3, 16, 16})});
  const auto graph = torch::jit::toGraphFunction(planned.get_method("forward").function()).graph();
  const c10::Symbol mark = c10::Symbol::fromQualString("memoplan::AllocateTensor");
  std::map<std::string, int> marked, unmarked;
  std::function<void(torch::jit::Block*)> walk = [&](torch::jit::Block* block) {
    bool after_mark = false;
    for (torch::jit::Node* node : block->nodes()) {
      for (torch::jit::Block* inner : node->blocks()) walk(inner);
      if (node->kind() == mark) {
        EXPECT_EQ(node->inputs().size(), 0u);
        EXPECT_TRUE(node->hasAttribute(c10::Symbol::attr("memoplan_node")));
        after_mark = true;
        continue;
      }
      (after_mark ? marked : unmarked)[node->kind().toQualString()]++;
      after_mark = false;
    }
  };
  walk(graph->block());
  EXPECT_EQ(marked.count("prim::GetAttr"), 0u);
  EXPECT_EQ(marked.count("aten::t"), 0u);
  EXPECT_EQ(marked.count("prim::ListConstruct"), 0u);
  EXPECT_GT(unmarked["prim::GetAttr"], 0);
  EXPECT_GT(unmarked["aten::t"], 0);
  for (const char* op : {"aten::conv2d", "aten::relu", "aten::max_pool2d", "aten::matmul",
                         "aten::flatten", "aten::adaptive_avg_pool2d", "aten::add"}) {
    EXPECT_GT(marked[op], 0) << op;
    EXPECT_EQ(unmarked.count(op), 0u) << op;
  }
}

TEST(Plan, AModuleWithoutForwardIsRefused) {
  torch::jit::Module m("NoForward");
  EXPECT_THROW(plan(m, {}), std::runtime_error);
}

}  // namespace
}  // namespace memoplan::torch_ext
