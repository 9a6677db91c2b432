// The fallback allocator runs out of memory: at one point of a thread's life after another (each
// fallback call of the warm-up, the profiled pass, the planning and the replay in turn), at random,
// and for good in the steady state. The program must get NULL with errno ENOMEM exactly when its
// own request went to the failing allocator — never for a request the plan serves, never because
// the shim's bookkeeping failed — and the planned memory must never be handed out twice.
#include <gtest/gtest.h>

#include <cerrno>

#include "engine_harness.h"
#include "fault_injection.h"
#include "fault_test_support.h"

namespace memoplan::shim::testing {
namespace {

using fault::Rule;
using fault::Site;

// Runs `passes` passes of `script` with fallback failures as `rule` says, tolerating NULL, and
// checks what the statistics say about each NULL the program saw.
struct FaultRun {
  uint64_t nulls = 0;
  uint64_t calls = 0;
  uint64_t injected = 0;
  Counters counters;
};

FaultRun run_with_failures(const Script& script, int passes, const Rule& rule, bool marks = true) {
  FaultRun result;
  on_fresh_thread([&] {
    const Counters before = counters();
    Heap heap;
    heap.tolerate_out_of_memory(true);
    fault::set_rule(Site::kFallbackAlloc, rule);
    for (int pass = 0; pass < passes; ++pass) heap.pass(script, marks);
    result.calls = fault::calls(Site::kFallbackAlloc);
    result.injected = fault::injected(Site::kFallbackAlloc);
    fault::clear_rules();
    result.nulls = heap.out_of_memory_answers();
    result.counters = counters() - before;
  });
  return result;
}

class FaultOutOfMemory : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_UNLESS_ENGINE_PLANS(); }
  void TearDown() override { fault::clear_rules(); }
  const Script script_ = network_pass();
};

// One failure, at each fallback call of a thread's first passes in turn (the thread's state, its
// profile records, the planner's containers, the replay table, the program's own requests).
TEST_F(FaultOutOfMemory, OneFailureAtEachPointOfTheFirstPasses) {
  const int passes = static_cast<int>(engine_options().passes) + 4;
  // How many fallback calls those passes make without failures: every one of them gets its turn.
  Rule count_only;
  count_only.every_nth = ~uint64_t{0};  // counts, never fails
  const FaultRun clean = run_with_failures(script_, passes, count_only);
  ASSERT_EQ(clean.nulls, 0u);
  ASSERT_EQ(clean.counters.plans, 1u);
  const uint64_t calls = clean.calls;
  ASSERT_GT(calls, 10u);
  uint64_t program_nulls = 0, unplanned_threads = 0;
  for (uint64_t point = 0; point < calls; ++point) {
    Rule once;
    once.every_nth = 1;
    once.skip = point;
    once.max_failures = 1;
    const FaultRun run = run_with_failures(script_, passes, once);
    SCOPED_TRACE("failure at fallback call " + std::to_string(point));
    if (run.injected == 0) continue;  // this run made fewer calls
    // Either the program saw the NULL (its request met the failure) or the shim did and said so.
    EXPECT_EQ(run.nulls, run.counters.out_of_memory);
    EXPECT_EQ(run.nulls + run.counters.bookkeeping_failures, 1u)
        << "nulls " << run.nulls << ", bookkeeping failures " << run.counters.bookkeeping_failures;
    // A failure in the shim's bookkeeping costs at most this thread's plan, and says so.
    if (run.counters.plans == 0) {
      EXPECT_EQ(run.counters.plan_failures, 1u);
      ++unplanned_threads;
    }
    program_nulls += run.nulls;
  }
  EXPECT_GT(program_nulls, 0u);  // some points were the program's own requests
  RecordProperty("fallback_calls", static_cast<int>(calls));
  RecordProperty("unplanned_threads", static_cast<int>(unplanned_threads));
}

// Random failures (one fallback call in 5) through profiling, planning and replay, several seeds.
TEST_F(FaultOutOfMemory, RandomFailuresDuringProfileAndReplayPasses) {
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    Rule random;
    random.per_million = 200000;
    random.seed = seed;
    for (bool marks : {true, false}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + (marks ? ", marked" : ", detected"));
      const FaultRun run = run_with_failures(script_, 30, random, marks);
      EXPECT_EQ(run.nulls, run.counters.out_of_memory);
      EXPECT_LE(run.nulls + run.counters.bookkeeping_failures, run.injected);
      EXPECT_GT(run.injected, 0u);
    }
  }
}

// Once a thread replays, its planned requests need no allocator at all: with every fallback call
// failing, the plan still serves each of them, and only requests outside the plan get ENOMEM.
TEST_F(FaultOutOfMemory, PlannedRequestsNeverFailInTheSteadyState) {
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < engine_options().passes + 2; ++pass) heap.pass(script_);
    ASSERT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    heap.tolerate_out_of_memory(true);
    Rule always;
    always.every_nth = 1;
    fault::set_rule(Site::kFallbackAlloc, always);
    const Counters before = counters();
    for (int pass = 0; pass < 20; ++pass) heap.pass(script_);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    EXPECT_EQ(heap.out_of_memory_answers(), 0u);
    // An extra request (a size the plan does not know) and a realloc that must move a slab block
    // to the fallback: both meet the failing allocator.
    heap.begin_pass();
    heap.run({script_.front()});
    const char* planned = heap.pointer(script_.front().id);
    ASSERT_EQ(origin_of(planned), Origin::kSlab);
    heap.run({alloc(900, 123456), realloc_op(script_.front().id, 300000)});
    EXPECT_EQ(heap.pointer(900), nullptr);
    EXPECT_EQ(heap.pointer(script_.front().id), planned)
        << "a failed realloc must leave the block where it was";
    Script rest(script_.begin() + 1, script_.end());
    heap.run(rest);
    heap.end_pass();
    const Counters d = counters() - before;
    EXPECT_EQ(heap.out_of_memory_answers(), 2u);
    EXPECT_EQ(d.out_of_memory, 2u);
    EXPECT_EQ(d.bookkeeping_failures, 0u);
    fault::clear_rules();
  });
}

}  // namespace
}  // namespace memoplan::shim::testing
