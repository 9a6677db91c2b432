// mmap fails: the tag region at initialization (the process runs unplanned and says why), one tag
// slot while profiling (that block goes untracked), a thread's slab or its size table (that thread
// runs unplanned). Every request is still served, no two live blocks overlap, and the statistics
// count the failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "engine_harness.h"
#include "fault_injection.h"
#include "fault_test_support.h"
#include "memoplan/pass.h"
#include "state.h"

namespace memoplan::shim::testing {
namespace {

using fault::Rule;
using fault::Site;

Rule fail_calls(uint64_t every_nth, uint64_t max_failures = ~uint64_t{0}, uint64_t skip = 0) {
  Rule rule;
  rule.every_nth = every_nth;
  rule.max_failures = max_failures;
  rule.skip = skip;
  return rule;
}

#define CHILD_CHECK(cond)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

// No engine call before expect_in_fresh_process: the child must initialize it under the rule.
TEST(FaultTagRegion, FailureRunsTheProcessUnplannedAndSaysWhy) {
  const std::string log = "/tmp/memoplan-fault-tag-region-" + std::to_string(getpid()) + ".log";
  expect_in_fresh_process("log:" + log, [&] {
    fault::set_rule(Site::kTagRegion, fail_calls(1));
    int status = 0;
    on_fresh_thread([&] {
      Heap heap;
      for (int pass = 0; pass < 8; ++pass) heap.pass(network_pass());
      if (!heap.last_pass_all(Origin::kFallback)) status = 1;
      if (::testing::Test::HasFailure()) status = 1;
    });
    CHILD_CHECK(status == 0);
    CHILD_CHECK(global().mode_off);
    const Counters c = counters();
    CHILD_CHECK(c.address_space_failures == 1);
    CHILD_CHECK(c.plans == 0 && c.planned_hits == 0);
    const std::string text = read_text_file(log);
    unlink(log.c_str());
    CHILD_CHECK(text.find("cannot reserve address space for tags and slabs (Cannot allocate "
                          "memory); running unplanned") != std::string::npos);
    // The statistics carry the count.
    FILE* out = tmpfile();
    CHILD_CHECK(out != nullptr);
    print_stats(fileno(out));
    rewind(out);
    char stats_text[4096] = {};
    CHILD_CHECK(fread(stats_text, 1, sizeof stats_text - 1, out) > 0);
    fclose(out);
    CHILD_CHECK(strstr(stats_text, "address space failures 1,") != nullptr);
    return 0;
  });
}

class FaultMaps : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_UNLESS_ENGINE_PLANS(); }
  void TearDown() override { fault::clear_rules(); }
  const Script script_ = network_pass();
  const int steady_ = static_cast<int>(engine_options().passes) + 2;
};

// Every third tag slot of the profiled pass cannot be mapped: those blocks come from the fallback
// and stay unknown to the plan, which serves the others.
TEST_F(FaultMaps, TagCommitFailureLeavesThatBlockUntracked) {
  on_fresh_thread([&] {
    const Counters before = counters();
    Heap heap;
    fault::set_rule(Site::kTagCommit, fail_calls(3));
    for (int pass = 0; pass < steady_ - 1; ++pass) heap.pass(script_);  // through the profile
    fault::clear_rules();
    for (int pass = 0; pass < 5; ++pass) heap.pass(script_);
    const Counters d = counters() - before;
    EXPECT_GT(d.tag_commit_failures, 0u);
    EXPECT_EQ(d.plans, 1u);
    EXPECT_GT(d.planned_hits, 0u);
    EXPECT_GT(d.fallback(FallbackReason::kNotPlanned), 0u) << "the untracked blocks fall back";
    size_t slab = 0;
    for (const Allocated& a : heap.last_pass()) slab += a.origin == Origin::kSlab;
    EXPECT_GT(slab, 0u) << heap.last_pass_origins();
    EXPECT_LT(slab, heap.last_pass().size()) << heap.last_pass_origins();
  });
}

// The slab cannot be mapped (the first call) or its size table cannot (the second): either way
// the thread runs unplanned, gives the slab slot back, and the next thread plans normally (on a
// slab the failing thread could not have parked: none was mapped).
TEST_F(FaultMaps, SlabMapFailureLeavesThatThreadUnplanned) {
  for (uint64_t failing_call : {1, 2}) {
    for (bool marks : {true, false}) {
      SCOPED_TRACE(std::string(failing_call == 1 ? "slab" : "size table") +
                   (marks ? ", marked passes" : ", detected passes"));
      // A slab the last iteration's thread left parked would be reused, not mapped.
      global().slabs.release_parked();
      const uint32_t slabs_before = slabs_in_use();
      const Counters before = counters();
      on_fresh_thread([&] {
        Heap heap;
        fault::set_rule(Site::kSlabCommit, fail_calls(failing_call, 1));
        for (int pass = 0; pass < kDetectedPlanPasses; ++pass) heap.pass(script_, marks);
        EXPECT_TRUE(heap.last_pass_all(Origin::kFallback)) << heap.last_pass_origins();
        EXPECT_EQ(slabs_in_use(), slabs_before);
        fault::clear_rules();
      });
      const Counters d = counters() - before;
      EXPECT_EQ(d.slab_map_failures, 1u);
      EXPECT_EQ(d.plan_failures, 1u);
      EXPECT_EQ(d.plans, 0u);
      EXPECT_EQ(d.planned_hits, 0u);
      const Counters next_before = counters();
      on_fresh_thread([&] {  // the failure was this thread's alone
        Heap heap;
        for (int pass = 0; pass < kDetectedPlanPasses; ++pass) heap.pass(script_, marks);
        if (marks) {
          EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
        }
      });
      EXPECT_EQ((counters() - next_before).plans, 1u);
      EXPECT_EQ(slabs_in_use(), slabs_before);
    }
  }
}

// A plan keyed by call site alone (sizes that vary) is planned again at the end of a pass that
// outgrew it; when the new slab cannot be mapped the old one is gone already: the thread runs
// unplanned from there on, every request still served.
TEST_F(FaultMaps, SlabMapFailureAtAReplanLeavesThatThreadUnplanned) {
  if (!engine_options().detect) GTEST_SKIP() << "needs detect:true";
  on_fresh_thread([&] {
    Heap heap;
    auto scaled = [&](size_t scale) {
      Script pass = script_;
      for (Op& op : pass) op.size *= scale;
      return pass;
    };
    const Counters before = counters();
    const uint64_t size_free_before = stats().size_free_plans.load();
    const uint64_t replans_before = stats().size_free_replans.load();
    uint64_t seed = 7;  // scales 1-3 in no repeating order: no exact key repeats
    for (int pass = 0; pass < 60; ++pass) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      heap.pass(scaled(1 + (seed >> 33) % 3), /*marks=*/false);
    }
    ASSERT_EQ(stats().size_free_plans.load() - size_free_before, 1u);
    fault::set_rule(Site::kSlabCommit, fail_calls(1, 1));
    for (int pass = 0; pass < 6; ++pass) heap.pass(scaled(6), /*marks=*/false);
    fault::clear_rules();
    const Counters d = counters() - before;
    EXPECT_EQ(d.slab_map_failures, 1u);
    EXPECT_EQ(stats().size_free_replans.load() - replans_before, 0u);
    EXPECT_TRUE(heap.last_pass_all(Origin::kFallback)) << heap.last_pass_origins();
  });
}

}  // namespace
}  // namespace memoplan::shim::testing
