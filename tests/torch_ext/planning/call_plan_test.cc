// PlannedCall (memoplan/torch/call_plan.h): a call without a graph, planned through c10's
// allocator as one pass. Its temporaries come from the slab once planned, outputs identical; a
// call that allocates differently falls back, counted, its data intact; an exception mid-pass
// leaves nothing behind; options only a graph can have are refused.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "memoplan/torch/call_plan.h"

namespace memoplan::torch_ext {
namespace {

// A small network written as calls, the way AOTInductor's generated code calls aten: every
// intermediate a fresh tensor from c10's allocator.
at::Tensor call_network(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2, bool extra) {
  at::Tensor h = at::relu(at::matmul(x, w1));
  at::Tensor g = at::sigmoid(h) * h;
  if (extra) g = g + at::tanh(g);  // a pass the plan has never seen
  return at::matmul(g, w2);
}

TEST(PlannedCall, TemporariesComeFromTheSlabAndOutputsAreIdentical) {
  c10::InferenceMode inference;
  at::manual_seed(0);
  const at::Tensor x = at::randn({8, 256}), w1 = at::randn({256, 512}), w2 = at::randn({512, 64});
  const at::Tensor expected = call_network(x, w1, w2, false);
  PlannedCall call;
  at::Tensor out;
  const std::vector<c10::IValue> inputs = {x};
  const PlanSummary summary = call.plan(inputs, [&] { return call_network(x, w1, w2, false); });
  EXPECT_GT(summary.planned_tensors, 0u);
  EXPECT_GT(summary.slab_bytes, 0u);
  for (int i = 0; i < 5; ++i) {
    const PlanStats before = plan_stats();
    out = call.run(inputs, [&] { return call_network(x, w1, w2, false); }).toTensor();
    const PlanStats d = plan_stats() - before;
    EXPECT_TRUE(last_pass().fully_planned());
    EXPECT_GT(d.planned_hits, 0u);
    EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u);
    EXPECT_TRUE(at::equal(out, expected));
  }
}

TEST(PlannedCall, ADeviatingCallFallsBackCountedAndKeepsItsData) {
  c10::InferenceMode inference;
  at::manual_seed(1);
  const at::Tensor x = at::randn({4, 128}), w1 = at::randn({128, 256}), w2 = at::randn({256, 32});
  PlannedCall call;
  at::Tensor out;
  const std::vector<c10::IValue> inputs = {x};
  call.plan(inputs, [&] { return call_network(x, w1, w2, false); });
  const PlanStats before = plan_stats();
  out = call.run(inputs, [&] { return call_network(x, w1, w2, true); }).toTensor();
  const PlanStats d = plan_stats() - before;
  EXPECT_GT(d.fallback_not_planned + d.fallback_overlap, 0u);
  EXPECT_FALSE(last_pass().fully_planned());
  EXPECT_TRUE(at::equal(out, call_network(x, w1, w2, true)));
  // The plan stays: the usual call is planned again.
  call.run(inputs, [&] { return call_network(x, w1, w2, false); });
  EXPECT_TRUE(last_pass().fully_planned());
}

TEST(PlannedCall, AnExceptionEndsThePassAndTheNextOneIsPlanned) {
  c10::InferenceMode inference;
  const at::Tensor x = at::randn({4, 64}), w1 = at::randn({64, 64}), w2 = at::randn({64, 8});
  PlannedCall call;
  at::Tensor out;
  const std::vector<c10::IValue> inputs = {x};
  call.plan(inputs, [&] { return call_network(x, w1, w2, false); });
  EXPECT_THROW(call.run(inputs,
                        [&]() -> c10::IValue {
                          at::Tensor t = at::relu(at::matmul(x, w1));
                          throw std::runtime_error("the call failed");
                        }),
               std::runtime_error);
  at::Tensor outside = at::ones({4, 64});  // not in a pass: the allocator behind
  out = call.run(inputs, [&] { return call_network(x, w1, w2, false); }).toTensor();
  EXPECT_TRUE(last_pass().fully_planned());
  EXPECT_TRUE(at::equal(outside, at::ones({4, 64})));
  EXPECT_TRUE(at::equal(out, call_network(x, w1, w2, false)));
}

TEST(PlannedCall, OptionsThatNeedAGraphAreRefused) {
  PlanOptions tuned;
  tuned.kernels = Kernels::kTuned;
  EXPECT_THROW(PlannedCall{tuned}, std::invalid_argument);
  PlanOptions min;
  min.memory = Memory::kMin;
  EXPECT_THROW(PlannedCall{min}, std::invalid_argument);
  PlanOptions budget;
  budget.budget_bytes = 1 << 20;
  EXPECT_THROW(PlannedCall{budget}, std::invalid_argument);
}

}  // namespace
}  // namespace memoplan::torch_ext
