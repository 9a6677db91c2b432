// The engine called directly, on threads that follow the plan: explicit passes (warm-up, profile,
// replay), calloc/realloc/usable_size/alignment of planned blocks (automatic detection:
// engine_detection_test.cc). The Heap
// checks every block's pattern and that no two live blocks overlap, in every test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "engine_harness.h"

namespace memoplan::shim::testing {
namespace {

// With explicit marks: `passes` warm-up passes, the profiled one, the first replayed one; then
// the steady state.
uint64_t first_steady_pass() { return engine_options().passes + 2; }

// Runs passes with marks until the steady state begins.
void reach_steady_state(Heap& heap, const Script& script) {
  for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(script);
}

// `script` with `ops` inserted right after the allocation of block `id`.
Script insert_after_alloc(Script script, int id, const Script& ops) {
  const auto at = std::find_if(script.begin(), script.end(),
                               [id](const Op& op) { return op.kind == Op::kAlloc && op.id == id; });
  script.insert(at + 1, ops.begin(), ops.end());
  return script;
}

// Every engine test below skips itself when this one fails.
TEST(EngineSetup, ReservesItsAddressSpace) {
  ASSERT_EQ(engine_options().mode, Mode::kAuto);
  EXPECT_TRUE(engine_plans()) << "the engine could not reserve its tag and slab regions and runs "
                                 "unplanned (BUG under ThreadSanitizer: see the report)";
  EXPECT_TRUE(global().tags.reserved());
  EXPECT_TRUE(global().slabs.reserved());
}

TEST(EngineExplicitPasses, SteadyStateIsServedFromTheSlabWithoutFallbacks) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  on_fresh_thread([&] {
    Heap heap;
    const Counters before = counters();
    const uint64_t steady_passes = 6;
    for (uint64_t pass = 0; pass < first_steady_pass() + steady_passes; ++pass) {
      heap.pass(script);
      if (pass >= first_steady_pass()) {
        EXPECT_TRUE(heap.last_pass_all(Origin::kSlab))
            << "pass " << pass << ": " << heap.last_pass_origins();
      }
    }
    const Counters d = counters() - before;
    EXPECT_EQ(d.plans, 1u);
    EXPECT_EQ(d.plan_failures, 0u);
    EXPECT_EQ(d.steady_fallbacks, 0u);
    EXPECT_EQ(d.all_fallbacks(), 0u);
    EXPECT_GE(d.steady_hits, steady_passes * allocations_in(script));
  });
}

// The documented sequence: `passes` warm-up passes untouched, the next one profiled, replay from
// the one after, also with detect:true, where a thread profiles from its first allocation until
// its first memoplan_pass_begin.
TEST(EngineExplicitPasses, WarmupThenProfileThenReplay) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  on_fresh_thread([&] {
    Heap heap;
    const Counters before = counters();
    for (uint64_t pass = 0; pass < engine_options().passes; ++pass) {
      heap.pass(script);
      EXPECT_TRUE(heap.last_pass_all(Origin::kFallback))
          << "warm-up pass " << pass << ": " << heap.last_pass_origins();
    }
    EXPECT_EQ((counters() - before).plans, 0u) << "planned during the warm-up";
    heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kTag)) << "profiled pass: " << heap.last_pass_origins();
    EXPECT_EQ((counters() - before).plans, 1u);
    heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << "first replay: " << heap.last_pass_origins();
  });
}

TEST(EngineExplicitPasses, CallocOfReusedSlabMemoryIsZeroed) {
  SKIP_UNLESS_ENGINE_PLANS();
  // A is filled and freed; B, a calloc with a disjoint lifetime, is planned into A's bytes.
  const Script script = {alloc(1, 32768), free_op(1), alloc(2, 16384, 16, /*zero=*/true),
                         free_op(2)};
  on_fresh_thread([&] {
    Heap heap;
    reach_steady_state(heap, script);
    for (int pass = 0; pass < 3; ++pass) {
      heap.pass(script);  // the Heap checks that B is all zero
      ASSERT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
      const Allocated& a = heap.last_pass()[0];
      const Allocated& b = heap.last_pass()[1];
      EXPECT_TRUE(b.p >= a.p && b.p < a.p + a.size) << "B does not reuse A's bytes: vacuous";
    }
  });
}

