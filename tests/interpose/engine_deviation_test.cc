// The engine under a program that deviates from its plan: skipped, extra, longer-lived and resized
// allocations, frees in another order or on another thread. The guard may fall back as often as it
// likes; what must never happen is two live blocks sharing a byte (the Heap checks every
// allocation's range and every block's pattern). After the deviation the plan serves again.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine_harness.h"

namespace memoplan::shim::testing {
namespace {

uint64_t first_steady_pass() { return engine_options().passes + 2; }

void reach_steady_state(Heap& heap, const Script& script) {
  for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(script);
  ASSERT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
}

// After a deviation: plain passes must be planned again (the guard forgot the deviant blocks).
void expect_recovery(Heap& heap, const Script& script) {
  heap.pass(script);
  heap.pass(script);
  EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << "no recovery: " << heap.last_pass_origins();
}

Script without(Script script, Op::Kind kind, int id) {
  script.erase(std::remove_if(script.begin(), script.end(),
                              [&](const Op& op) { return op.kind == kind && op.id == id; }),
               script.end());
  return script;
}

size_t index_of(const Script& script, Op::Kind kind, int id) {
  return static_cast<size_t>(
      std::find_if(script.begin(), script.end(),
                   [&](const Op& op) { return op.kind == kind && op.id == id; }) -
      script.begin());
}

Script insert_at(Script script, size_t index, const Script& ops) {
  script.insert(script.begin() + static_cast<ptrdiff_t>(index), ops.begin(), ops.end());
  return script;
}

// Runs `deviant` once in the steady state of `script`, with the fallback counters around it.
class EngineDeviation : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_UNLESS_ENGINE_PLANS(); }
  void run_deviation(const std::function<void(Heap&)>& deviate) {
    on_fresh_thread([&] {
      Heap heap;
      reach_steady_state(heap, script_);
      deviate(heap);
      expect_recovery(heap, script_);
    });
  }
  const Script script_ = network_pass();
};

TEST_F(EngineDeviation, SkippedAllocation) {
  run_deviation([&](Heap& heap) {
    heap.pass(without(without(script_, Op::kAlloc, 4), Op::kFree, 4));
    heap.pass(without(without(script_, Op::kAlloc, 1), Op::kFree, 1));  // the first of the chain
  });
}

TEST_F(EngineDeviation, ExtraAllocationWithTheKeyOfALaterBlock) {
  run_deviation([&](Heap& heap) {
    // Right after block 2, an extra block with block 7's size (so its key): it may take block 7's
    // planned offset, which is in use by blocks alive now, or fall back; then block 7 itself.
    const size_t after_2 = index_of(script_, Op::kAlloc, 2) + 1;
    const size_t size_7 = script_[index_of(script_, Op::kAlloc, 7)].size;
    heap.pass(insert_at(script_, after_2, {alloc(500, size_7)}));
    heap.run({free_op(500)});
  });
}

TEST_F(EngineDeviation, ExtraAllocationsWithEveryPlannedKey) {
  run_deviation([&](Heap& heap) {
    // Before every planned allocation, a twin with its key that stays alive to the pass end.
    Script doubled;
    std::vector<int> twins;
    for (const Op& op : script_) {
      if (op.kind == Op::kAlloc) {
        doubled.push_back(alloc(600 + op.id, op.size, op.alignment, op.zero));
        twins.push_back(600 + op.id);
      }
      doubled.push_back(op);
    }
    for (int twin : twins) doubled.push_back(free_op(twin));
    heap.pass(doubled);
  });
}

TEST_F(EngineDeviation, BlockLivesIntoTheNextPasses) {
  run_deviation([&](Heap& heap) {
    heap.pass(without(script_, Op::kFree, 3));
    heap.hold(3);
    heap.pass(without(script_, Op::kFree, 0));  // block 0 spans the whole pass: it collides
    heap.hold(0);
    heap.pass(script_);  // with two blocks from earlier passes still alive
    heap.release_held();
  });
}

TEST_F(EngineDeviation, ResizedAllocations) {
  run_deviation([&](Heap& heap) {
    Script resized = insert_at(script_, index_of(script_, Op::kAlloc, 3) + 1,
                               {realloc_op(3, 90000)});  // grows past any planned block
    resized = insert_at(resized, index_of(resized, Op::kAlloc, 8) + 1, {realloc_op(8, 5000)});
    heap.pass(resized);
    // A block allocated with another size than planned (a different key, and larger).
    Script bigger = script_;
    bigger[index_of(bigger, Op::kAlloc, 5)].size += 50000;
    heap.pass(bigger);
  });
}

