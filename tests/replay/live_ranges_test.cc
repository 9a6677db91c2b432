// LiveRanges, the replay guard: half-open ranges, so touching ranges do not overlap, and anything
// sharing even one byte does.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "memoplan/replay/live_ranges.h"

namespace memoplan::replay {
namespace {

class LiveRangesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage_.resize(64);
    ranges_.init(storage_.data(), static_cast<uint32_t>(storage_.size()));
  }
  std::vector<ByteRange> storage_;
  LiveRanges ranges_;
};

TEST_F(LiveRangesTest, EmptyOverlapsNothing) {
  EXPECT_EQ(ranges_.count(), 0u);
  EXPECT_FALSE(ranges_.overlaps(0, 1));
  EXPECT_FALSE(ranges_.overlaps(0, ~uint64_t{0}));
  EXPECT_EQ(ranges_.length_at(0), 0u);
  EXPECT_EQ(ranges_.erase(0), 0u);
}

TEST_F(LiveRangesTest, AdjacentRangesDoNotOverlap) {
  ASSERT_TRUE(ranges_.insert(100, 200));
  EXPECT_FALSE(ranges_.overlaps(0, 100));    // ends where it starts
  EXPECT_FALSE(ranges_.overlaps(200, 300));  // starts where it ends
  ASSERT_TRUE(ranges_.insert(200, 300));
  ASSERT_TRUE(ranges_.insert(0, 100));
  EXPECT_EQ(ranges_.count(), 3u);
  EXPECT_FALSE(ranges_.overlaps(300, 301));
}

TEST_F(LiveRangesTest, OneSharedByteOverlaps) {
  ASSERT_TRUE(ranges_.insert(100, 200));
  EXPECT_TRUE(ranges_.overlaps(99, 101));   // straddles the start
  EXPECT_TRUE(ranges_.overlaps(199, 201));  // straddles the end
  EXPECT_TRUE(ranges_.overlaps(100, 101));  // first byte
  EXPECT_TRUE(ranges_.overlaps(199, 200));  // last byte
  EXPECT_TRUE(ranges_.overlaps(120, 130));  // inside
  EXPECT_TRUE(ranges_.overlaps(50, 250));   // around
  EXPECT_TRUE(ranges_.overlaps(100, 200));  // identical
}

TEST_F(LiveRangesTest, OverlapWithTheRangeBeforeTheInsertionPoint) {
  // The query starts after a long range's start: only the previous range can cover it.
  ASSERT_TRUE(ranges_.insert(0, 1000));
  ASSERT_TRUE(ranges_.insert(2000, 2100));
  EXPECT_TRUE(ranges_.overlaps(999, 1500));
  EXPECT_FALSE(ranges_.overlaps(1000, 1500));
  EXPECT_FALSE(ranges_.overlaps(1000, 2000));
  EXPECT_TRUE(ranges_.overlaps(1000, 2001));
}

TEST_F(LiveRangesTest, InsertKeepsRangesSortedWhateverTheOrder) {
  for (uint64_t lo : {500, 100, 300, 0, 400, 200}) ASSERT_TRUE(ranges_.insert(lo, lo + 50));
  for (uint32_t i = 0; i + 1 < ranges_.count(); ++i) EXPECT_LT(storage_[i].lo, storage_[i + 1].lo);
  EXPECT_EQ(ranges_.length_at(300), 50u);
  EXPECT_FALSE(ranges_.overlaps(350, 400));
  EXPECT_TRUE(ranges_.overlaps(349, 400));
}

TEST_F(LiveRangesTest, EraseReturnsTheLengthOnlyForARangeStart) {
  ASSERT_TRUE(ranges_.insert(100, 164));
  ASSERT_TRUE(ranges_.insert(200, 300));
  EXPECT_EQ(ranges_.erase(101), 0u);  // interior offset: not a block start
  EXPECT_EQ(ranges_.erase(164), 0u);  // the end of a range
  EXPECT_EQ(ranges_.erase(0), 0u);
  EXPECT_EQ(ranges_.count(), 2u);
  EXPECT_EQ(ranges_.erase(100), 64u);
  EXPECT_EQ(ranges_.count(), 1u);
  EXPECT_EQ(ranges_.erase(100), 0u);  // twice: gone
  EXPECT_FALSE(ranges_.overlaps(100, 164));
  EXPECT_TRUE(ranges_.overlaps(250, 251));
  EXPECT_EQ(ranges_.erase(200), 100u);
  EXPECT_EQ(ranges_.count(), 0u);
}

TEST_F(LiveRangesTest, LengthAtOnlyAnswersForRangeStarts) {
  ASSERT_TRUE(ranges_.insert(4096, 4096 + 12288));
  EXPECT_EQ(ranges_.length_at(4096), 12288u);
  EXPECT_EQ(ranges_.length_at(4097), 0u);
  EXPECT_EQ(ranges_.length_at(0), 0u);
  EXPECT_EQ(ranges_.length_at(4096 + 12288), 0u);
}

