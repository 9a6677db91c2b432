// Shape families in the graph pass (issue 18): once three lengths of a module's input were
// profiled, every other length is planned from the family's formulas on its first pass (no warm-up,
// no profiling), outputs identical; a wrong prediction falls back and drops the plan; passes that
// differ in structure keep exact keys; a thread's slab for a family grows instead of multiplying.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memoplan/torch/plan.h"

namespace memoplan::torch_ext {
namespace {

// Self-attention over a [1, L, 64] input; `extra` is appended to forward's body.
torch::jit::Module attention(const std::string& extra = "") {
  torch::manual_seed(0);
  torch::jit::Module m("Attention" + std::to_string(std::hash<std::string>()(extra)));
  m.register_parameter("wqkv", torch::randn({192, 64}), false);
  m.register_parameter("wo", torch::randn({64, 64}), false);
  m.define(R"(
    def forward(self, x):
        qkv = torch.linear(x, self.wqkv)
        q = qkv[:, :, 0:64]
        k = qkv[:, :, 64:128]
        v = qkv[:, :, 128:192]
        p = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.125, -1)
        y = torch.layer_norm(torch.linear(torch.bmm(p, v), self.wo) + x, [64])
)" + extra +
           R"(
        return y
  )");
  m.eval();
  return m;
}

// The input of `length`: the same on every call and every thread (no shared random generator).
at::Tensor run(torch::jit::Module& m, int64_t length) {
  const at::Tensor x = torch::sin(torch::arange(length * 64, torch::kFloat) * 0.37 + length);
  return m.forward({x.reshape({1, length, 64})}).toTensor();
}

// Runs each length through both modules (their outputs must be identical) and returns what the
// passes did.
PlanStats run_lengths(torch::jit::Module& planned, torch::jit::Module& reference,
                      std::initializer_list<int64_t> lengths) {
  const PlanStats before = plan_stats();
  for (int64_t length : lengths) {
    EXPECT_TRUE(torch::equal(run(planned, length), run(reference, length))) << length;
  }
  return plan_stats() - before;
}

// A buffer of (L // 2) * 64 floats: 128 L bytes at the even lengths profiled, less at odd ones.
const char* const kHalfBuffer = R"(
        h = torch.zeros([x.size(1) // 2 * 64])
        y = y + h.sum())";

// Plans `m` and profiles three lengths: the family is fitted after the third.
void fit(torch::jit::Module& m, PlanOptions options = {}) {
  torch::manual_seed(1);
  plan(m, {torch::randn({1, 16, 64})}, options);
  for (int64_t length : {24, 40}) {
    torch::manual_seed(2);
    plan(m, {torch::randn({1, length, 64})}, options);
  }
}

TEST(FamilyPlan, UnseenLengthsArePlannedOnTheirFirstPass) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = attention(), planned = attention();
  fit(planned);
  const PlanStats d =
      run_lengths(planned, reference, {8, 8, 50, 50, 100, 100, 33, 33, 7, 7, 64, 64});
  EXPECT_EQ(d.planned_passes, 12u) << to_string(d);
  EXPECT_EQ(d.profiled_passes + d.unplanned_passes, 0u) << to_string(d);
  EXPECT_EQ(d.family_plans, 6u) << to_string(d);
  EXPECT_EQ(d.family_mispredictions, 0u) << to_string(d);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
  EXPECT_GT(d.planned_hits, 12u * 5) << to_string(d);
}

