// replay::Matcher and replay::serve: the shim's cyclic matching (call-site keys, a few slots of
// look-ahead, the pass repeating) and the extension's windowed matching (sizes within a visit),
// next_visit, and the reasons serve() gives.
#include "memoplan/replay/matcher.h"

#include <gtest/gtest.h>

#include <vector>

#include "memoplan/replay/serve.h"

namespace memoplan::replay {
namespace {

std::vector<Slot> slots_with_keys(std::initializer_list<uint64_t> keys) {
  std::vector<Slot> slots;
  uint64_t offset = 0;
  for (uint64_t key : keys) {
    slots.push_back({key, 64, offset, true});
    offset += 64;
  }
  return slots;
}

TEST(Matcher, CyclicFollowsThePassAndCountsCompletedPasses) {
  const std::vector<Slot> slots = slots_with_keys({1, 2, 3});
  Matcher m;
  m.start_cyclic(slots.data(), 3, 8, 0);
  for (int pass = 0; pass < 3; ++pass) {
    EXPECT_EQ(m.match(1), 0u);
    EXPECT_EQ(m.match(2), 1u);
    EXPECT_EQ(m.cycles(), static_cast<uint64_t>(pass));
    EXPECT_EQ(m.match(3), 2u);
    EXPECT_EQ(m.cycles(), static_cast<uint64_t>(pass + 1));
  }
}

TEST(Matcher, CyclicSkipsMissingRequestsWithinItsLookahead) {
  const std::vector<Slot> slots = slots_with_keys({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Matcher m;
  m.start_cyclic(slots.data(), 12, 2, 0);
  EXPECT_EQ(m.match(3), 2u) << "two skipped";
  EXPECT_EQ(m.match(7), Matcher::kNone) << "too far ahead";
  EXPECT_EQ(m.cursor(), 3u) << "a miss keeps the cursor";
  EXPECT_EQ(m.match(99), Matcher::kNone);
  m.set_cursor(11);
  EXPECT_EQ(m.match(1), 0u) << "wraps to the pass start";
}

TEST(Matcher, StartsMidPass) {
  const std::vector<Slot> slots = slots_with_keys({1, 2, 3});
  Matcher m;
  m.start_cyclic(slots.data(), 3, 8, 5);  // cursor 5 % 3
  EXPECT_EQ(m.match(3), 2u);
  EXPECT_EQ(m.cycles(), 1u);
}

TEST(Matcher, WindowMatchesWithinTheVisitOnly) {
  const std::vector<Slot> slots = slots_with_keys({64, 128, 64, 256, 64});
  Matcher m;
  m.start_window(slots.data(), 1, 3);  // slots 1..3
  EXPECT_EQ(m.match(64), 2u) << "the first 64 in the window, skipping 128";
  EXPECT_EQ(m.match(64), Matcher::kNone) << "slot 4 is past the window";
  EXPECT_EQ(m.match(256), 3u);
  EXPECT_EQ(m.match(128), Matcher::kNone) << "behind the cursor";
  m.stop();
  EXPECT_EQ(m.match(64), Matcher::kNone);
}

TEST(Matcher, NextVisitLooksAFewVisitsOn) {
  const std::vector<Visit> visits = {{-1, 0, 0}, {10, 0, 1}, {11, 1, 1}, {12, 2, 1}, {10, 3, 1}};
  EXPECT_EQ(next_visit(visits.data(), 5, 0, 10, 8), 1u);
  EXPECT_EQ(next_visit(visits.data(), 5, 0, 12, 8), 3u) << "a branch skipped two";
  EXPECT_EQ(next_visit(visits.data(), 5, 1, 10, 8), 4u);
  EXPECT_EQ(next_visit(visits.data(), 5, 0, 12, 1), Matcher::kNone) << "beyond the look-ahead";
  EXPECT_EQ(next_visit(visits.data(), 5, 0, 99, 8), Matcher::kNone);
}

TEST(Serve, GivesEachReason) {
  ArenaRegion region;
  ArenaRegion::Config config;
  config.largest_shift = config.smallest_shift = 20;
  config.arenas = 1;
  ASSERT_TRUE(region.reserve(config));
  static thread_local char owner;
  ArenaRegion::Failure failure;
  Arena* arena = region.create(1 << 16, &owner, &failure);
  ASSERT_NE(arena, nullptr);
  // Slots: key 1 at 0; key 2 escaping; key 3 at offset 64 (not 4 KiB aligned); key 4 at 0 again.
  const std::vector<Slot> slots = {
      {1, 128, 0, true}, {2, 64, 128, false}, {3, 64, 64, true}, {4, 64, 0, true}};
  Matcher m;
  m.start_cyclic(slots.data(), 4, 8, 0);
  Fallback why;
  void* p = serve(m, slots.data(), *arena, 1, 128, 16, &why);
  EXPECT_EQ(p, arena->base());
  EXPECT_EQ(serve(m, slots.data(), *arena, 2, 64, 16, &why), nullptr);
  EXPECT_EQ(why, Fallback::kEscaping);
  EXPECT_EQ(serve(m, slots.data(), *arena, 3, 64, 4096, &why), nullptr);
  EXPECT_EQ(why, Fallback::kAlignment);
  EXPECT_EQ(serve(m, slots.data(), *arena, 4, 64, 16, &why), nullptr);
  EXPECT_EQ(why, Fallback::kOverlap) << "block 1 is still alive at offset 0";
  EXPECT_EQ(serve(m, slots.data(), *arena, 77, 64, 16, &why), nullptr);
  EXPECT_EQ(why, Fallback::kNotPlanned);
  m.set_cursor(0);
  EXPECT_EQ(serve(m, slots.data(), *arena, 1, 256, 16, &why), nullptr) << "larger than its slot";
  EXPECT_EQ(why, Fallback::kNotPlanned);
  region.release_all();
}

}  // namespace
}  // namespace memoplan::replay
