// replay::ArenaRegion and Arena: placement under the live-range guard, frees from the owner and
// from other threads, retirement with blocks alive (the last free on another thread gives the
// arena back), usable sizes, map failures and the region running out of arenas.
#include "memoplan/replay/arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "memoplan/vm/monotonic.h"
#include "resident_pages.h"

namespace memoplan::replay {
namespace {

const void* token() {
  static thread_local char t;
  return &t;
}

class ArenaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ArenaRegion::Config config;
    config.largest_shift = 24;  // 16 MiB arenas
    config.smallest_shift = 20;
    config.arenas = 4;
    config.guard_capacity = 64;
    config.track_sizes = true;
    ASSERT_TRUE(region_.reserve(config));
    region_.set_counters(&counters_);
  }

  Arena* create(uint64_t bytes) {
    ArenaRegion::Failure why;
    Arena* a = region_.create(bytes, token(), &why);
    EXPECT_EQ(a != nullptr, why == ArenaRegion::Failure::kNone);
    return a;
  }

  // Production never unmaps a region (its Arena table must outlive every free); a test's region
  // goes once the test has freed everything.
  void TearDown() override { region_.release_all(); }

  ArenaRegion region_;
  SharedCounters counters_;
};

TEST_F(ArenaTest, PlacesAtOffsetsAndRefusesOverlaps) {
  Arena* a = create(1 << 20);
  ASSERT_NE(a, nullptr);
  Fallback why;
  char* p = static_cast<char*>(a->place(0, 4096, &why));
  ASSERT_EQ(p, a->base());
  EXPECT_TRUE(region_.contains(p));
  EXPECT_EQ(&region_.arena_of(p + 100), a);
  EXPECT_EQ(a->place(2048, 4096, &why), nullptr) << "overlaps the live block at 0";
  EXPECT_EQ(why, Fallback::kOverlap);
  char* q = static_cast<char*>(a->place(4096, 8192, &why));
  ASSERT_EQ(q, a->base() + 4096);
  EXPECT_EQ(region_.usable_size(p), 4096u);
  EXPECT_EQ(region_.usable_size(q), 8192u);
  EXPECT_EQ(a->live_bytes(), 4096u + 8192u);
  memset(p, 1, 4096);  // mapped read-write
  region_.free(p, token());
  EXPECT_EQ(a->live_blocks(), 1u);
  EXPECT_NE(a->place(2048, 1024, &why), nullptr) << "free again";
  EXPECT_EQ(a->peak_live_bytes(), 4096u + 8192u);
  EXPECT_EQ(counters_.remote_frees.load(), 0u);
}

// memory "min": place_shared lays a block over the live blocks the caller allows, never over
// others; their frees and its own release the bytes together.
TEST_F(ArenaTest, PlaceSharedLaysABlockOnlyOverAllowedLiveBlocks) {
  Arena* a = create(1 << 20);
  ASSERT_NE(a, nullptr);
  Fallback why;
  char* x = static_cast<char*>(a->place(0, 4096, &why));
  char* y = static_cast<char*>(a->place(4096, 4096, &why));
  char* other = static_cast<char*>(a->place(8192, 4096, &why));
  ASSERT_TRUE(x && y && other);
  EXPECT_EQ(a->place(0, 8192, &why), nullptr);  // the plain guard says no
  const ByteRange inputs[] = {{0, 8192, 1, false}};
  EXPECT_EQ(a->place_shared(0, 12288, inputs, 1, &why), nullptr) << "over `other`";
  EXPECT_EQ(why, Fallback::kOverlap);
  char* cat = static_cast<char*>(a->place_shared(0, 8192, inputs, 1, &why));
  ASSERT_EQ(cat, a->base());
  EXPECT_EQ(a->live_bytes(), 3 * 4096u);
  region_.free(y, token());  // the inputs die; the concat's bytes stay in use
  region_.free(x, token());
  EXPECT_EQ(a->place(4096, 64, &why), nullptr);
  EXPECT_EQ(why, Fallback::kOverlap);
  region_.free(cat, token());
  EXPECT_EQ(a->live_bytes(), 4096u);
  EXPECT_NE(a->place(0, 8192, &why), nullptr) << "free again";
  region_.free(a->base(), token());
  region_.free(other, token());
  EXPECT_EQ(a->live_blocks(), 0u);
}