TEST_F(EngineDeviation, FreesInReverseAndShuffledOrder) {
  run_deviation([&](Heap& heap) {
    // All allocations first, then every free in reverse; then in a shuffled order.
    Script allocations, frees;
    for (const Op& op : script_) (op.kind == Op::kAlloc ? allocations : frees).push_back(op);
    Script reversed = allocations;
    reversed.insert(reversed.end(), frees.rbegin(), frees.rend());
    heap.pass(reversed);
    std::mt19937 random(3);
    Script shuffled = allocations;
    std::shuffle(frees.begin(), frees.end(), random);
    shuffled.insert(shuffled.end(), frees.begin(), frees.end());
    heap.pass(shuffled);
  });
}

TEST_F(EngineDeviation, BlockFreedByAnotherThread) {
  run_deviation([&](Heap& heap) {
    const Counters before = counters();
    Script remote = script_;
    for (int id : {2, 5, 0}) remote[index_of(remote, Op::kFree, id)].kind = Op::kFreeElsewhere;
    heap.pass(remote);
    EXPECT_EQ((counters() - before).remote_frees, 3u);
  });
}

TEST_F(EngineDeviation, BlockFreedByAnotherThreadAfterTheOwnersNextPass) {
  run_deviation([&](Heap& heap) {
    heap.pass(without(script_, Op::kFree, 6));
    ASSERT_EQ(origin_of(heap.pointer(6)), Origin::kSlab);
    heap.hold(6);
    heap.pass(script_);  // block 6's bytes are still in use: the guard must keep them out
    heap.release_held(/*elsewhere=*/true);
  });
}

TEST_F(EngineDeviation, BlockFreedByAnotherThreadInEveryPass) {
  // Freed elsewhere in the profiled pass too: the profile cannot place its end on this thread's
  // clock, so it escapes the plan and gets an escaping block's two places after the slab; its free
  // reaches the arena as a remote free.
  Script remote = script_;
  remote[index_of(remote, Op::kFree, 4)].kind = Op::kFreeElsewhere;
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(remote);
    const Counters before = counters();
    heap.pass(remote);
    const Counters d = counters() - before;
    EXPECT_EQ(d.steady_fallbacks, 0u);
    EXPECT_EQ(d.fallback(FallbackReason::kEscaping), 0u);
    EXPECT_EQ(d.all_fallbacks(), 0u);
    EXPECT_EQ(d.remote_frees, 1u);
    EXPECT_EQ(origin_of(heap.last_pass()[4].p), Origin::kSlab);
  });
}

TEST_F(EngineDeviation, UnmarkedPassesAfterMarkedOnes) {
  run_deviation([&](Heap& heap) {
    heap.pass(script_, /*marks=*/false);
    heap.pass(script_, /*marks=*/false);
  });
}

// Random deviations, many passes: whatever the program does, live blocks never overlap.
TEST(EngineDeviationFuzz, RandomDeviationsNeverOverlapLiveBlocks) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass(16);
  on_fresh_thread([&] {
    Heap heap;
    reach_steady_state(heap, script);  // a plan from an undisturbed profile, then the chaos
    std::mt19937 random(20240611);
    const Counters before = counters();
    for (int pass = 0; pass < 300; ++pass) {
      Script s = script;
      const int victim = 1 + static_cast<int>(random() % 16);
      switch (random() % 8) {
        case 0:  // a normal pass
          break;
        case 1:  // skip a block
          s = without(without(s, Op::kAlloc, victim), Op::kFree, victim);
          break;
        case 2: {  // an extra block with a planned key, alive to the end of the pass
          const size_t size = s[index_of(s, Op::kAlloc, victim)].size;
          s = insert_at(s, random() % s.size(), {alloc(700, size)});
          s.push_back(free_op(700));
          break;
        }
        case 3:  // keep a block into the next pass
          s = without(s, Op::kFree, victim);
          break;
        case 4:  // resize a block
          s = insert_at(s, index_of(s, Op::kAlloc, victim) + 1,
                        {realloc_op(victim, 4096 + random() % 100000)});
          break;
        case 5:  // reorder the frees
        {
          Script allocations, frees;
          for (const Op& op : s) (op.kind == Op::kAlloc ? allocations : frees).push_back(op);
          std::shuffle(frees.begin(), frees.end(), random);
          s = allocations;
          s.insert(s.end(), frees.begin(), frees.end());
          break;
        }
        case 6:  // free a block on another thread
          s[index_of(s, Op::kFree, victim)].kind = Op::kFreeElsewhere;
          break;
        case 7:  // release what earlier passes kept, on another thread
          heap.release_held(/*elsewhere=*/true);
          break;
      }
      heap.pass(s);
      if (heap.pointer(victim)) heap.hold(victim);  // case 3
      if (random() % 4 == 0) heap.release_held();
    }
    heap.release_held();
    // Deviations cost fallbacks, but the plan kept serving most requests.
    const Counters d = counters() - before;
    EXPECT_GT(d.planned_hits, d.all_fallbacks());
    heap.pass(script);
    heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
}

}  // namespace
}  // namespace memoplan::shim::testing
