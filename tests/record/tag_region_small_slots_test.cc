// record::TagRegion's small slots: 64 KiB slots cut from the first large ones, side by side, and
// shared by blocks of one stride (record::SharedSlots): interior pointers, reuse, a closed slot's
// pages going back, threads, and fresh pages against kept ones.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "memoplan/record/tag_region.h"
#include "resident_pages.h"

namespace memoplan::record {
namespace {

using memoplan::test_support::resident_pages;
// Where the address space allows large slots of 4 MiB or more, blocks of 64 KiB or less take
// 64 KiB slots cut from the first large ones: neighbours 64 KiB apart, found by the same range
// check, their interior pointers leading to their records; larger blocks, or alignments past
// 64 KiB, take large slots. A small block cannot grow past its slot in place.
TEST(TagRegionSmallSlots, SmallBlocksSitSideBySide) {
  TagRegion tags;
  ASSERT_TRUE(tags.reserve(22, 20, 2));  // 4 MiB slots: 256 GiB, which qemu-user maps too
  if (tags.slot_bytes() < (uint64_t{1} << TagRegion::kSmallFromShift)) {
    tags.release_all();
    GTEST_SKIP() << "large slots of " << tags.slot_bytes() << " bytes: no small ones";
  }
  EXPECT_EQ(tags.small_slots(), TagRegion::kSmallSetAside * (tags.slot_bytes() >> 16));
  TagRegion::Miss miss;
  char* a = static_cast<char*>(tags.take(4400, false, 1, 10, &miss));
  char* b = static_cast<char*>(tags.take(64 << 10, false, 2, 11, &miss));
  char* large = static_cast<char*>(tags.take((64 << 10) + 1, false, 3, 12, &miss));
  char* aligned = static_cast<char*>(tags.take(4096, false, 4, 13, &miss, 128 << 10));
  ASSERT_TRUE(a && b && large && aligned);
  const uintptr_t base = tags.region().base();
  const uintptr_t small_end = base + TagRegion::kSmallSetAside * tags.slot_bytes();
  for (char* p : {a, b}) {
    EXPECT_TRUE(tags.contains(p));
    EXPECT_LT(reinterpret_cast<uintptr_t>(p), small_end);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (64 << 10), 0u);
  }
  EXPECT_EQ(b - a, 64 << 10) << "neighbouring small slots";
  for (char* p : {large, aligned}) {
    EXPECT_GE(reinterpret_cast<uintptr_t>(p), small_end);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % tags.slot_bytes(), 0u);
  }
  memset(a, 1, 4400);
  memset(b, 2, 64 << 10);
  EXPECT_EQ(tags.owner_of(a + 4399).record, 10u);
  EXPECT_EQ(tags.owner_of(b + (64 << 10) - 1).record, 11u);
  EXPECT_EQ(tags.owner_of(large + (64 << 10)).record, 12u);
  EXPECT_EQ(tags.owner_of(aligned).record, 13u);
  EXPECT_EQ(tags.slots_in_use(), 4u);
  EXPECT_TRUE(tags.resize(a, 60 << 10));
  memset(a, 3, 60 << 10);
  EXPECT_FALSE(tags.resize(a, (64 << 10) + 1)) << "past its small slot";
  EXPECT_EQ(tags.owner_of(a).bytes, uint64_t{60 << 10});
  EXPECT_EQ(b[0], 2) << "the neighbour untouched";
  for (char* p : {a, b, large, aligned}) tags.give_back(p);
  EXPECT_EQ(tags.slots_in_use(), 0u);
  // A freed small slot is taken again, and a kept one too.
  EXPECT_EQ(tags.take(100, false, 1, 14, &miss), a);
  tags.set_retain_bytes(1 << 20);
  tags.give_back(a);
  EXPECT_EQ(tags.take(200, true, 1, 15, &miss), a);
  EXPECT_NE(tags.take(4096, false, 1, 16, &miss, 1 << 20), a) << "a kept small slot is too small";
  tags.release_all();
}

// Shares small slots in `tags`, as the shim does; where its slots are too large to be cut into
// 64 KiB ones, gives the region back and says so (the caller skips).
bool shares_small_slots(TagRegion& tags) {
  if (tags.share_small_slots()) return true;
  tags.release_all();
  return false;
}