TEST_F(ArenaTest, GuardFullFallsBack) {
  Arena* a = create(1 << 20);
  ASSERT_NE(a, nullptr);
  Fallback why;
  for (uint64_t i = 0; i < 64; ++i) ASSERT_NE(a->place(i * 64, 64, &why), nullptr);
  EXPECT_EQ(a->place(64 * 64, 64, &why), nullptr);
  EXPECT_EQ(why, Fallback::kGuardFull);
}

TEST_F(ArenaTest, RemoteFreesAreDrainedByTheOwner) {
  Arena* a = create(1 << 20);
  ASSERT_NE(a, nullptr);
  Fallback why;
  void* p = a->place(0, 4096, &why);
  std::thread([&] { region_.free(p, token()); }).join();
  EXPECT_EQ(counters_.remote_frees.load(), 1u);
  EXPECT_EQ(a->live_blocks(), 1u) << "not drained yet";
  EXPECT_EQ(a->place(0, 4096, &why), p) << "the next placement drains it";
}

TEST_F(ArenaTest, ReleaseIfEmptyGivesTheArenaBackOnlyWhenEmpty) {
  Arena* a = create(1 << 20);
  ASSERT_NE(a, nullptr);
  Fallback why;
  void* p = a->place(0, 64, &why);
  EXPECT_FALSE(a->release_if_empty());
  region_.free(p, token());
  const uint32_t in_use = region_.arenas_in_use();
  EXPECT_TRUE(a->release_if_empty());
  EXPECT_EQ(region_.arenas_in_use(), in_use - 1);
}

TEST_F(ArenaTest, RetiredArenaGoesBackWithItsLastBlockFreedElsewhere) {
  void* blocks[3];
  const uint32_t before = region_.arenas_in_use();
  std::thread([&] {  // the owner: places three blocks and exits
    Arena* a = create(1 << 20);
    ASSERT_NE(a, nullptr);
    Fallback why;
    for (int i = 0; i < 3; ++i) blocks[i] = a->place(static_cast<uint64_t>(i) * 4096, 4096, &why);
    a->retire();
  })
      .join();
  EXPECT_EQ(region_.arenas_in_use(), before + 1) << "blocks alive: kept";
  region_.free(blocks[0], token());
  region_.free(blocks[1], token());
  EXPECT_EQ(region_.arenas_in_use(), before + 1);
  region_.free(blocks[2], token());
  EXPECT_EQ(region_.arenas_in_use(), before) << "the last free gave it back";
  EXPECT_EQ(counters_.late_slab_releases.load(), 1u);
}

TEST_F(ArenaTest, RetiredArenaGoesBackAtOnceWhenEmpty) {
  const uint32_t before = region_.arenas_in_use();
  Arena* a = create(1 << 20);
  ASSERT_NE(a, nullptr);
  a->retire();
  EXPECT_EQ(region_.arenas_in_use(), before);
}

// Config::parked: an arena given back stays mapped, with its pages, for the next arena of its size
// (a thread per request finds its slab's pages there); another size maps afresh; discard_idle
// releases parked arenas idle that long, release_parked all of them; a full region takes them.
class ParkedArenaTest : public ArenaTest {
 protected:
  void SetUp() override {
    ArenaRegion::Config config;
    config.largest_shift = config.smallest_shift = 22;  // 4 MiB arenas
    config.arenas = 4;
    config.guard_capacity = 64;
    config.parked = 2;
    ASSERT_TRUE(region_.reserve(config));
    region_.set_counters(&counters_);
  }
};

