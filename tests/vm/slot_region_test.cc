// SlotRegion: reserved address space cut into power-of-two slots; the slot index of any pointer
// into a slot is its tag. Small regions here (4 KiB and 64 KiB slots), the same code as the shim's.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "memoplan/vm/slot_region.h"

namespace memoplan::vm {
namespace {

// True when the page at p can be read and written (probing with mincore would not tell
// PROT_NONE apart; mprotect on a PROT_NONE reservation would change it, so ask /proc instead).
bool page_is_accessible(const void* p) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (!maps) return false;
  const auto address = reinterpret_cast<uintptr_t>(p);
  char line[512];
  bool accessible = false;
  while (fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && address >= lo && address < hi) {
      accessible = perms[0] == 'r' && perms[1] == 'w';
    }
  }
  fclose(maps);
  return accessible;
}

class SlotRegionTest : public ::testing::Test {
 protected:
  void TearDown() override { region_.release_all(); }
  SlotRegion region_;
};

TEST_F(SlotRegionTest, ReserveRejectsBadShapes) {
  errno = 0;
  EXPECT_FALSE(region_.reserve(16, 0));
  EXPECT_EQ(errno, EINVAL);
  EXPECT_FALSE(region_.reserve(16, 3));  // not a power of two
  EXPECT_FALSE(region_.reserve(11, 4));  // slots smaller than a page
  EXPECT_FALSE(region_.reserve(41, 4));  // slots larger than 1 TiB
  EXPECT_FALSE(region_.reserved());
  ASSERT_TRUE(region_.reserve(12, 4));
  EXPECT_FALSE(region_.reserve(12, 4));  // already reserved
  EXPECT_TRUE(region_.reserved());
}

TEST_F(SlotRegionTest, RegionIsAlignedToItsSizeAndSlotsAreContiguous) {
  ASSERT_TRUE(region_.reserve(16, 32));
  const auto base = reinterpret_cast<uintptr_t>(region_.slot_address(0));
  EXPECT_EQ(base % (uintptr_t{32} << 16), 0u);
  EXPECT_EQ(region_.slot_bytes(), 65536u);
  EXPECT_EQ(region_.slot_count(), 32u);
  for (uint32_t s = 0; s < 32; ++s) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(region_.slot_address(s)), base + (uintptr_t{s} << 16));
  }
}

// The shim's span (interpose/engine.cc): one reservation, regions adopted inside it; releasing an
// adopted region leaves the span reserved (a fresh adopt works, the pages stay PROT_NONE).
TEST_F(SlotRegionTest, AReservedRangeHoldsAdoptedRegionsThatLeaveItReserved) {
  errno = 0;
  EXPECT_EQ(reserve_range(4096, 3 << 12), 0u);  // alignment not a power of two
  EXPECT_EQ(errno, EINVAL);
  const size_t alignment = size_t{1} << 24;
  const uintptr_t base = reserve_range(alignment + (size_t{8} << 16), alignment);
  ASSERT_NE(base, 0u);
  EXPECT_EQ(base % alignment, 0u);
  EXPECT_FALSE(page_is_accessible(reinterpret_cast<void*>(base)));
  EXPECT_FALSE(region_.adopt(base + 4096, 16, 8)) << "off its slot alignment";
  ASSERT_TRUE(region_.adopt(base + alignment, 16, 8));
  EXPECT_TRUE(region_.contains(reinterpret_cast<void*>(base + alignment)));
  EXPECT_FALSE(region_.contains(reinterpret_cast<void*>(base + alignment - 1)));
  ASSERT_TRUE(region_.commit(7, 4096));
  EXPECT_TRUE(page_is_accessible(region_.slot_address(7)));
  region_.decommit(7, 4096);
  region_.release_all();
  ASSERT_TRUE(region_.adopt(base + alignment, 16, 8)) << "the range is still reserved";
  region_.release_all();
  EXPECT_EQ(munmap(reinterpret_cast<void*>(base), alignment + (size_t{8} << 16)), 0);
}

TEST_F(SlotRegionTest, TagOfAnyInteriorPointerIsTheSlotIndex) {
  ASSERT_TRUE(region_.reserve(16, 8));
  for (uint32_t s = 0; s < 8; ++s) {
    const char* slot = region_.slot_address(s);
    for (size_t offset : {size_t{0}, size_t{1}, size_t{4095}, size_t{40000}, size_t{65535}}) {
      EXPECT_TRUE(region_.contains(slot + offset));
      EXPECT_EQ(region_.slot_of(slot + offset), s) << "offset " << offset;
    }
  }
  const char* first = region_.slot_address(0);
  const char* end = region_.slot_address(7) + 65536;
  EXPECT_FALSE(region_.contains(first - 1));
  EXPECT_FALSE(region_.contains(end));
  EXPECT_TRUE(region_.contains(end - 1));
  EXPECT_FALSE(region_.contains(nullptr));
}