// Shared small slots (the shim's choice): blocks of 32 KiB or less packed in a 64 KiB slot per
// stride class, found with interior pointers; the open slot's freed blocks are reused; a slot is
// unmapped when its last block goes after it closed (full, or trim()); a block grows in place up
// to its stride; larger or more aligned blocks take slots of their own.
TEST(TagRegionSmallSlots, BlocksOf32KiBOrLessShareASlot) {
  TagRegion tags;
  ASSERT_TRUE(tags.reserve(22, 20, 2));  // 4 MiB slots: 256 GiB, which qemu-user maps too
  if (!shares_small_slots(tags)) GTEST_SKIP() << "large slots: no small ones";
  TagRegion::Miss miss;
  std::vector<char*> pages;  // 4,104 bytes: a stride of 4,608, 14 to a slot
  for (int i = 0; i < 15; ++i) {
    pages.push_back(static_cast<char*>(tags.take(4104, i % 2, 1, 100 + i, &miss)));
    ASSERT_NE(pages.back(), nullptr);
  }
  for (int i = 1; i < 14; ++i) EXPECT_EQ(pages[i] - pages[i - 1], 4608) << i;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pages[0]) % (64 << 10), 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pages[14]) % (64 << 10), 0u) << "the 15th opens a slot";
  EXPECT_EQ(tags.slots_in_use(), 2u);
  for (int i = 0; i < 15; ++i) {
    for (int j = 0; j < 4104; ++j) ASSERT_EQ(pages[i][j], 0) << "fresh, never reused";
    memset(pages[i], i + 1, 4104);
  }
  for (int i = 0; i < 15; ++i) {
    const TagRegion::Owner o = tags.owner_of(pages[i] + (i * 293) % 4104);
    EXPECT_EQ(o.record, 100u + i);
    EXPECT_EQ(o.bytes, 4104u);
  }
  EXPECT_TRUE(tags.resize(pages[3], 4608));
  EXPECT_EQ(tags.owner_of(pages[3]).bytes, 4608u);
  EXPECT_FALSE(tags.resize(pages[3], 4609)) << "past its stride";
  EXPECT_EQ(pages[4][0], 5) << "the neighbour untouched";
  // Other classes, alignments and sizes.
  char* other = static_cast<char*>(tags.take(7464, false, 1, 200, &miss));
  char* aligned = static_cast<char*>(tags.take(4104, false, 1, 201, &miss, 128));
  char* sole = static_cast<char*>(tags.take((32 << 10) + 1, false, 1, 202, &miss));
  for (char* p : {other, aligned, sole}) {
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (64 << 10), 0u);
  }
  EXPECT_EQ(tags.owner_of(other + 7000).record, 200u);
  EXPECT_EQ(tags.owner_of(aligned).record, 201u);
  EXPECT_EQ(tags.owner_of(sole + (32 << 10)).record, 202u);
  EXPECT_EQ(tags.slots_in_use(), 5u);
  // The full slot goes with its last block; the open one stays until trim() closes it.
  for (int i = 0; i < 14; ++i) tags.give_back(pages[i]);
  EXPECT_EQ(tags.slots_in_use(), 4u);
  tags.give_back(pages[14]);
  EXPECT_EQ(tags.slots_in_use(), 4u) << "open: more blocks may come";
  // The open slot's freed block is its class's next, cleared when zeros are asked.
  char* again = static_cast<char*>(tags.take(4500, true, 1, 300, &miss));  // a stride of 4,608
  ASSERT_EQ(again, pages[14]);
  for (int j = 0; j < 4500; ++j) ASSERT_EQ(again[j], 0);
  EXPECT_EQ(tags.owner_of(again + 4499).record, 300u);
  tags.give_back(again);
  tags.trim();
  EXPECT_EQ(tags.slots_in_use(), 3u);
  EXPECT_EQ(tags.owner_of(other).record, 200u) << "closed with a live block: kept";
  for (char* p : {other, aligned, sole}) tags.give_back(p);
  EXPECT_EQ(tags.slots_in_use(), 0u);
  tags.release_all();
}