TEST_F(ParkedArenaTest, AGivenBackArenaIsReusedWithItsPagesByTheNextOfItsSize) {
  Arena* a = create(1 << 20);
  ASSERT_NE(a, nullptr);
  Fallback why;
  char* p = static_cast<char*>(a->place(0, 1 << 20, &why));
  ASSERT_NE(p, nullptr);
  memset(p, 0x5a, 1 << 20);
  region_.free(p, token());
  a->retire();
  EXPECT_EQ(region_.arenas_in_use(), 0u);
  EXPECT_EQ(region_.arenas_parked(), 1u);
  Arena* b = create(1 << 20);
  ASSERT_EQ(b, a) << "the parked arena";
  EXPECT_EQ(counters_.parked_slab_reuses.load(), 1u);
  EXPECT_EQ(region_.arenas_parked(), 0u);
  unsigned char resident = 0;
  ASSERT_EQ(mincore(b->base(), 4096, &resident), 0);
  EXPECT_TRUE(resident & 1) << "its pages stayed mapped";
  EXPECT_EQ(static_cast<unsigned char>(b->base()[0]), 0x5a);
  char* q = static_cast<char*>(b->place(4096, 4096, &why));
  EXPECT_EQ(q, b->base() + 4096) << "a fresh live set";
  region_.free(q, token());
  b->retire();
  Arena* c = create(2 << 20);  // another size: a new arena, the parked one stays
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c, a);
  EXPECT_EQ(region_.arenas_parked(), 1u);
  c->retire();
  EXPECT_EQ(region_.arenas_parked(), 2u);
  EXPECT_EQ(region_.release_parked(), uint64_t{3} << 20);
  EXPECT_EQ(region_.arenas_parked(), 0u);
  EXPECT_EQ(region_.arenas_in_use(), 0u);
}

TEST_F(ParkedArenaTest, IdleParkedArenasGoAndAFullRegionTakesParkedOnes) {
  Arena* arenas[4];
  for (Arena*& a : arenas) {
    a = create(1 << 20);
    ASSERT_NE(a, nullptr);
  }
  for (Arena* a : arenas) a->retire();  // two parked (the limit), two released
  EXPECT_EQ(region_.arenas_parked(), 2u);
  EXPECT_EQ(region_.arenas_in_use(), 0u);
  // Four of another size: the two free slots, then the parked ones are released for the rest.
  for (Arena*& a : arenas) {
    a = create(2 << 20);
    ASSERT_NE(a, nullptr);
  }
  EXPECT_EQ(region_.arenas_parked(), 0u);
  for (Arena* a : arenas) a->retire();
  EXPECT_EQ(region_.arenas_parked(), 2u);
  const uint64_t now_ns = vm::monotonic_ns();
  region_.discard_idle(now_ns, uint64_t{60} * 1000000000ull);
  EXPECT_EQ(region_.arenas_parked(), 2u) << "not idle for a minute";
  region_.discard_idle(now_ns + uint64_t{61} * 1000000000ull, uint64_t{60} * 1000000000ull);
  EXPECT_EQ(region_.arenas_parked(), 0u);
  EXPECT_EQ(region_.arenas_in_use(), 0u);
}

// Many threads free an owner's blocks while it exits: exactly one release, every block once.
TEST_F(ArenaTest, ConcurrentFreesOfAnExitingOwnersBlocks) {
  for (int round = 0; round < 50; ++round) {
    std::vector<void*> blocks;
    std::atomic<bool> placed{false}, go{false};
    const uint32_t before = region_.arenas_in_use();
    std::thread owner([&] {
      Arena* a = create(1 << 20);
      ASSERT_NE(a, nullptr);
      Fallback why;
      for (uint64_t i = 0; i < 32; ++i) blocks.push_back(a->place(i * 256, 256, &why));
      placed = true;
      while (!go.load()) {
      }
      a->retire();  // the owner exits, racing the frees
    });
    while (!placed.load()) {
    }
    std::vector<std::thread> freers;
    for (int f = 0; f < 4; ++f) {
      freers.emplace_back([&, f] {
        while (!go.load()) {
        }
        for (size_t i = static_cast<size_t>(f); i < blocks.size(); i += 4) {
          region_.free(blocks[i], token());
        }
      });
    }
    go = true;
    for (std::thread& t : freers) t.join();
    owner.join();
    EXPECT_EQ(region_.arenas_in_use(), before) << "round " << round;
  }
}

