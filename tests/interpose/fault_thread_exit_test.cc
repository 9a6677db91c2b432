// A thread exits in the middle of a pass with planned blocks alive (in its slab, or in tag slots
// while it profiles) and hands them to other threads. Its memory must stay out of use while any of
// them lives — other threads keep planning and allocating meanwhile — and its slab is given back
// when the last one is freed, by whichever thread frees it.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "engine_harness.h"
#include "fault_test_support.h"

namespace memoplan::shim::testing {
namespace {

// Runs `passes` complete passes, then half a pass, and exits handing over every live block.
std::vector<GivenBlock> exit_mid_pass(const Script& script, uint64_t passes) {
  std::vector<GivenBlock> given;
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < passes; ++pass) heap.pass(script);
    heap.begin_pass();
    heap.run(Script(script.begin(), script.begin() + script.size() / 2));
    for (const Allocated& a : heap.last_pass()) {
      if (heap.pointer(a.id)) given.push_back(heap.give_away(a.id));
    }
  });
  return given;
}

bool overlaps(const GivenBlock& block, const Allocated& a) {
  return a.p < block.p + block.size && block.p < a.p + a.size;
}

// Frees the blocks on `threads` threads at once, each checking its blocks' patterns first.
void free_on_threads(const std::vector<GivenBlock>& blocks, size_t threads) {
  std::vector<std::thread> freers;
  for (size_t k = 0; k < threads; ++k) {
    freers.emplace_back([&blocks, k, threads] {
      for (size_t i = k; i < blocks.size(); i += threads) {
        EXPECT_TRUE(intact(blocks[i])) << "block " << i << " was overwritten";
        engine_free(blocks[i].p);
      }
    });
  }
  for (std::thread& t : freers) t.join();
}

class FaultThreadExit : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_UNLESS_ENGINE_PLANS(); }
  const Script script_ = network_pass(16);
  const uint64_t steady_ = engine_options().passes + 2;
};

TEST_F(FaultThreadExit, PlannedBlocksOutliveTheirThreadAndAreFreedElsewhere) {
  const uint32_t slabs_before = slabs_in_use();
  const Counters before = counters();
  const std::vector<GivenBlock> given = exit_mid_pass(script_, steady_);
  ASSERT_GE(given.size(), 2u);
  for (const GivenBlock& block : given) ASSERT_EQ(origin_of(block.p), Origin::kSlab);
  EXPECT_EQ(slabs_in_use(), slabs_before + 1) << "the slab must stay while its blocks live";
  // Other threads plan and run passes meanwhile: never into the exited thread's live blocks.
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      Heap heap;
      for (uint64_t pass = 0; pass < steady_ + 20; ++pass) {
        heap.pass(script_);
        for (const Allocated& a : heap.last_pass()) {
          for (const GivenBlock& block : given) {
            EXPECT_FALSE(overlaps(block, a)) << "handed out memory that is still alive";
          }
        }
      }
      EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    });
  }
  for (std::thread& t : workers) t.join();
  EXPECT_EQ(slabs_in_use(), slabs_before + 1);
  free_on_threads(given, 3);
  EXPECT_EQ(slabs_in_use(), slabs_before) << "the last free gives the slab back";
  const Counters d = counters() - before;
  EXPECT_EQ(d.remote_frees, given.size());
  EXPECT_EQ(d.late_slab_releases, 1u);
}

// Exits in the middle of its profiled pass: the blocks live in tag slots, and the thread's
// records stay until the last of them is freed.
TEST_F(FaultThreadExit, ProfiledBlocksOutliveTheirThread) {
  const uint32_t slabs_before = slabs_in_use();
  const std::vector<GivenBlock> given = exit_mid_pass(script_, engine_options().passes);
  ASSERT_GE(given.size(), 2u);
  for (const GivenBlock& block : given) ASSERT_EQ(origin_of(block.p), Origin::kTag);
  std::thread worker([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < steady_ + 5; ++pass) {
      heap.pass(script_);
      for (const Allocated& a : heap.last_pass()) {
        for (const GivenBlock& block : given) EXPECT_FALSE(overlaps(block, a));
      }
    }
  });
  worker.join();
  free_on_threads(given, 2);
  EXPECT_EQ(slabs_in_use(), slabs_before);
}

// Many threads exit mid-pass, their blocks freed by a pool of others while new threads plan:
// slabs come back, and the live ones are never shared.
TEST_F(FaultThreadExit, ManyThreadsExitMidPass) {
  const uint32_t slabs_before = slabs_in_use();
  const Counters before = counters();
  std::vector<GivenBlock> all;
  for (int round = 0; round < 12; ++round) {
    std::vector<GivenBlock> given = exit_mid_pass(script_, steady_ + round % 3);
    all.insert(all.end(), given.begin(), given.end());
    if (round % 4 == 3) {  // free some rounds' blocks while others are still alive
      free_on_threads(all, 4);
      all.clear();
    }
  }
  free_on_threads(all, 4);
  EXPECT_EQ(slabs_in_use(), slabs_before);
  EXPECT_EQ((counters() - before).late_slab_releases, 12u);
}

}  // namespace
}  // namespace memoplan::shim::testing
