// fork in the middle of a pass, at the engine level (so the sanitizer builds run it too; the
// preloaded fork program covers the real library): parent and child each finish the pass and go on
// replaying their own copy of the slab, and neither loses a block.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "engine_harness.h"

namespace memoplan::shim::testing {
namespace {

// The child reports through its exit status: 0 when every check held.
void run_passes_after_fork(bool child) {
  Heap heap;
  const Script script = network_pass();
  const Script first_half(script.begin(), script.begin() + script.size() / 2);
  const Script second_half(script.begin() + script.size() / 2, script.end());
  for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(script);
  ASSERT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();

  heap.begin_pass();
  heap.run(first_half);  // blocks from the slab are alive across the fork
  const pid_t pid = fork_quietly();
  ASSERT_GE(pid, 0);
  const bool under_test = (pid == 0) == child;
  if (pid == 0 && !under_test) _exit(0);  // this test watches the parent
  // Each side finishes the pass on its own copy of the slab; the side under test keeps replaying.
  heap.run(second_half);
  heap.end_pass();
  heap.check_all();
  for (int more = 0; under_test && more < 5; ++more) {
    heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  }
  if (pid == 0) _exit(::testing::Test::HasFailure() ? 1 : 0);
  EXPECT_EQ(child_status(pid), 0) << "the child found a lost or overlapping block";
}

TEST(EngineFork, ChildFinishesThePassAndKeepsReplaying) {
  SKIP_UNLESS_ENGINE_PLANS();
  on_fresh_thread([] { run_passes_after_fork(/*child=*/true); });
}

TEST(EngineFork, ParentFinishesThePassAndKeepsReplaying) {
  SKIP_UNLESS_ENGINE_PLANS();
  on_fresh_thread([] { run_passes_after_fork(/*child=*/false); });
}

}  // namespace
}  // namespace memoplan::shim::testing