TEST_F(ArenaTest, RunsOutOfArenasAndSaysSo) {
  std::vector<Arena*> arenas;
  ArenaRegion::Failure why = ArenaRegion::Failure::kNone;
  while (Arena* a = region_.create(4096, token(), &why)) arenas.push_back(a);
  EXPECT_EQ(why, ArenaRegion::Failure::kNoArena);
  EXPECT_EQ(arenas.size(), region_.arena_count());
  EXPECT_EQ(region_.create(uint64_t{1} << 40, token(), &why), nullptr);
  EXPECT_EQ(why, ArenaRegion::Failure::kTooLarge);
  for (Arena* a : arenas) EXPECT_TRUE(a->release_if_empty());
  EXPECT_EQ(region_.arenas_in_use(), 0u);
}

// A fork child: only `survivor` came along. The others' arenas are retired going by the table
// alone; an arena a thread had already given back (but not yet forgotten in its own state when
// the fork came) is not given back a second time.
TEST_F(ArenaTest, AfterForkRetiresTheArenasOthersStillOwnGoingByTheTable) {
  static const char survivor = 0, busy = 0, gone = 0, idle = 0;
  ArenaRegion::Failure why;
  Arena* mine = region_.create(1 << 20, &survivor, &why);
  Arena* with_block = region_.create(1 << 20, &busy, &why);
  Arena* given_back = region_.create(1 << 20, &gone, &why);
  ASSERT_NE(region_.create(1 << 20, &idle, &why), nullptr);
  ASSERT_TRUE(mine && with_block && given_back);
  Fallback f;
  void* p = with_block->place(0, 4096, &f);
  void* q = mine->place(0, 4096, &f);
  ASSERT_TRUE(p && q);
  ASSERT_TRUE(given_back->release_if_empty());
  EXPECT_EQ(region_.arenas_in_use(), 3u);
  region_.after_fork_in_child(&survivor);
  EXPECT_EQ(region_.arenas_in_use(), 2u) << "the idle arena goes at once, nothing twice";
  region_.free(p, &survivor);  // the dead thread's last block: its arena goes with it
  EXPECT_EQ(region_.arenas_in_use(), 1u);
  EXPECT_NE(mine->place(8192, 4096, &f), nullptr) << "the survivor's arena is its own still";
  region_.free(q, &survivor);
  region_.free(static_cast<char*>(mine->base()) + 8192, &survivor);
  EXPECT_TRUE(mine->release_if_empty());
  EXPECT_EQ(region_.arenas_in_use(), 0u);
}

using memoplan::test_support::resident_pages;