TEST(EngineExplicitPasses, ReallocMovesASlabBlockOutWithItsContent) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  const Script resizing =
      insert_after_alloc(insert_after_alloc(script, 5, {realloc_op(5, 70000)}), 6,
                         {realloc_op(6, 4096)});  // grow one block, shrink the next
  on_fresh_thread([&] {
    Heap heap;
    reach_steady_state(heap, script);
    const Counters before = counters();
    heap.begin_pass();
    for (const Op& op : resizing) {
      if (op.kind == Op::kRealloc) {
        ASSERT_EQ(origin_of(heap.pointer(op.id)), Origin::kSlab) << "block " << op.id;
      }
      heap.run({op});  // the Heap checks the content a realloc keeps
      if (op.kind == Op::kRealloc) {
        EXPECT_EQ(origin_of(heap.pointer(op.id)), Origin::kFallback) << "block " << op.id;
      }
    }
    heap.end_pass();
    EXPECT_EQ((counters() - before).moved_by_realloc, 2u);
    // The moved blocks left the slab's live ranges: the next plain pass is planned again.
    heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
}

TEST(EngineExplicitPasses, UsableSizeOfASlabBlockIsItsRequestedSize) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  on_fresh_thread([&] {
    Heap heap;
    reach_steady_state(heap, script);
    heap.pass(script);
    ASSERT_TRUE(heap.last_pass_all(Origin::kSlab));
    heap.begin_pass();
    for (const Op& op : script) {
      heap.run({op});
      if (op.kind == Op::kAlloc) {
        EXPECT_EQ(engine_usable_size(heap.pointer(op.id)), op.size) << "block " << op.id;
      }
    }
    heap.end_pass();
  });
}

// Two planned blocks share offset 0 at different times: 64 KiB, then 8 KiB.
const Script kSharedOffset = {alloc(1, 65536), free_op(1), alloc(2, 8192), free_op(2)};

// BUG (see the report): from a thread other than the owner, slab_usable_size answers the smallest
// planned size at the block's offset (replay.cc, slab_usable_size), here 8 KiB for a 64 KiB
// block; malloc_usable_size must never be below the requested size.
TEST(EngineExplicitPasses, UsableSizeFromAnotherThreadCoversTheBlock) {
  SKIP_UNLESS_ENGINE_PLANS();
  on_fresh_thread([&] {
    Heap heap;
    reach_steady_state(heap, kSharedOffset);
    heap.begin_pass();
    heap.run({alloc(1, 65536)});
    ASSERT_EQ(origin_of(heap.pointer(1)), Origin::kSlab);
    EXPECT_GE(heap.usable_size_elsewhere(1), 65536u);
    heap.run({free_op(1), alloc(2, 8192), free_op(2)});
    heap.end_pass();
  });
}

// BUG (see the report): engine_realloc copies engine_usable_size(p) bytes, which from another
// thread is the smallest planned size at that offset: the rest of the block is lost.
TEST(EngineExplicitPasses, ReallocFromAnotherThreadKeepsTheWholeBlock) {
  SKIP_UNLESS_ENGINE_PLANS();
  on_fresh_thread([&] {
    Heap heap;
    reach_steady_state(heap, kSharedOffset);
    heap.begin_pass();
    heap.run({alloc(1, 65536)});
    ASSERT_EQ(origin_of(heap.pointer(1)), Origin::kSlab);
    heap.run({realloc_elsewhere(1, 131072)});  // the Heap checks all 65,536 bytes moved
    heap.run({free_op(1), alloc(2, 8192), free_op(2)});
    heap.end_pass();
  });
}