TEST(FamilyPlan, AWrongPredictionFallsBackAndItsKeyIsProfiled) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = attention(kHalfBuffer), planned = attention(kHalfBuffer);
  fit(planned);
  PlanStats d = run_lengths(planned, reference, {48});  // even: predicted right
  EXPECT_EQ(d.family_plans, 1u) << to_string(d);
  EXPECT_EQ(d.family_mispredictions, 0u) << to_string(d);

  // Odd, six passes: the buffer misses its slot (never overlaps), and the plan goes.
  d = run_lengths(planned, reference, {33, 33, 33, 33, 33, 33});
  EXPECT_EQ(d.family_plans, 1u) << to_string(d);
  EXPECT_EQ(d.family_mispredictions, 1u) << to_string(d);
  EXPECT_EQ(d.fallback_not_planned, 1u) << to_string(d);
  // Then as any new key: three warm-up passes, one profiled, one planned exactly. The family,
  // fitted again on four shapes, has no formula for the buffer now: no more predictions.
  EXPECT_EQ(d.unplanned_passes, 3u) << to_string(d);
  EXPECT_EQ(d.profiled_passes, 1u) << to_string(d);
  EXPECT_EQ(d.planned_passes, 2u) << to_string(d);
  EXPECT_EQ(d.fallback_overlap, 0u) << to_string(d);

  // A new length is profiled at once (the family still collects shapes); on five shapes no
  // formula fits, and the family is given up: the next length waits out a warm-up.
  d = run_lengths(planned, reference, {52});
  EXPECT_EQ(d.family_plans, 0u) << to_string(d);
  EXPECT_EQ(d.profiled_passes, 1u) << to_string(d);
  d = run_lengths(planned, reference, {70});
  EXPECT_EQ(d.family_plans + d.profiled_passes, 0u) << to_string(d);
  EXPECT_EQ(d.unplanned_passes, 1u) << to_string(d);
}

TEST(FamilyPlan, TwoMispredictedKeysEndTheFamilysPredictions) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = attention(kHalfBuffer), planned = attention(kHalfBuffer);
  fit(planned);
  // Two misses before either odd length is profiled.
  const PlanStats d = run_lengths(planned, reference, {33, 35, 48});
  EXPECT_EQ(d.family_plans, 2u) << to_string(d);
  EXPECT_EQ(d.family_mispredictions, 2u) << to_string(d);
  EXPECT_EQ(d.unplanned_passes, 1u) << to_string(d);  // 48 would have fitted: not predicted now
}

TEST(FamilyPlan, PassesThatDifferInStructureKeepExactKeys) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  // One more layer norm per 16 positions: the number of ops follows the length.
  const std::string loop = R"(
        for _ in range(x.size(1) // 16):
            y = torch.layer_norm(y, [64]))";
  torch::jit::Module reference = attention(loop), planned = attention(loop);
  fit(planned);  // 16 and 24 run one more layer norm, 40 two: no three shapes alike yet
  PlanStats d = run_lengths(planned, reference, {64});  // a fourth shape: profiled at once
  EXPECT_EQ(d.family_plans, 0u) << to_string(d);
  EXPECT_EQ(d.profiled_passes, 1u) << to_string(d);
  // Six shapes and no three alike: the family is given up, new lengths warm up as before.
  run_lengths(planned, reference, {80, 100});
  d = run_lengths(planned, reference, {120});
  EXPECT_EQ(d.family_plans + d.profiled_passes, 0u) << to_string(d);
  EXPECT_EQ(d.unplanned_passes, 1u) << to_string(d);
}

// A shape whose pass differs in structure from the others (a CNN's batch 1, which takes another
// convolution path) is left out of the fit instead of spoiling the family.
TEST(FamilyPlan, AShapeOfAnotherStructureIsLeftOut) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  // Length 16 runs one more layer norm than every length from 17 to 31.
  const std::string odd = R"(
        if x.size(1) == 16:
            y = torch.layer_norm(y, [64]))";
  torch::jit::Module reference = attention(odd), planned = attention(odd);
  fit(planned);  // 16 (the odd one), 24, 40
  const PlanStats d = run_lengths(planned, reference, {30, 20, 28, 18, 16});
  EXPECT_EQ(d.profiled_passes, 1u) << to_string(d);  // 30: the third of the larger structure
  EXPECT_EQ(d.family_plans, 3u) << to_string(d);     // 20, 28, 18; 16 keeps its own plan
  EXPECT_EQ(d.planned_passes, 4u) << to_string(d);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
}