// discard_when_freed: a freed block at `from` or above, of `min_bytes` or more, gives back the
// pages wholly inside it; smaller blocks, blocks below and a live neighbour on a shared page keep
// theirs, and the place reads as zeros when placed again.
TEST_F(ArenaTest, LargeBlocksAboveTheMarkGiveTheirPagesBackWhenFreed) {
  constexpr uint64_t kPage = 4096, kFrom = 16 * kPage;
  Arena* a = create(64 * kPage);
  ASSERT_NE(a, nullptr);
  a->discard_when_freed(kFrom, 8 * kPage);
  Fallback f;
  char* below = static_cast<char*>(a->place(0, 8 * kPage, &f));
  char* large = static_cast<char*>(a->place(kFrom + 64, 12 * kPage, &f));  // pages 16-28
  char* small = static_cast<char*>(a->place(kFrom + 32 * kPage, 4 * kPage, &f));
  char* neighbour = static_cast<char*>(a->place(kFrom + 12 * kPage + 64, 64, &f));  // page 28
  ASSERT_TRUE(below && large && small && neighbour);
  memset(below, 1, 8 * kPage);
  memset(large, 2, 12 * kPage);
  memset(small, 3, 4 * kPage);
  memset(neighbour, 4, 64);
  const uint64_t released = counters_.released_bytes.load();
  region_.free(large, token());
  EXPECT_EQ(counters_.released_bytes.load() - released, 11 * kPage) << "pages 17-27";
  EXPECT_EQ(resident_pages(a->base() + kFrom + kPage, 11 * kPage), 0u);
  EXPECT_EQ(resident_pages(a->base() + kFrom, kPage), 1u) << "its first page, shared";
  for (int i = 0; i < 64; ++i) ASSERT_EQ(neighbour[i], 4) << i;
  region_.free(small, token());
  region_.free(below, token());
  EXPECT_EQ(resident_pages(small, 4 * kPage), 4u) << "below min_bytes";
  EXPECT_EQ(resident_pages(below, 8 * kPage), 8u) << "below `from`";
  EXPECT_EQ(counters_.released_bytes.load() - released, 11 * kPage);
  large = static_cast<char*>(a->place(kFrom + 64, 12 * kPage, &f));
  ASSERT_NE(large, nullptr);
  for (uint64_t i = kPage; i < 11 * kPage; i += kPage) EXPECT_EQ(large[i], 0) << i;
  region_.free(large, token());
  region_.free(neighbour, token());
  EXPECT_TRUE(a->release_if_empty());
}

// An idle arena (no block alive, no placement between two looks `idle` apart) gives its pages
// back; its owner places again and finds zeros. Busy arenas and arenas with a live block keep
// theirs.
TEST_F(ArenaTest, IdleArenaGivesItsPagesBackAndPlacesAgain) {
  if (!ArenaRegion::idle_discard_supported()) GTEST_SKIP() << "no membarrier in this kernel";
  Arena* idle = create(1 << 20);
  Arena* holding = create(1 << 20);
  Fallback f;
  char* p = static_cast<char*>(idle->place(0, 65536, &f));
  memset(p, 0x5a, 65536);
  region_.free(p, token());
  char* kept = static_cast<char*>(holding->place(0, 65536, &f));
  memset(kept, 0x6b, 65536);
  ASSERT_GT(resident_pages(idle->base(), 65536), 0u);
  EXPECT_EQ(region_.discard_idle(1000, 500), 0u) << "the first look only samples";
  EXPECT_EQ(region_.discard_idle(1200, 500), 0u) << "not idle long enough yet";
  EXPECT_EQ(region_.discard_idle(1600, 500), idle->bytes());
  EXPECT_EQ(resident_pages(idle->base(), 65536), 0u);
  EXPECT_GT(resident_pages(holding->base(), 65536), 0u) << "a live block keeps its arena";
  EXPECT_EQ(counters_.idle_discards.load(), 1u);
  EXPECT_EQ(region_.discard_idle(5000, 500), 0u) << "discarded once, not again";
  p = static_cast<char*>(idle->place(0, 65536, &f));
  ASSERT_NE(p, nullptr);
  for (int i = 0; i < 65536; i += 4096) EXPECT_EQ(p[i], 0) << i;
  memset(p, 0x7c, 65536);
  EXPECT_EQ(region_.discard_idle(6000, 500), 0u) << "placed since: busy again";
  region_.free(p, token());
  region_.free(kept, token());
  EXPECT_TRUE(idle->release_if_empty());
  EXPECT_TRUE(holding->release_if_empty());
}

