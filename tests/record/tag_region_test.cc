// record::TagRegion's large slots: tag slots found from interior pointers, kept pages and trim(),
// resizing in place, and commit failures (small slots: tag_region_small_slots_test.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "memoplan/record/tag_region.h"
#include "memoplan/vm/monotonic.h"
#include "resident_pages.h"

namespace memoplan::record {
namespace {

class TagRegionTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(tags_.reserve(20, 16, 4)); }
  void TearDown() override { tags_.release_all(); }
  TagRegion tags_;
};

TEST_F(TagRegionTest, InteriorPointersFindTheirRecord) {
  TagRegion::Miss miss;
  char* p = static_cast<char*>(tags_.take(5000, false, 0x1234, 77, &miss));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  memset(p, 7, 5000);
  const TagRegion::Owner o = tags_.owner_of(p + 4999);
  EXPECT_EQ(o.owner, 0x1234u);
  EXPECT_EQ(o.record, 77u);
  EXPECT_EQ(o.bytes, 5000u);
  EXPECT_EQ(tags_.slots_in_use(), 1u);
  std::thread([&] { tags_.give_back(p); }).join();
  EXPECT_EQ(tags_.slots_in_use(), 0u);
  EXPECT_EQ(tags_.take(tags_.slot_bytes() + 1, false, 1, 1, &miss), nullptr);
  EXPECT_EQ(miss, TagRegion::Miss::kTooLarge);
}

