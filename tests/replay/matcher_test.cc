// replay::Matcher and replay::serve: the shim's cyclic matching (call-site keys, a few slots of
// look-ahead, the pass repeating) and the extension's windowed matching (sizes within a visit),
// next_visit, and the reasons serve() gives.
#include "memoplan/replay/matcher.h"

#include <gtest/gtest.h>

#include <vector>

#include "memoplan/replay/escaping.h"
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

// A region with one arena slot of 1 MiB.
ArenaRegion::Config one_arena() {
  ArenaRegion::Config config;
  config.largest_shift = config.smallest_shift = 20;
  config.arenas = 1;
  return config;
}

TEST(Serve, GivesEachReason) {
  ArenaRegion region;
  ASSERT_TRUE(region.reserve(one_arena()));
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

// place_escaping: every unplanned slot gets two places after the planned slab, one copy of the
// escaping blocks each, aligned (64 bytes; pages for a block of a page or more), apart from each
// other and from the planned blocks; nothing changes when the region would not fit the limit.
TEST(PlaceEscaping, GivesEachEscapingBlockTwoPlacesAfterTheSlab) {
  std::vector<Slot> slots = {{1, 100, 0, true},
                             {2, 10000, 0, false},
                             {3, 100, 128, true},
                             {4, 70, 0, false},
                             {5, 0, 0, false}};
  const uint64_t slab = place_escaping(slots.data(), 5, 1000, 1 << 20);
  EXPECT_EQ(slots[0].offset, 0u);
  EXPECT_EQ(slots[0].alternate, Slot::kNoAlternate);
  EXPECT_EQ(slots[2].alternate, Slot::kNoAlternate);
  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // [begin, end) of every place
  for (const Slot& s : slots) {
    if (s.alternate == Slot::kNoAlternate) continue;
    EXPECT_TRUE(s.planned);
    for (uint64_t at : {s.offset, s.alternate}) {
      EXPECT_GE(at, 4096u) << "after the planned slab, page-aligned";
      EXPECT_EQ(at % (s.size >= 4096 ? 4096 : 64), 0u) << at;
      EXPECT_LE(at + (s.size ? s.size : 1), slab);
      blocks.push_back({at, at + (s.size ? s.size : 1)});
    }
  }
  ASSERT_EQ(blocks.size(), 6u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      EXPECT_TRUE(blocks[i].second <= blocks[j].first || blocks[j].second <= blocks[i].first)
          << i << " overlaps " << j;
    }
  }
  EXPECT_EQ(slab, 4096u + 2 * 12288u);  // a copy: 10000 + 70 + 1 bytes, aligned, in 3 pages
  std::vector<Slot> unchanged = {{1, 100, 0, true}, {2, 1 << 20, 0, false}};
  EXPECT_EQ(place_escaping(unchanged.data(), 2, 1000, 2 << 20), 1000u) << "over the limit";
  EXPECT_FALSE(unchanged[1].planned);
  std::vector<Slot> none = {{1, 100, 0, true}};
  EXPECT_EQ(place_escaping(none.data(), 1, 1000, 1 << 20), 1000u);
}

// An escaping block alternates between its two places while the program frees the older one in
// the next pass (`out = model(x)`); when it keeps both (a list of outputs), the third goes to the
// fallback (kOverlap) and never over a live block.
TEST(PlaceEscaping, AlternatesWhileTheOldBlockLivesAndFallsBackWhenBothDo) {
  ArenaRegion region;
  ASSERT_TRUE(region.reserve(one_arena()));
  static thread_local char owner;
  std::vector<Slot> slots = {{1, 256, 0, true}, {2, 8192, 0, false}};
  const uint64_t slab = place_escaping(slots.data(), 2, 256, region.arena_bytes());
  ArenaRegion::Failure failure;
  Arena* arena = region.create(slab, &owner, &failure);
  ASSERT_NE(arena, nullptr);
  Matcher m;
  m.start_cyclic(slots.data(), 2, 8, 0);
  Fallback why;
  void* previous = nullptr;
  for (int pass = 0; pass < 4; ++pass) {
    void* scratch = serve(m, slots.data(), *arena, 1, 256, 16, &why);
    EXPECT_EQ(scratch, arena->base());
    region.free(scratch, &owner);
    void* out = serve(m, slots.data(), *arena, 2, 8192, 64, &why);
    ASSERT_NE(out, nullptr) << "pass " << pass;
    EXPECT_EQ(out, arena->base() + (pass % 2 ? slots[1].alternate : slots[1].offset));
    if (previous) region.free(previous, &owner);  // the old output goes once the new one exists
    previous = out;
  }
  // The program keeps its outputs: the next pass's place is taken too.
  void* kept = serve(m, slots.data(), *arena, 1, 256, 16, &why);
  region.free(kept, &owner);
  void* second = serve(m, slots.data(), *arena, 2, 8192, 64, &why);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(serve(m, slots.data(), *arena, 1, 256, 16, &why), arena->base());
  region.free(arena->base(), &owner);
  EXPECT_EQ(serve(m, slots.data(), *arena, 2, 8192, 64, &why), nullptr);
  EXPECT_EQ(why, Fallback::kOverlap);
  region.free(previous, &owner);
  region.free(second, &owner);
  region.release_all();
}

}  // namespace
}  // namespace memoplan::replay