TEST_F(SlotRegionTest, UnreservedRegionContainsNothing) {
  EXPECT_FALSE(region_.contains(nullptr));
  int local = 0;
  EXPECT_FALSE(region_.contains(&local));
}

TEST_F(SlotRegionTest, CommitMapsZeroedPagesAndDecommitTakesThemBack) {
  ASSERT_TRUE(region_.reserve(16, 4));
  char* slot = region_.slot_address(2);
  EXPECT_FALSE(page_is_accessible(slot));
  ASSERT_TRUE(region_.commit(2, 5000));  // rounds up to two pages
  EXPECT_TRUE(page_is_accessible(slot));
  EXPECT_TRUE(page_is_accessible(slot + 8191));
  EXPECT_FALSE(page_is_accessible(slot + 8192));
  for (size_t i = 0; i < 8192; ++i) ASSERT_EQ(slot[i], 0) << i;
  memset(slot, 0x5a, 8192);
  region_.decommit(2, 5000);
  EXPECT_FALSE(page_is_accessible(slot));
  ASSERT_TRUE(region_.commit(2, 8192));
  for (size_t i = 0; i < 8192; ++i) ASSERT_EQ(slot[i], 0) << "stale byte at " << i;
}

TEST_F(SlotRegionTest, CommitRefusesWhatDoesNotFit) {
  ASSERT_TRUE(region_.reserve(12, 4));
  EXPECT_FALSE(region_.commit(4, 4096));  // no such slot
  EXPECT_FALSE(region_.commit(0, 4097));  // larger than a slot
  EXPECT_TRUE(region_.commit(0, 4096));
  EXPECT_TRUE(region_.commit(1, 0));  // zero bytes still maps a page
  EXPECT_TRUE(page_is_accessible(region_.slot_address(1)));
}

TEST_F(SlotRegionTest, AcquireHandsOutEverySlotOnceThenRunsOut) {
  ASSERT_TRUE(region_.reserve(12, 128));  // two bitmap words
  std::set<uint32_t> seen;
  for (int i = 0; i < 128; ++i) {
    uint32_t slot = ~0u;
    ASSERT_TRUE(region_.acquire(slot)) << i;
    ASSERT_LT(slot, 128u);
    EXPECT_TRUE(seen.insert(slot).second) << "slot " << slot << " handed out twice";
  }
  EXPECT_EQ(region_.slots_in_use(), 128u);
  uint32_t slot = 0;
  EXPECT_FALSE(region_.acquire(slot));
  region_.release(77);
  EXPECT_EQ(region_.slots_in_use(), 127u);
  ASSERT_TRUE(region_.acquire(slot));
  EXPECT_EQ(slot, 77u);
  EXPECT_FALSE(region_.acquire(slot));
}

TEST_F(SlotRegionTest, CountBelowOneBitmapWordNeverHandsOutMissingSlots) {
  ASSERT_TRUE(region_.reserve(12, 2));
  uint32_t a = 0, b = 0, c = 0;
  ASSERT_TRUE(region_.acquire(a));
  ASSERT_TRUE(region_.acquire(b));
  EXPECT_NE(a, b);
  EXPECT_LT(a, 2u);
  EXPECT_LT(b, 2u);
  EXPECT_FALSE(region_.acquire(c));
}

TEST_F(SlotRegionTest, ReleaseAllAllowsAFreshReservation) {
  ASSERT_TRUE(region_.reserve(12, 4));
  uint32_t slot = 0;
  ASSERT_TRUE(region_.acquire(slot));
  region_.release_all();
  EXPECT_FALSE(region_.reserved());
  EXPECT_EQ(region_.slots_in_use(), 0u);
  ASSERT_TRUE(region_.reserve(13, 8));
  EXPECT_EQ(region_.slot_bytes(), 8192u);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(region_.acquire(slot));
}

TEST_F(SlotRegionTest, ConcurrentAcquireAndReleaseNeverShareASlot) {
  ASSERT_TRUE(region_.reserve(12, 256));
  std::vector<std::atomic<int>> holders(256);
  std::atomic<bool> shared{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        uint32_t slot = 0;
        if (!region_.acquire(slot)) continue;
        if (holders[slot].fetch_add(1) != 0) shared = true;
        holders[slot].fetch_sub(1);
        region_.release(slot);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(shared.load());
  EXPECT_EQ(region_.slots_in_use(), 0u);
}

}  // namespace
}  // namespace memoplan::vm
