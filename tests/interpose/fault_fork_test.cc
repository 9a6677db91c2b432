// fork in the middle of a pass, both sides going on allocating a lot: each side finishes the pass
// on its own copy of the slab and runs hundreds of passes with deviations, every block checked.
// And fork while other threads own slabs: in the child those threads are gone, so their empty
// slabs come back at once and the others when the child frees their last block.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engine_harness.h"
#include "fault_test_support.h"

namespace memoplan::shim::testing {
namespace {

// Passes with a random deviation each: skipped, extra, resized, kept into the next pass.
void deviating_passes(Heap& heap, const Script& script, int passes, uint32_t seed) {
  std::mt19937 random(seed);
  for (int pass = 0; pass < passes; ++pass) {
    Script s = script;
    const int victim = 1 + static_cast<int>(random() % 12);
    const auto at = [&](Op::Kind kind) {
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i].kind == kind && s[i].id == victim) return i;
      }
      return s.size();
    };
    switch (random() % 5) {
      case 0:
        break;
      case 1:  // skipped
        s.erase(s.begin() + static_cast<ptrdiff_t>(at(Op::kFree)));
        s.erase(s.begin() + static_cast<ptrdiff_t>(at(Op::kAlloc)));
        break;
      case 2:  // an extra block with a planned size
        s.insert(s.begin() + static_cast<ptrdiff_t>(random() % s.size()),
                 alloc(800, s[at(Op::kAlloc)].size));
        s.push_back(free_op(800));
        break;
      case 3:  // resized
        s.insert(s.begin() + static_cast<ptrdiff_t>(at(Op::kAlloc)) + 1,
                 realloc_op(victim, 4096 + random() % 60000));
        break;
      case 4:  // kept alive into later passes
        s.erase(s.begin() + static_cast<ptrdiff_t>(at(Op::kFree)));
        break;
    }
    heap.pass(s);
    if (heap.pointer(victim)) heap.hold(victim);
    if (random() % 3 == 0) heap.release_held();
  }
  heap.release_held();
}

TEST(FaultFork, BothSidesKeepAllocatingAfterAForkMidPass) {
  SKIP_UNLESS_ENGINE_PLANS();
  on_fresh_thread([] {
    Heap heap;
    const Script script = network_pass();
    for (uint64_t pass = 0; pass < engine_options().passes + 2; ++pass) heap.pass(script);
    ASSERT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    heap.begin_pass();
    heap.run(Script(script.begin(), script.begin() + script.size() / 2));
    const Counters before = counters();
    const pid_t pid = fork_quietly();
    ASSERT_GE(pid, 0);
    // Both sides: finish the pass, then 300 deviating passes, then plain ones that must replay.
    heap.run(Script(script.begin() + script.size() / 2, script.end()));
    heap.end_pass();
    deviating_passes(heap, script, 300, pid == 0 ? 7 : 8);
    heap.pass(script);
    heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    EXPECT_EQ((counters() - before).forks, pid == 0 ? 1u : 0u);
    if (pid == 0) _exit(::testing::Test::HasFailure() ? 1 : 0);
    EXPECT_EQ(child_status(pid), 0) << "the child found a lost or overlapping block";
  });
}

TEST(FaultFork, ChildReleasesTheSlabsOfThreadsThatDidNotFollow) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  const uint64_t steady = engine_options().passes + 2;
  const uint32_t slabs_before = slabs_in_use();
  // Three planned threads wait between passes (no block alive) and one in the middle of a pass,
  // having given a block away to the forking thread.
  std::mutex m;
  std::condition_variable cv;
  int parked = 0;
  bool finish = false;
  GivenBlock given;
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      Heap heap;
      for (uint64_t pass = 0; pass < steady; ++pass) heap.pass(script);
      if (k == 0) {
        heap.begin_pass();
        heap.run(Script(script.begin(), script.begin() + 3));
        std::lock_guard<std::mutex> lock(m);
        given = heap.give_away(script.front().id);
      }
      std::unique_lock<std::mutex> lock(m);
      ++parked;
      cv.notify_all();
      cv.wait(lock, [&] { return finish; });
    });
  }
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return parked == 4; });
  }
  ASSERT_EQ(origin_of(given.p), Origin::kSlab);
  EXPECT_EQ(slabs_in_use(), slabs_before + 4);
  const Counters before = counters();
  const pid_t pid = fork_quietly();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Only the blocked thread's slab stays: its blocks are alive in this process's memory. The
    // block handed over is freed here: that slab had two more live blocks (its owner's, which no
    // one in the child can free), so it stays too.
    int status = 0;
    if (slabs_in_use() != slabs_before + 1) status = 1;
    if (!intact(given)) status = 2;
    engine_free(given.p);
    if (slabs_in_use() != slabs_before + 1) status = 3;
    if ((counters() - before).forks != 1) status = 4;
    _exit(status);
  }
  EXPECT_EQ(child_status(pid), 0);
  EXPECT_EQ(slabs_in_use(), slabs_before + 4) << "the parent's threads keep theirs";
  {
    std::lock_guard<std::mutex> lock(m);
    finish = true;
    cv.notify_all();
  }
  for (std::thread& t : threads) t.join();
  // The mid-pass thread exited with the handed-over block alive: its slab waits for that free.
  EXPECT_EQ(slabs_in_use(), slabs_before + 1);
  EXPECT_TRUE(intact(given));
  engine_free(given.p);
  EXPECT_EQ(slabs_in_use(), slabs_before);
}

}  // namespace
}  // namespace memoplan::shim::testing
