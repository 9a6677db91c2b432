// The engine called directly on threads that never mark their passes: automatic detection finds
// the repeated pass, is not fooled by repeated layers, stops when nothing repeats, and leaves a
// followed plan alone. The Heap checks every block's pattern and that no two live blocks overlap.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine_harness.h"

namespace memoplan::shim::testing {
namespace {

TEST(EngineAutomaticDetection, FindsThePassWithoutMarks) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!engine_options().detect) GTEST_SKIP() << "needs detect:true";
  const Script script = network_pass();
  on_fresh_thread([&] {
    Heap heap;
    const Counters before = counters();
    for (int pass = 0; pass < 30; ++pass) {
      heap.pass(script, /*marks=*/false);
      if (pass >= 20) {
        EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
      }
    }
    const Counters d = counters() - before;
    EXPECT_EQ(d.plans, 1u);
    EXPECT_EQ(d.steady_fallbacks, 0u);
  });
}

TEST(EngineAutomaticDetection, WithoutDetectionAnUnmarkedThreadIsLeftAlone) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (engine_options().detect) GTEST_SKIP() << "needs detect:false";
  const Script script = network_pass();
  on_fresh_thread([&] {
    Heap heap;
    const Counters before = counters();
    for (int pass = 0; pass < 10; ++pass) {
      heap.pass(script, /*marks=*/false);
      EXPECT_TRUE(heap.last_pass_all(Origin::kFallback)) << heap.last_pass_origins();
    }
    EXPECT_EQ((counters() - before).plans, 0u);
  });
}

// A stem, 30 identical layers of three chained blocks, and a head of `head_size` bytes.
Script layered_pass(size_t head_size) {
  Script script = {alloc(0, 50000)};
  int id = 1;
  for (int layer = 0; layer < 30; ++layer) {
    for (size_t size : {8192, 12288, 16384}) {
      script.push_back(alloc(id, size));
      script.push_back(free_op(id - 1));
      ++id;
    }
  }
  script.push_back(alloc(id, head_size));
  script.push_back(free_op(id - 1));
  script.push_back(free_op(id));
  return script;
}

// A transformer-like pass longer than the detector's first search (64 allocations): a stem, 30
// identical layers of three chained blocks, a head. The first search runs inside the first pass,
// where the layer (period 3) is already periodic for two periods, so the thread first locks onto
// the layer; the stem and head then fall back at every pass, the re-check sees requests the plan
// does not know in window after window, and the thread detects again, this time requiring the
// unknown request to be inside the pass: it finds the whole pass, and the passes after that are
// served from the slab alone.
TEST(EngineAutomaticDetection, LongPassWithRepeatedLayersIsNotMistakenForALayer) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!engine_options().detect) GTEST_SKIP() << "needs detect:true";
  const Script script = layered_pass(20000);
  on_fresh_thread([&] {
    Heap heap;
    const Counters before = counters();
    int pass = 0;
    for (; pass < 40 && !heap.last_pass_all(Origin::kSlab); ++pass) {
      heap.pass(script, /*marks=*/false);
    }
    ASSERT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    EXPECT_LE(pass, 20) << "passes before the whole pass was planned";
    const Counters settled = counters();
    EXPECT_GE((settled - before).redetections, 1u);
    for (int more = 0; more < 10; ++more) {
      heap.pass(script, /*marks=*/false);
      EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    }
    EXPECT_EQ((counters() - settled).steady_fallbacks, 0u);
    EXPECT_EQ((counters() - settled).redetections, 0u);
  });
}

// Re-detection must not profile forever: here the request the layer plan misses last in each
// window has a new size every pass (a one-off key), so no pass ever contains it. The search is
// relaxed, then given up; either way the thread leaves profiling (no tag-slot blocks, whose pages
// are mapped and unmapped per allocation) after a bounded number of passes (at most 3
// re-detections, each bounded by its record budget).
TEST(EngineAutomaticDetection, ARedetectionThatFindsNothingStopsProfiling) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!engine_options().detect) GTEST_SKIP() << "needs detect:true";
  on_fresh_thread([&] {
    Heap heap;
    for (int pass = 0; pass < 400; ++pass) {
      // The head has a new size every pass.
      heap.pass(layered_pass(20000 + 64 * static_cast<size_t>(pass)), /*marks=*/false);
    }
    for (const Allocated& a : heap.last_pass()) {
      EXPECT_NE(a.origin, Origin::kTag) << "still profiling: " << heap.last_pass_origins();
    }
  });
}

// A detected plan whose passes follow it is never re-detected, however many passes run.
TEST(EngineAutomaticDetection, AFollowedPlanIsNeverRedetected) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!engine_options().detect) GTEST_SKIP() << "needs detect:true";
  on_fresh_thread([&] {
    Heap heap;
    const Counters before = counters();
    for (int pass = 0; pass < 200; ++pass) heap.pass(network_pass(), /*marks=*/false);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    EXPECT_EQ((counters() - before).redetections, 0u);
    EXPECT_EQ((counters() - before).plans, 1u);
  });
}

}  // namespace
}  // namespace memoplan::shim::testing