TEST(FamilyPlan, AThreadsSlabForAFamilyGrowsInsteadOfMultiplying) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = attention(), planned = attention();
  fit(planned);
  std::vector<int64_t> lengths;
  for (int64_t length = 8; length <= 100; ++length) lengths.push_back(length);
  std::shuffle(lengths.begin(), lengths.end(), std::mt19937(7));
  const PlanStats before = plan_stats();
  uint64_t largest_so_far = 0, new_largest = 0;
  for (int64_t length : lengths) {
    EXPECT_TRUE(torch::equal(run(planned, length), run(reference, length))) << length;
    if (length > static_cast<int64_t>(largest_so_far)) {
      largest_so_far = static_cast<uint64_t>(length);
      ++new_largest;
    }
  }
  const PlanStats d = plan_stats() - before;
  EXPECT_EQ(d.family_plans, 93u - 3u) << to_string(d);  // 16, 24 and 40 have their own plans
  EXPECT_EQ(d.planned_passes, 93u) << to_string(d);
  // One arena for every plan of the family on this thread, replaced by a larger one only when a
  // length larger than all before it comes (the slab grows with the length).
  EXPECT_LE(d.slabs, new_largest) << to_string(d);
  EXPECT_LT(new_largest, 12u);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
}

// The family learns a placement order from a `best` plan of its largest fitted shape; every other
// shape's plan, predicted or profiled, places its rows in that order too: as small as `best`'s
// own plan of that shape, where the default strategy alone is not.
TEST(FamilyPlan, EveryShapesPlanIsAsSmallAsTheBestStrategys) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = attention(), planned = attention();
  fit(planned);
  int default_larger = 0;
  for (int64_t length : {8, 50, 100, 77, 16, 24, 40}) {  // the last three were profiled
    EXPECT_TRUE(torch::equal(run(planned, length), run(reference, length))) << length;
    const PassOutcome pass = last_pass();
    ASSERT_TRUE(pass.fully_planned()) << length;
    EXPECT_EQ(pass.predicted, length != 16 && length != 24 && length != 40) << length;
    // What `best` and the default strategy make of this length's profiled pass (each a module's
    // first key: no family behind it).
    auto own_plan = [&](const char* strategy) {
      torch::jit::Module alone = attention();
      PlanOptions options;
      options.strategy = strategy;
      return plan(alone, {torch::randn({1, length, 64})}, options);
    };
    const PlanSummary best = own_plan("best"), plain = own_plan("greedy_by_size");
    EXPECT_LE(pass.slab_bytes, best.slab_bytes)
        << length << ": default strategy alone " << plain.slab_bytes;
    EXPECT_GE(pass.slab_bytes, pass.lower_bound_bytes) << length;
    EXPECT_EQ(pass.lower_bound_bytes, best.lower_bound_bytes) << length;
    default_larger += plain.slab_bytes > pass.slab_bytes;
  }
  EXPECT_GT(default_larger, 0) << "the default strategy was as good alone: nothing was shown";
}

// The plans of a family are bounded: a thread keeps its 64 most recently used, the module the
// 256 newest predicted ones of a family; an older length is predicted again when it returns
// (a fraction of a millisecond), a recent one is still cached.
TEST(FamilyPlan, CachedPlansAreBounded) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = attention(), planned = attention();
  fit(planned);
  std::vector<int64_t> lengths;
  for (int64_t length = 41; length < 41 + 300; ++length) lengths.push_back(length);
  PlanStats before = plan_stats();
  for (int64_t length : lengths) {
    EXPECT_TRUE(torch::equal(run(planned, length), run(reference, length))) << length;
  }
  PlanStats d = plan_stats() - before;
  EXPECT_EQ(d.family_plans, 300u) << to_string(d);
  d = run_lengths(planned, reference, {340});  // the newest: in the thread's cache
  EXPECT_EQ(d.family_plans, 0u) << to_string(d);
  EXPECT_EQ(d.planned_passes, 1u) << to_string(d);
  d = run_lengths(planned, reference, {41});  // the oldest: dropped by both, predicted again
  EXPECT_EQ(d.family_plans, 1u) << to_string(d);
  EXPECT_EQ(d.planned_passes, 1u) << to_string(d);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
}