// Threads taking and giving back shared blocks of every class at once: no block handed out twice,
// every slot unmapped at the end.
// A closed shared slot's freed blocks give their whole pages back while other blocks stay: in a
// start-up whose small blocks outlive one another (PyTorch 2.6 optimizing a frozen graph), a slot
// held its 64 KiB for its last one.
TEST(TagRegionSmallSlots, AClosedSlotsFreedBlocksGiveTheirPagesBack) {
  TagRegion tags;
  ASSERT_TRUE(tags.reserve(22, 20, 2));
  if (!shares_small_slots(tags)) GTEST_SKIP() << "large slots: no small ones";
  TagRegion::Miss miss;
  std::vector<char*> blocks;  // 4,104 bytes: a stride of 4,608, 14 to a slot; the 15th closes it
  for (int i = 0; i < 15; ++i) {
    blocks.push_back(static_cast<char*>(tags.take(4104, false, 1, i, &miss)));
    ASSERT_NE(blocks.back(), nullptr);
    memset(blocks.back(), 1, 4104);
  }
  char* slot = blocks[0];
  EXPECT_EQ(resident_pages(slot, 64 << 10), 16u) << "14 blocks of 4,608 bytes";
  for (int i = 1; i < 13; ++i) tags.give_back(blocks[i]);
  // Blocks 0 and 13 stay: bytes [0, 4608) and [59904, 64512): pages 0-1 and 14-15.
  EXPECT_EQ(resident_pages(slot, 64 << 10), 4u);
  EXPECT_EQ(blocks[0][4103], 1);
  EXPECT_EQ(blocks[13][0], 1);
  EXPECT_EQ(blocks[13][4103], 1);
  tags.give_back(blocks[0]);
  tags.give_back(blocks[13]);
  EXPECT_EQ(tags.slots_in_use(), 1u) << "the closed slot went with its last block";
  tags.give_back(blocks[14]);
  tags.trim();
  EXPECT_EQ(tags.slots_in_use(), 0u);
  tags.release_all();
}

TEST(TagRegionSmallSlots, SharedSlotsUnderThreads) {
  TagRegion tags;
  ASSERT_TRUE(tags.reserve(22, 20, 2));  // 4 MiB slots: 256 GiB, which qemu-user maps too
  if (!shares_small_slots(tags)) GTEST_SKIP() << "large slots: no small ones";
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      struct Block {
        uint8_t* p;
        uint64_t bytes;
        uint64_t id;
      };
      std::vector<Block> live;
      uint64_t seed = 12345 + t;
      for (uint64_t i = 0; i < 20000; ++i) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        if (live.size() > 40 || (!live.empty() && (seed >> 60) < 7)) {
          const size_t k = (seed >> 20) % live.size();
          const Block b = live[k];
          const uint8_t mark = static_cast<uint8_t>(b.id * 2 + 1);
          if (b.p[0] != mark || b.p[b.bytes - 1] != mark) bad.fetch_add(1);
          const TagRegion::Owner o = tags.owner_of(b.p + b.bytes / 2);
          if (o.record != b.id || o.bytes != b.bytes) bad.fetch_add(1);
          tags.give_back(b.p);
          live[k] = live.back();
          live.pop_back();
        } else {
          const uint64_t bytes = 64 + (seed >> 40) % (32 << 10);
          const uint64_t id = uint64_t(t) << 32 | i;
          TagRegion::Miss miss;
          auto* p = static_cast<uint8_t*>(tags.take(bytes, false, 1, id, &miss));
          if (!p) continue;
          memset(p, static_cast<uint8_t>(id * 2 + 1), bytes);
          live.push_back({p, bytes, id});
        }
      }
      for (const Block& b : live) tags.give_back(b.p);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  tags.trim();
  EXPECT_EQ(tags.slots_in_use(), 0u);
  tags.release_all();
}

// Pages mapped anew while others are kept give back as many kept bytes (a kept small slot cannot
// hold a large block): the region's mapped bytes grow only while nothing is kept.
TEST(TagRegionSmallSlots, FreshPagesGiveBackAsManyKeptOnes) {
  TagRegion tags;
  ASSERT_TRUE(tags.reserve(22, 20, 2));
  if (tags.small_slots() == 0) {
    tags.release_all();
    GTEST_SKIP() << "large slots of " << tags.slot_bytes() << " bytes: no small ones";
  }
  tags.set_retain_bytes(64 << 20);
  TagRegion::Miss miss;
  std::vector<void*> small;
  for (int i = 0; i < 8; ++i) small.push_back(tags.take(60 << 10, false, 1, i, &miss));
  for (void* p : small) {
    ASSERT_NE(p, nullptr);
    tags.give_back(p);
  }
  EXPECT_EQ(tags.retained_bytes(), 8u << 16) << "eight 64 KiB slots kept";
  void* big = tags.take(256 << 10, false, 1, 8, &miss);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(tags.retained_bytes(), 4u << 16) << "256 KiB mapped anew, 256 KiB of kept pages gone";
  void* bigger = tags.take(1 << 20, false, 1, 9, &miss);
  ASSERT_NE(bigger, nullptr);
  EXPECT_EQ(tags.retained_bytes(), 0u);
  tags.give_back(big);
  tags.give_back(bigger);
  tags.trim();
  EXPECT_EQ(tags.slots_in_use(), 0u);
  tags.release_all();
}

}  // namespace
}  // namespace memoplan::record