TEST_F(LiveRangesTest, FullGuardRefusesAndRecoversAfterErase) {
  for (uint64_t i = 0; i < storage_.size(); ++i) ASSERT_TRUE(ranges_.insert(i * 10, i * 10 + 10));
  EXPECT_FALSE(ranges_.insert(10000, 10010));
  EXPECT_EQ(ranges_.count(), storage_.size());
  EXPECT_FALSE(ranges_.overlaps(10000, 10010));  // the refused range was not recorded
  EXPECT_EQ(ranges_.erase(50), 10u);
  EXPECT_TRUE(ranges_.insert(10000, 10010));
}

TEST_F(LiveRangesTest, InitForgetsEverything) {
  ASSERT_TRUE(ranges_.insert(0, 10));
  ranges_.init(storage_.data(), 4);
  EXPECT_EQ(ranges_.count(), 0u);
  EXPECT_FALSE(ranges_.overlaps(0, 10));
}

TEST_F(LiveRangesTest, AgreesWithABruteForceModel) {
  // Random non-overlapping inserts and erases against a byte map of 4 KiB.
  std::mt19937 random(7);
  std::vector<int> owner(4096, -1);  // start offset of the range covering each byte
  for (int step = 0; step < 5000; ++step) {
    const uint64_t lo = random() % 4000, hi = lo + 1 + random() % 96;
    bool brute_overlap = false;
    for (uint64_t b = lo; b < hi; ++b) brute_overlap |= owner[b] >= 0;
    ASSERT_EQ(ranges_.overlaps(lo, hi), brute_overlap) << lo << ".." << hi;
    if (!brute_overlap && ranges_.insert(lo, hi)) {
      for (uint64_t b = lo; b < hi; ++b) owner[b] = static_cast<int>(lo);
    }
    const uint64_t victim = random() % 4096;
    if (owner[victim] >= 0) {
      const uint64_t start = static_cast<uint64_t>(owner[victim]);
      const uint64_t length = ranges_.length_at(start);
      ASSERT_GT(length, 0u);
      ASSERT_EQ(ranges_.erase(start), length);
      for (uint64_t b = start; b < start + length; ++b) owner[b] = -1;
    }
  }
}

// Shared ranges (memory "min"): a block laid over live ones it may share becomes one range with
// their holders; frees at any member's start count down, the range goes with the last.
TEST_F(LiveRangesTest, AbsorbedRangesGoWithTheirLastHolder) {
  ASSERT_TRUE(ranges_.insert(0, 100));    // a concat's first input
  ASSERT_TRUE(ranges_.insert(100, 300));  // its second
  ASSERT_TRUE(ranges_.insert(400, 500));  // something else
  const ByteRange allowed[] = {{0, 300, 1, false}};
  uint64_t grown = 0;
  EXPECT_EQ(ranges_.absorb(0, 300, allowed, 1, &grown), LiveRanges::kAbsorbed);
  EXPECT_EQ(grown, 0u);  // the output lies entirely over its inputs
  EXPECT_EQ(ranges_.count(), 2u);
  EXPECT_EQ(ranges_.release(100), LiveRanges::kStillHeld);  // the second input, inside
  EXPECT_EQ(ranges_.release(0), LiveRanges::kStillHeld);    // the first input
  EXPECT_TRUE(ranges_.overlaps(150, 160));
  EXPECT_EQ(ranges_.release(0), 300u);  // the output: the last holder
  EXPECT_FALSE(ranges_.overlaps(0, 400));
  EXPECT_EQ(ranges_.count(), 1u);
}

TEST_F(LiveRangesTest, AbsorbRefusesLiveRangesOutsideWhatIsAllowed) {
  ASSERT_TRUE(ranges_.insert(0, 100));
  ASSERT_TRUE(ranges_.insert(100, 200));  // live, but not one of the op's inputs
  const ByteRange allowed[] = {{0, 100, 1, false}};
  uint64_t grown = 0;
  EXPECT_EQ(ranges_.absorb(0, 200, allowed, 1, &grown), LiveRanges::kNotAllowed);
  EXPECT_EQ(ranges_.count(), 2u);  // unchanged
  // An alias: the output over its dying input, same start, no larger.
  EXPECT_EQ(ranges_.absorb(0, 100, allowed, 1, &grown), LiveRanges::kAbsorbed);
  EXPECT_EQ(ranges_.release(0), LiveRanges::kStillHeld);  // the input dies
  EXPECT_EQ(ranges_.release(0), 100u);                    // then the output
  // A range nobody shares is released only at its start: an interior pointer is no block.
  EXPECT_EQ(ranges_.release(150), 0u);
  EXPECT_EQ(ranges_.release(100), 100u);
}

TEST_F(LiveRangesTest, AbsorbWithNothingBelowIsAnInsert) {
  const ByteRange allowed[] = {{0, 100, 1, false}};
  uint64_t grown = 0;
  EXPECT_EQ(ranges_.absorb(1000, 1100, allowed, 1, &grown), LiveRanges::kAbsorbed);
  EXPECT_EQ(grown, 100u);
  EXPECT_EQ(ranges_.release(1000), 100u);
}

}  // namespace
}  // namespace memoplan::replay