TEST(FamilyPlan, ForgetPlansStartsOverAndGivesTheSlabsBack) {
  at::set_num_threads(1);
  c10::InferenceMode guard;
  torch::jit::Module reference = attention(), planned = attention();
  fit(planned);
  EXPECT_TRUE(torch::equal(run(planned, 90), run(reference, 90)));  // predicted
  forget_plans(planned);
  const PlanStats before = plan_stats();
  for (int pass = 0; pass < 5; ++pass) {
    EXPECT_TRUE(torch::equal(run(planned, 90), run(reference, 90))) << pass;
  }
  const PlanStats d = plan_stats() - before;
  // Warm-up (3), profiled, then planned again: nothing of the family was kept.
  EXPECT_EQ(d.unplanned_passes, 3u) << to_string(d);
  EXPECT_EQ(d.profiled_passes, 1u) << to_string(d);
  EXPECT_EQ(d.planned_passes, 1u) << to_string(d);
  EXPECT_EQ(d.family_plans, 0u) << to_string(d);
  EXPECT_EQ(d.slabs, 1u) << to_string(d);  // a new one: the old slabs were given back
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
}

TEST(FamilyPlan, ConcurrentThreadsOfDifferentLengths) {
  at::set_num_threads(1);
  torch::jit::Module reference = attention(), planned = attention();
  {
    c10::InferenceMode guard;
    fit(planned);
  }
  const PlanStats before = plan_stats();
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      c10::InferenceMode guard;
      for (int i = 0; i < 20; ++i) {
        const int64_t length = 8 + (w * 37 + i * 11) % 90;
        torch::jit::Module mine = planned;  // shares the planned graph and its plans
        if (!torch::equal(run(mine, length), run(reference, length))) ++mismatches[w];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(mismatches[w], 0) << "thread " << w;
  const PlanStats d = plan_stats() - before;
  EXPECT_EQ(d.planned_passes, 80u) << to_string(d);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
}

// Convolutions (oneDNN) on two threads whose batches vary: one thread profiles new shapes (its
// session puts the tagged allocator in c10's slot) while the other replays, and oneDNN frees its
// scratch memory through whichever allocator is in the slot at the free. A slab block freed
// through the tagged allocator used to reach the system free ("free(): invalid pointer").
TEST(FamilyPlan, ConvolutionsOnThreadsThatProfileWhileOthersReplay) {
  at::set_num_threads(1);
  torch::manual_seed(0);
  torch::jit::Module m("Convs");
  m.register_parameter("w1", torch::randn({32, 3, 3, 3}), false);
  m.register_parameter("w2", torch::randn({64, 32, 3, 3}), false);
  m.define(R"(
    def forward(self, x):
        y = torch.relu(torch.conv2d(x, self.w1, None, [1, 1], [1, 1]))
        y = torch.relu(torch.conv2d(y, self.w2, None, [2, 2], [1, 1]))
        return torch.flatten(torch.adaptive_avg_pool2d(y, [1, 1]), 1)
  )");
  m.eval();
  torch::jit::Module reference = m.clone(), planned = m.clone();
  auto input = [](int64_t batch) {
    return torch::sin(torch::arange(batch * 3 * 96 * 96, torch::kFloat) * 0.01 + batch)
        .reshape({batch, 3, 96, 96});
  };
  {
    c10::InferenceMode guard;
    plan(planned, {input(2)});
  }
  const PlanStats before = plan_stats();
  std::vector<int> mismatches(2, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      c10::InferenceMode guard;
      for (int i = 0; i < 40; ++i) {
        const int64_t batch = 1 + (w * 5 + i * (w ? 3 : 1)) % 7;
        torch::jit::Module mine = planned;
        const at::Tensor x = input(batch);
        if (!torch::equal(mine.forward({x}).toTensor(), reference.forward({x}).toTensor())) {
          ++mismatches[w];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches[0] + mismatches[1], 0);
  const PlanStats d = plan_stats() - before;
  EXPECT_GT(d.planned_passes, 40u) << to_string(d);
  EXPECT_EQ(d.fallback_not_planned + d.fallback_overlap, 0u) << to_string(d);
}

}  // namespace
}  // namespace memoplan::torch_ext