// The reaper runs flat out (idle period 0) while the owner places, fills, checks and frees
// blocks, pausing now and then: a discard must never hit a block that is alive.
TEST_F(ArenaTest, ReaperNeverDiscardsUnderALiveBlock) {
  if (!ArenaRegion::idle_discard_supported()) GTEST_SKIP() << "no membarrier in this kernel";
  std::atomic<bool> done{false};
  std::atomic<uint64_t> corrupted{0};
  std::thread owner([&] {
    Arena* a = create(1 << 20);
    ASSERT_NE(a, nullptr);
    Fallback f;
    for (int round = 0; round < 4000; ++round) {
      char* blocks[4];
      for (int b = 0; b < 4; ++b) {
        blocks[b] = static_cast<char*>(a->place(static_cast<uint64_t>(b) * 16384, 16384, &f));
        ASSERT_NE(blocks[b], nullptr);
        memset(blocks[b], round + b + 1, 16384);
      }
      if (round % 16 == 0) std::this_thread::yield();  // an idle moment for the reaper
      for (int b = 0; b < 4; ++b) {
        for (int i = 0; i < 16384; i += 512) {
          if (blocks[b][i] != static_cast<char>(round + b + 1)) corrupted.fetch_add(1);
        }
        region_.free(blocks[b], token());
      }
      if (round % 8 == 0) std::this_thread::yield();
    }
    EXPECT_TRUE(a->release_if_empty());
    done.store(true);
  });
  uint64_t now = 0, discarded = 0;
  while (!done.load()) discarded += region_.discard_idle(++now, 0) != 0;
  owner.join();
  EXPECT_EQ(corrupted.load(), 0u);
  std::printf("idle discards while the owner ran: %llu\n",
              static_cast<unsigned long long>(discarded));
}

bool fail_always() { return true; }

TEST_F(ArenaTest, MapFailureIsCountedAndTheArenaSlotGoesBack) {
  region_.set_map_fault(&fail_always);
  ArenaRegion::Failure why;
  EXPECT_EQ(region_.create(4096, token(), &why), nullptr);
  EXPECT_EQ(why, ArenaRegion::Failure::kMapFailed);
  EXPECT_EQ(counters_.slab_map_failures.load(), 1u);
  EXPECT_EQ(region_.arenas_in_use(), 0u);
  region_.set_map_fault(nullptr);
  EXPECT_NE(create(4096), nullptr);
}

// The VmFlags of the mapping holding p ("hg": MADV_HUGEPAGE was asked for), from /proc/self/smaps.
std::string vm_flags_of(const void* p) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (!f) return "?";
  char line[512];
  bool inside = false;
  std::string flags = "?";
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      flags = line + 8;
      break;
    }
  }
  fclose(f);
  return flags;
}

// huge_pages: arenas of 2 MiB or more are advised MADV_HUGEPAGE (smaller ones, and every arena of
// a region without the option, are not); a kernel without transparent huge pages skips the test.
TEST(ArenaHugePages, LargeArenasAreAdvisedHugePages) {
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0) {
    GTEST_SKIP() << "no transparent huge pages in this kernel";
  }
  for (bool huge : {true, false}) {
    ArenaRegion region;
    ArenaRegion::Config config;
    config.largest_shift = config.smallest_shift = 24;
    config.arenas = 2;
    config.huge_pages = huge;
    ASSERT_TRUE(region.reserve(config));
    ArenaRegion::Failure why;
    Arena* large = region.create(6 << 20, token(), &why);
    Arena* small = region.create(1 << 20, token(), &why);
    ASSERT_NE(large, nullptr);
    ASSERT_NE(small, nullptr);
    const std::string large_flags = vm_flags_of(large->base());
    EXPECT_EQ(large_flags.find(" hg") != std::string::npos, huge) << large_flags;
    EXPECT_EQ(vm_flags_of(small->base()).find(" hg"), std::string::npos);
    Fallback reason;
    void* block = large->place(4 << 20, 4096, &reason);  // the arena works as before
    ASSERT_NE(block, nullptr);
    memset(block, 1, 4096);
    region.free(block, token());
    region.release_all();
  }
}

}  // namespace
}  // namespace memoplan::replay