TEST_F(TagRegionTest, KeptPagesAreReusedZeroedAndTrimmed) {
  tags_.set_retain_bytes(1 << 20);
  TagRegion::Miss miss;
  char* p = static_cast<char*>(tags_.take(8192, false, 1, 0, &miss));
  ASSERT_NE(p, nullptr);
  memset(p, 0xab, 8192);
  tags_.give_back(p);
  EXPECT_EQ(tags_.retained_bytes(), 8192u);
  char* q = static_cast<char*>(tags_.take(8000, true, 1, 1, &miss));
  ASSERT_EQ(q, p) << "the kept slot of the same class";
  EXPECT_EQ(tags_.retained_bytes(), 0u);
  for (int i = 0; i < 8000; ++i) ASSERT_EQ(q[i], 0) << "zero asked: cleared";
  tags_.give_back(q);
  EXPECT_EQ(tags_.retained_bytes(), 8192u);
  tags_.trim();
  EXPECT_EQ(tags_.retained_bytes(), 0u);
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

// kKeepIfReturning: a class's first free unmaps; once a block of the class, or of one
// whose kept slots could serve the class's, was asked for after a free, its freed blocks keep
// their pages. Each fresh block below is taken with nothing kept: no kept slot is refitted.
TEST_F(TagRegionTest, OnlyClassesAskedForAgainKeepTheirPages) {
  tags_.set_retain_bytes(4 << 20);
  TagRegion::Miss miss;
  auto block = [&](uint64_t bytes) {
    char* p =
        static_cast<char*>(tags_.take(bytes, false, 1, 0, &miss, 64, TagRegion::kKeepIfReturning));
    EXPECT_NE(p, nullptr);
    if (p) memset(p, 1, bytes);
    return p;
  };
  tags_.give_back(block(64 << 10));
  EXPECT_EQ(tags_.retained_bytes(), 0u) << "64 KiB's first free: unmapped";
  EXPECT_EQ(tags_.slots_in_use(), 0u);
  char* kept = block(64 << 10);
  tags_.give_back(kept);
  EXPECT_EQ(tags_.retained_bytes(), 64u << 10) << "asked for again: kept";
  char* live = block(64 << 10);
  EXPECT_EQ(live, kept) << "its class's kept slot";
  char* early = block(80 << 10);     // the class of 17-20 pages, taken before any was freed
  tags_.give_back(block(80 << 10));  // its first free
  EXPECT_EQ(tags_.retained_bytes(), 0u) << "80 KiB's first free";
  // 56 KiB (14 pages) could take a kept slot of 80 KiB's class: asking for it marks that class.
  char* other = block(56 << 10);
  tags_.give_back(early);
  EXPECT_EQ(tags_.retained_bytes(), 80u << 10) << "asked for since, by a 56 KiB request";
  tags_.give_back(other);
  EXPECT_EQ(tags_.retained_bytes(), 80u << 10) << "56 KiB's first free";
  tags_.give_back(live);
  EXPECT_EQ(tags_.retained_bytes(), 144u << 10);
  tags_.trim();
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

using vm::monotonic_ns;

// Kept slots of the expiry's size or more keep their pages for its time at most: expire_kept
// unmaps the older ones and leaves the recent ones, and the small ones, kept.
TEST_F(TagRegionTest, LargeKeptSlotsExpire) {
  tags_.set_retain_bytes(4 << 20);
  tags_.set_kept_expiry(256 << 10, /*after_ns=*/50000000);
  TagRegion::Miss miss;
  char* old_large = static_cast<char*>(tags_.take(512 << 10, false, 1, 0, &miss));
  char* recent_large = static_cast<char*>(tags_.take(512 << 10, false, 1, 1, &miss));
  char* small = static_cast<char*>(tags_.take(8192, false, 1, 2, &miss));
  ASSERT_TRUE(old_large && recent_large && small);
  memset(old_large, 1, 512 << 10);
  memset(recent_large, 2, 512 << 10);
  tags_.give_back(old_large);
  tags_.give_back(small);
  EXPECT_EQ(tags_.expire_kept(monotonic_ns()), 0u) << "kept just now";
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  tags_.give_back(recent_large);
  EXPECT_EQ(tags_.retained_bytes(), (1u << 20) + 8192u);
  EXPECT_EQ(tags_.expire_kept(monotonic_ns()), 512u << 10);
  EXPECT_EQ(tags_.retained_bytes(), (512u << 10) + 8192u);
  EXPECT_EQ(tags_.slots_in_use(), 2u) << "the recent large slot and the small one stay kept";
  EXPECT_EQ(tags_.take(512 << 10, false, 1, 3, &miss), recent_large);
  EXPECT_EQ(tags_.take(8192, false, 1, 4, &miss), small);
  EXPECT_EQ(tags_.expire_kept(monotonic_ns() + 100000000), 0u) << "nothing kept";
}

// expire_kept unmaps the old slots under recent ones and leaves the recent ones in their order
// (the most recent first). A class whose kept slots are all recent is not even held: a request of
// it made meanwhile from another thread always finds its kept slot, never the class empty (it
// would map fresh pages; operators.cc's proof that a delete released its block relies on it under
// the shim's reaper). Clocks are passed, not waited for: no scheduler delay changes the outcome.
TEST_F(TagRegionTest, ExpiryLeavesTheRecentSlotsInOrderAndInReach) {
  constexpr uint64_t kExpiry = 50000000;
  tags_.set_retain_bytes(4 << 20);
  tags_.set_kept_expiry(0, kExpiry);
  TagRegion::Miss miss;
  char* block[4];
  for (int i = 0; i < 4; ++i) {
    block[i] = static_cast<char*>(tags_.take(8192, false, 1, i, &miss));
    ASSERT_NE(block[i], nullptr);
    memset(block[i], i, 8192);
  }
  tags_.give_back(block[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  const uint64_t recent_from = monotonic_ns();
  for (int i = 1; i < 4; ++i) tags_.give_back(block[i]);
  // 1 ns short of the recent ones' expiry; the first was kept 60 ms or more before them.
  EXPECT_EQ(tags_.expire_kept(recent_from + kExpiry - 1), 8192u) << "the first, under three";
  for (int i = 3; i >= 1; --i) EXPECT_EQ(tags_.take(8192, false, 1, i, &miss), block[i]);
  for (int i = 1; i < 4; ++i) tags_.give_back(block[i]);  // the stack never empties below
  tags_.set_kept_expiry(0, uint64_t{3600} * 1000000000);  // nothing comes due while this runs
  std::atomic<bool> done{false};
  std::thread reaper([&] {
    while (!done.load(std::memory_order_relaxed)) tags_.expire_kept(monotonic_ns());
  });
  int fresh = 0;
  for (int i = 0; i < 200000 && fresh == 0; ++i) {
    char* p = static_cast<char*>(tags_.take(8192, false, 1, i, &miss));
    ASSERT_NE(p, nullptr);
    fresh += p != block[1] && p != block[2] && p != block[3];
    tags_.give_back(p);
  }
  done.store(true);
  reaper.join();
  EXPECT_EQ(fresh, 0) << "a request found the class empty while the reaper looked at it";
}

// A request whose class expire_kept holds waits a bounded while for its kept slots, then maps
// fresh pages, and counts it; the class free again, no wait.
TEST_F(TagRegionTest, ARequestWaitsForAHeldClassABoundedWhile) {
  tags_.set_retain_bytes(4 << 20);
  TagRegion::Miss miss;
  ASSERT_TRUE(tags_.hold_class_for_tests(100000, true));
  EXPECT_FALSE(tags_.hold_class_for_tests(100000, true)) << "one holder at a time";
  char* p = static_cast<char*>(tags_.take(100000, false, 1, 1, &miss));
  ASSERT_NE(p, nullptr) << "fresh pages after the wait";
  EXPECT_EQ(tags_.waits_run_out(), 1u);
  tags_.hold_class_for_tests(100000, false);
  char* q = static_cast<char*>(tags_.take(100000, false, 1, 2, &miss));
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(tags_.waits_run_out(), 1u) << "an empty class that nobody holds: no wait";
  tags_.give_back(q);
  EXPECT_EQ(tags_.take(100000, false, 1, 3, &miss), q) << "its kept slot";
  tags_.give_back(q);
  tags_.give_back(p);
}

// Each size has its own expiry, a later call's for larger sizes over an earlier one's: the small
// slots' time passes at 50 ms, the large ones' (set to none) never. expire_kept's size: only the
// kept slots of that size or more are looked at.
TEST_F(TagRegionTest, KeptSlotsExpireByTheirSizesTime) {
  tags_.set_retain_bytes(4 << 20);
  tags_.set_kept_expiry(0, /*after_ns=*/50000000);
  tags_.set_kept_expiry(256 << 10, /*after_ns=*/0);
  TagRegion::Miss miss;
  char* large = static_cast<char*>(tags_.take(512 << 10, false, 1, 0, &miss));
  char* small = static_cast<char*>(tags_.take(8192, false, 1, 1, &miss));
  ASSERT_TRUE(large && small);
  memset(small, 3, 8192);
  EXPECT_FALSE(tags_.keeps(0));
  tags_.give_back(large);
  tags_.give_back(small);
  EXPECT_TRUE(tags_.keeps(256 << 10));
  EXPECT_FALSE(tags_.keeps(1 << 20)) << "nothing of 1 MiB or more kept";
  const uint64_t later = monotonic_ns() + 60000000;
  EXPECT_EQ(tags_.expire_kept(later, 64 << 10), 0u) << "the small slot is not looked at";
  EXPECT_EQ(tags_.expire_kept(later), 8192u);
  EXPECT_EQ(tags_.retained_bytes(), 512u << 10) << "the large slot stays kept";
  EXPECT_EQ(tags_.take(512 << 10, false, 1, 2, &miss), large);
  char* fresh = static_cast<char*>(tags_.take(8192, true, 1, 3, &miss));
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh[0], 0) << "fresh pages";
}

// Below the region's peak a block that finds no kept slot of its sizes maps fresh pages beside
// a slot kept just now (its size may come back), and takes one kept kRefitAfterNs ago or more.
TEST_F(TagRegionTest, BelowThePeakOnlyASlotKeptAWhileIsFittedToAnotherSize) {
  tags_.set_retain_bytes(4 << 20);
  TagRegion::Miss miss;
  char* kept = static_cast<char*>(tags_.take(512 << 10, false, 1, 0, &miss));
  char* live = static_cast<char*>(tags_.take(512 << 10, false, 1, 1, &miss));
  char* gone = static_cast<char*>(tags_.take(1 << 20, false, 1, 2, &miss));
  ASSERT_TRUE(kept && live && gone);
  tags_.give_back(gone, /*keep=*/false);  // the peak stays 2 MiB, 1 MiB mapped
  tags_.give_back(kept);
  char* fresh = static_cast<char*>(tags_.take(128 << 10, false, 1, 3, &miss));
  ASSERT_NE(fresh, nullptr);
  EXPECT_NE(fresh, kept) << "kept just now: fresh pages below the peak";
  EXPECT_EQ(tags_.retained_bytes(), 512u << 10);
  std::this_thread::sleep_for(std::chrono::nanoseconds(2 * TagRegion::kRefitAfterNs));
  EXPECT_EQ(tags_.take(128 << 10, false, 1, 4, &miss), kept) << "kept a while: fitted";
  EXPECT_EQ(tags_.retained_bytes(), 0u);
}

// give_back(p, /*keep=*/false): the pages go back even where the allowance would keep them (the
// shim's free of a profiled block on a thread that no longer profiles).
TEST_F(TagRegionTest, AFreeThatKeepsNothingUnmapsWithinTheAllowance) {
  tags_.set_retain_bytes(1 << 20);
  TagRegion::Miss miss;
  char* p = static_cast<char*>(tags_.take(8192, false, 1, 0, &miss));
  ASSERT_NE(p, nullptr);
  memset(p, 0xab, 8192);
  tags_.give_back(p, /*keep=*/false);
  EXPECT_EQ(tags_.retained_bytes(), 0u);
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

// A kept slot serves its own size class first: a small block takes the small kept slot, not the
// large one, and a large block the large one.
TEST_F(TagRegionTest, KeptSlotsServeTheirOwnSizeClassFirst) {
  tags_.set_retain_bytes(64 << 20);
  TagRegion::Miss miss;
  void* large = tags_.take(600 << 10, false, 1, 0, &miss);  // 150 pages: mapped as 160
  void* small = tags_.take(4096, false, 1, 1, &miss);
  ASSERT_NE(large, nullptr);
  ASSERT_NE(small, nullptr);
  tags_.give_back(large);
  tags_.give_back(small);
  EXPECT_EQ(tags_.retained_bytes(), 160u * 4096 + 4096);
  EXPECT_EQ(tags_.take(4000, false, 1, 2, &miss), small);
  EXPECT_EQ(tags_.take(520 << 10, false, 1, 3, &miss), large) << "130 pages: the same class";
  void* other = tags_.take(40000, false, 1, 4, &miss);
  EXPECT_NE(other, small);
  EXPECT_NE(other, large);
  EXPECT_EQ(tags_.retained_bytes(), 0u);
  tags_.give_back(other);
  tags_.give_back(small);
  tags_.give_back(large);
  tags_.trim();
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

using memoplan::test_support::resident_pages;

// A block taking a larger class's kept slot leaves none of its pages past the block's class
// mapped (a block that lives on would hold them), unless keep_tail: then they stay for later.
TEST_F(TagRegionTest, ALargerKeptSlotIsCutToTheBlockUnlessItKeepsItsTail) {
  tags_.set_retain_bytes(64 << 20);
  TagRegion::Miss miss;
  char* large = static_cast<char*>(tags_.take(160 * 4096, false, 1, 0, &miss));
  ASSERT_NE(large, nullptr);
  memset(large, 1, 160 * 4096);
  tags_.give_back(large);
  char* cut = static_cast<char*>(tags_.take(100 * 4096, false, 1, 1, &miss));  // mapped as 112
  ASSERT_EQ(cut, large) << "the 160-page slot, two classes up";
  EXPECT_EQ(resident_pages(cut, 112 * 4096), 112u);
  EXPECT_EQ(resident_pages(cut + 112 * 4096, 48 * 4096), 0u);
  tags_.give_back(cut);
  EXPECT_EQ(tags_.retained_bytes(), 112u * 4096);
  char* kept =
      static_cast<char*>(tags_.take(80 * 4096, false, 1, 2, &miss, 64, TagRegion::kKeepTail));
  ASSERT_EQ(kept, large);
  EXPECT_EQ(resident_pages(kept + 80 * 4096, 32 * 4096), 32u) << "kKeepTail";
  tags_.give_back(kept);
  EXPECT_EQ(tags_.retained_bytes(), 112u * 4096);
  tags_.trim();
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

// kPopulateRepeated: a size class whose probe (its first block, all pages fresh) was written
// whole has its next blocks' fresh pages resident when taken, up to each block's end (not the
// class's rounding), but for one probe in kProbeEvery; a class whose probe was written in part, a
// block taken without the flag and one under kPopulateFrom map lazily.
TEST(TagRegionPopulate, ClassesWrittenWholeArePopulatedToTheBlocksEnd) {
  {  // The kernel's part (Linux 5.14; an emulator may ignore it): probed on a mapping of our own.
    void* probe =
        mmap(nullptr, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const bool works =
        madvise(probe, 2 * 4096, MADV_POPULATE_WRITE) == 0 && resident_pages(probe, 2 * 4096) == 2;
    munmap(probe, 2 * 4096);
    if (!works) GTEST_SKIP() << "MADV_POPULATE_WRITE not supported here";
  }
  TagRegion tags;
  ASSERT_TRUE(tags.reserve(22, 20, 2));
  const unsigned populate = TagRegion::kPopulateRepeated;
  TagRegion::Miss miss;
  auto take = [&](uint64_t bytes, unsigned flags) {
    char* p = static_cast<char*>(tags.take(bytes, false, 1, 0, &miss, 64, flags));
    EXPECT_NE(p, nullptr);
    return p;
  };
  constexpr uint64_t kWhole = 200 * 4096 + 100;  // 201 pages, mapped as 224
  static_assert(kWhole >= TagRegion::kPopulateFrom);
  char* probe = take(kWhole, populate);
  EXPECT_EQ(resident_pages(probe, 224 * 4096), 0u) << "a class's first block maps lazily";
  memset(probe, 1, kWhole);
  tags.give_back(probe, false);
  char* unflagged = take(kWhole, 0);
  EXPECT_EQ(resident_pages(unflagged, 224 * 4096), 0u) << "without the flag";
  for (uint32_t i = 1; i < TagRegion::kProbeEvery; ++i) {
    char* p = take(kWhole, populate);
    EXPECT_EQ(resident_pages(p, 201 * 4096), 201u) << "the class written whole, block " << i;
    EXPECT_EQ(resident_pages(p + 201 * 4096, 23 * 4096), 0u) << "past the block's end";
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[kWhole - 1], 0);
    tags.give_back(p, false);
  }
  char* next_probe = take(kWhole, populate);
  EXPECT_EQ(resident_pages(next_probe, 224 * 4096), 0u) << "one in kProbeEvery is a probe";
  next_probe[0] = 1;  // written in part: the class maps lazily from now on
  tags.give_back(next_probe, false);
  char* after = take(kWhole, populate);
  EXPECT_EQ(resident_pages(after, 224 * 4096), 0u) << "the class's last probe was written in part";
  tags.give_back(after, false);
  // Under kPopulateFrom: lazily, written whole or not.
  constexpr uint64_t kSmaller = TagRegion::kPopulateFrom - 4096;
  for (int i = 0; i < 2; ++i) {
    char* p = take(kSmaller, populate);
    EXPECT_EQ(resident_pages(p, kSmaller), 0u) << "take " << i;
    memset(p, 1, kSmaller);
    tags.give_back(p, false);
  }
  tags.give_back(unflagged);
  EXPECT_EQ(tags.slots_in_use(), 0u);
  tags.release_all();
}

// A block that no kept slot of its classes serves, and that fresh pages would raise the region's
// peak of mapped bytes for, takes another kept slot fitted to it: the smallest larger one, its
// pages past the block unmapped, else a smaller one, pages mapped on.
TEST_F(TagRegionTest, KeptSlotsOfOtherSizesAreFittedToABlock) {
  tags_.set_retain_bytes(64 << 20);
  TagRegion::Miss miss;
  char* large = static_cast<char*>(tags_.take(600 << 10, false, 1, 0, &miss));  // 160 pages
  char* small = static_cast<char*>(tags_.take(8192, false, 1, 1, &miss));
  ASSERT_TRUE(large && small);
  memset(large, 0xab, 600 << 10);
  memset(small, 0xcd, 8192);
  tags_.give_back(large);
  tags_.give_back(small);
  EXPECT_EQ(tags_.retained_bytes(), 162u * 4096) << "the peak: 162 pages";
  char* a = static_cast<char*>(tags_.take(4 * 4096, true, 1, 2, &miss));
  EXPECT_EQ(a, large) << "4 pages: the 160-page slot cut to them (the 2-page one is smaller)";
  for (int i = 0; i < 4 * 4096; ++i) ASSERT_EQ(a[i], 0) << "zero asked: cleared at " << i;
  EXPECT_EQ(tags_.retained_bytes(), 2u * 4096);
  char* b = static_cast<char*>(tags_.take(200 * 4096, true, 1, 3, &miss));  // mapped as 224
  EXPECT_EQ(b, small) << "nothing kept at or above their class; the 2 pages grown";
  for (int i = 0; i < 200 * 4096; ++i) ASSERT_EQ(b[i], 0) << "zero asked: cleared at " << i;
  memset(b, 1, 200 * 4096);  // every page mapped read-write
  EXPECT_EQ(tags_.retained_bytes(), 0u);
  EXPECT_EQ(tags_.slots_in_use(), 2u);
  tags_.give_back(a);
  tags_.give_back(b);
  EXPECT_EQ(tags_.retained_bytes(), (4u + 224u) * 4096);
  tags_.trim();
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

// Pages mapped on to a grown slot give back as many kept bytes: the smallest kept slot that covers
// them, so the least goes past them.
TEST_F(TagRegionTest, PagesMappedOnGiveBackTheSmallestKeptSlotCoveringThem) {
  tags_.set_retain_bytes(64 << 20);
  TagRegion::Miss miss;
  std::vector<void*> blocks;
  for (uint64_t pages : {96, 96, 24, 8}) {
    blocks.push_back(tags_.take(pages * 4096, false, 1, pages, &miss));
    ASSERT_NE(blocks.back(), nullptr);
    memset(blocks.back(), 1, pages * 4096);
  }
  for (void* p : blocks) tags_.give_back(p);
  EXPECT_EQ(tags_.retained_bytes(), (96u + 96 + 24 + 8) * 4096);
  void* grown = tags_.take(100 * 4096, false, 1, 5, &miss);  // mapped as 112 pages
  EXPECT_TRUE(grown == blocks[0] || grown == blocks[1]) << "a 96-page slot grown by 16 pages";
  EXPECT_EQ(tags_.retained_bytes(), (96u + 8) * 4096) << "the 24-page slot went, not the other 96";
  tags_.give_back(grown);
  tags_.trim();
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

// Below the region's peak of mapped bytes, pages mapped on for a block leave the kept ones alone:
// the peak does not grow, and the next pass finds them.
TEST_F(TagRegionTest, BelowThePeakKeptPagesStay) {
  tags_.set_retain_bytes(64 << 20);
  TagRegion::Miss miss;
  void* first = tags_.take(240 * 4096, false, 1, 0, &miss);  // 256 pages: the peak
  ASSERT_NE(first, nullptr);
  tags_.give_back(first);
  tags_.trim();
  void* y = tags_.take(96 * 4096, false, 1, 1, &miss);
  void* z = tags_.take(96 * 4096, false, 1, 2, &miss);
  ASSERT_TRUE(y && z);
  tags_.give_back(y);
  tags_.give_back(z);
  void* grown = tags_.take(100 * 4096, false, 1, 3, &miss);
  EXPECT_TRUE(grown == y || grown == z) << "a 96-page slot grown to 112 pages";
  EXPECT_EQ(tags_.retained_bytes(), 96u * 4096) << "208 pages mapped, under the peak: one stays";
  tags_.give_back(grown);
  tags_.trim();
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

bool fail_always() { return true; }

// A block grows in place up to its slot's size (pages mapped past what it had, its bytes kept),
// shrinks keeping its pages, and is kept at its free as a whole size class.
TEST_F(TagRegionTest, ABlockResizesInPlaceWithinItsSlot) {
  tags_.set_retain_bytes(1 << 20);
  TagRegion::Miss miss;
  char* p = static_cast<char*>(tags_.take(5000, false, 1, 0, &miss));
  ASSERT_NE(p, nullptr);
  memset(p, 0x5a, 5000);
  ASSERT_TRUE(tags_.resize(p, 300000));
  EXPECT_EQ(tags_.owner_of(p).bytes, 300000u);
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(p[i], 0x5a) << "kept at " << i;
  memset(p, 0x33, 300000);  // every new page mapped read-write
  ASSERT_TRUE(tags_.resize(p, 200000));
  EXPECT_EQ(tags_.owner_of(p).bytes, 200000u);
  EXPECT_FALSE(tags_.resize(p, tags_.slot_bytes() + 1));
  EXPECT_EQ(tags_.owner_of(p).bytes, 200000u) << "a failed resize leaves the block alone";
  tags_.give_back(p);
  EXPECT_EQ(tags_.retained_bytes(), 80u * 4096) << "mapped as 300,000 bytes' class: 80 pages";
  tags_.set_commit_fault(&fail_always);
  char* r = static_cast<char*>(tags_.take(4096, true, 1, 1, &miss));
  ASSERT_EQ(r, p) << "the kept slot cut to a page: nothing to map";
  EXPECT_EQ(r[0], 0) << "zero asked: cleared";
  EXPECT_EQ(tags_.retained_bytes(), 0u);
  EXPECT_EQ(tags_.take(4096, false, 1, 2, &miss), nullptr) << "nothing kept: a fresh slot fails";
  tags_.set_commit_fault(nullptr);
  tags_.set_commit_fault(&fail_always);
  EXPECT_FALSE(tags_.resize(r, 100000)) << "the pages past it cannot be mapped";
  tags_.set_commit_fault(nullptr);
  EXPECT_EQ(tags_.owner_of(r).bytes, 4096u);
  tags_.give_back(r);
  tags_.trim();
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

TEST_F(TagRegionTest, CommitFailureGivesTheSlotBack) {
  tags_.set_commit_fault(&fail_always);
  TagRegion::Miss miss;
  EXPECT_EQ(tags_.take(4096, false, 1, 0, &miss), nullptr);
  EXPECT_EQ(miss, TagRegion::Miss::kCommitFailed);
  EXPECT_EQ(tags_.slots_in_use(), 0u);
}

}  // namespace
}  // namespace memoplan::record
