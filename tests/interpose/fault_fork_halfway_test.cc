// fork while another thread is half-way through a multi-step update inside the engine. The child
// inherits that thread's state as it was at that instruction and must cope without it: it neither
// gives back again what the stopped thread already gave back (a double free of its profile
// records, a slab slot released twice) nor breaks its own allocations. The fault-injection build
// stops a thread at a named point (fault::Point) so the fork lands exactly there.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "engine_harness.h"
#include "fault_injection.h"
#include "fault_test_support.h"

namespace memoplan::shim::testing {
namespace {

// Stops one thread the first time it reaches a point, until the test lets it go. The hook runs
// inside the engine: atomics and sched_yield only.
class Stopper {
 public:
  Stopper(fault::Point point) {
    point_.store(static_cast<int>(point));
    target_.store(0);
    stopped_.store(false);
    released_.store(false);
    fault::set_pause_hook(&hook);
  }
  ~Stopper() {
    let_go();
    fault::set_pause_hook(nullptr);
  }
  // Called on the thread to stop, before it gets there.
  static void target_this_thread() { target_.store(static_cast<unsigned long>(pthread_self())); }
  static void wait_until_stopped() {
    while (!stopped_.load()) sched_yield();
  }
  static void let_go() { released_.store(true); }

 private:
  static void hook(fault::Point point) {
    if (static_cast<int>(point) != point_.load() ||
        target_.load() != static_cast<unsigned long>(pthread_self()) || stopped_.exchange(true)) {
      return;
    }
    while (!released_.load()) sched_yield();
  }
  static inline std::atomic<int> point_{0};
  static inline std::atomic<unsigned long> target_{0};
  static inline std::atomic<bool> stopped_{false};
  static inline std::atomic<bool> released_{false};
};

// The child: its own thread plans and replays passes; every block checked by the Heap.
int child_keeps_working(uint32_t slabs_expected) {
  int status = 0;
  if (slabs_in_use() != slabs_expected) status = 2;
  Heap heap;
  const Script script = network_pass();
  for (uint64_t pass = 0; pass < engine_options().passes + 3; ++pass) heap.pass(script);
  if (!heap.last_pass_all(Origin::kSlab)) status = 3;
  if (slabs_in_use() != slabs_expected + 1) status = 4;
  if (::testing::Test::HasFailure()) status = 5;
  return status;
}

TEST(FaultForkHalfway, ChildCopesWithAThreadStoppedWhileGivingItsRecordsBack) {
  SKIP_UNLESS_ENGINE_PLANS();
  Stopper stopper(fault::Point::kRecordsChunkFreed);
  const Script script = network_pass();
  const uint32_t slabs_before = slabs_in_use();
  // The thread profiles a marked pass, then gives its records back at the next pass's begin:
  // it stops there with one chunk given back and the others not yet.
  std::thread worker([&] {
    Stopper::target_this_thread();
    Heap heap;
    for (uint64_t pass = 0; pass < engine_options().passes + 4; ++pass) heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
  Stopper::wait_until_stopped();
  const pid_t pid = fork_quietly();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(child_keeps_working(slabs_before));
  EXPECT_EQ(child_status(pid), 0) << "the child gave the stopped thread's records back twice "
                                     "(a crash) or could not plan its own passes";
  Stopper::let_go();
  worker.join();
}

TEST(FaultForkHalfway, ChildCopesWithAThreadStoppedBetweenReleasingAndForgettingItsSlab) {
  SKIP_UNLESS_ENGINE_PLANS();
  Stopper stopper(fault::Point::kSlabReleased);
  const Script script = network_pass();
  const uint32_t slabs_before = slabs_in_use();
  std::atomic<bool> planned{false};
  // The thread finds its pass by itself (no marks), then starts marking passes: its detected plan
  // goes (its slab is empty between passes) and it stops right after giving the slab back.
  std::thread worker([&] {
    Heap heap;
    for (int pass = 0; pass < kDetectedPlanPasses; ++pass) heap.pass(script, /*marks=*/false);
    planned.store(heap.last_pass_all(Origin::kSlab));
    Stopper::target_this_thread();
    heap.begin_pass();
    heap.run(script);
    heap.end_pass();
  });
  Stopper::wait_until_stopped();
  ASSERT_TRUE(planned.load()) << "the worker's pass was not detected";
  EXPECT_EQ(slabs_in_use(), slabs_before) << "the stopped thread gave its slab back";
  const pid_t pid = fork_quietly();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(child_keeps_working(slabs_before));
  EXPECT_EQ(child_status(pid), 0) << "the child released the stopped thread's slab again "
                                     "(2: slab count off) or could not plan its own passes";
  Stopper::let_go();
  worker.join();
}

}  // namespace
}  // namespace memoplan::shim::testing