TEST(EngineExplicitPasses, ProfiledBlocksLiveInTagSlots) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  const auto block_7 = std::find_if(script.begin(), script.end(), [](const Op& op) {
    return op.kind == Op::kAlloc && op.id == 7;
  });
  const Script first_half(script.begin(), block_7), second_half(block_7, script.end());
  on_fresh_thread([&] {
    Heap heap;
    // Run passes until block 5 is a profiled (tag) block, and deviate in that pass.
    bool profiled = false;
    for (uint64_t pass = 0; pass <= engine_options().passes && !profiled; ++pass) {
      heap.begin_pass();
      heap.run(first_half);
      profiled = origin_of(heap.pointer(5)) == Origin::kTag;
      if (profiled) {
        EXPECT_EQ(engine_usable_size(heap.pointer(5)), heap.size(5));
        heap.run({realloc_op(5, 100000)});  // moves out of the tag slot, content checked
        EXPECT_EQ(origin_of(heap.pointer(5)), Origin::kFallback);
        const size_t size_6 = heap.size(6);
        heap.run({free_elsewhere(6), alloc(6, size_6)});  // a profiled block freed elsewhere
      }
      heap.run(second_half);
      heap.end_pass();
    }
    EXPECT_TRUE(profiled);
    for (int pass = 0; pass < 4; ++pass) heap.pass(script);  // replay still keeps blocks apart
  });
}

// Offsets are planned at 64-byte alignment; a request for more falls back when the planned
// offset lacks it. BUG (see the report): the profile does not record the alignment (Record has no
// field for it, and plan_builder.cc leaves Allocation::align at 0), so requests aligned above 64
// bytes are served by the fallback in every steady-state pass, counted as fallbacks.
TEST(EngineExplicitPasses, AlignedRequestsAreServedFromTheSlab) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = {alloc(1, 10000), alloc(2, 20000, 4096),
                         free_op(1),      alloc(3, 12288, 256),
                         free_op(2),      free_op(3)};
  on_fresh_thread([&] {
    Heap heap;
    reach_steady_state(heap, script);
    const Counters before = counters();
    heap.pass(script);  // the Heap checks every pointer's alignment
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    EXPECT_EQ((counters() - before).fallback(FallbackReason::kAlignment), 0u);
  });
}

TEST(EngineExplicitPasses, AlignmentIsHonouredInEveryPhase) {
  SKIP_UNLESS_ENGINE_PLANS();
  Script script;
  int id = 1;
  for (size_t alignment = 16; alignment <= 65536; alignment *= 2) {
    script.push_back(alloc(id, 4096 + 64 * id, alignment));
    if (id > 2) script.push_back(free_op(id - 2));
    ++id;
  }
  script.push_back(free_op(id - 2));
  script.push_back(free_op(id - 1));
  on_fresh_thread([&] {
    Heap heap;  // checks every block's alignment, in every pass
    for (uint64_t pass = 0; pass < first_steady_pass() + 3; ++pass) heap.pass(script);
    // ... and the aligned requests were planned, not handed to the fallback for their alignment.
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
}

// Allocations between marked passes are not part of the plan: they must neither take a planned
// slot nor count as steady-state fallbacks.
TEST(EngineExplicitPasses, AllocationsBetweenPassesPassThrough) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  const Script between = {alloc(200, script[1].size), free_op(200)};  // block 1's size and key
  on_fresh_thread([&] {
    Heap heap;
    reach_steady_state(heap, script);
    const Counters before = counters();
    for (int pass = 0; pass < 4; ++pass) {
      heap.pass(script);
      EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
      heap.run(between);
      EXPECT_EQ(heap.last_pass().back().origin, Origin::kFallback) << "took a planned slot";
    }
    EXPECT_EQ((counters() - before).steady_fallbacks, 0u);
  });
}

// BUG (see the report): with detect:true a thread profiles from its first allocation; if the
// detector finds a period before the program's first memoplan_pass_begin (here: a loop making
// the same allocation 100 times while loading weights), the thread replays that plan forever and
// the explicit passes are never profiled (engine_pass_begin's kReplaying case only resets the
// cursor).
TEST(EngineExplicitPasses, MarksTakeOverFromAnEarlierDetection) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!engine_options().detect) GTEST_SKIP() << "needs detect:true";
  const Script script = network_pass();
  on_fresh_thread([&] {
    Heap heap;
    for (int weight = 0; weight < 100; ++weight) {
      heap.run({alloc(1000 + weight, 8192)});
      heap.hold(1000 + weight);
    }
    for (uint64_t pass = 0; pass < first_steady_pass() + 2; ++pass) heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
}

}  // namespace
}  // namespace memoplan::shim::testing
