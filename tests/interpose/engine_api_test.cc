// The engine at the edges of the malloc API: a double free of a slab block, realloc while the
// engine initializes, malloc_trim, what profiling leaves behind once the plan runs, and aligned
// requests the fallback serves.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "bootstrap.h"
#include "engine.h"
#include "engine_harness.h"
#include "fallback.h"
#include "huge_blocks.h"
#include "resident_pages.h"
#include "state.h"
#include "stats.h"
#include "unplanned.h"

namespace memoplan::shim::testing {
namespace {

using memoplan::test_support::resident_pages;

// Requests below min_size go to the fallback as they are. Debian 12's mimalloc 2.0.9 took a
// power-of-two size as aligned to itself in mi_malloc_aligned and answered 512 bytes at 256 with
// ...180 beside blocks of its bin; every answer here must honour its alignment, whatever the
// fallback.
TEST(EngineApi, AlignedRequestsTheFallbackServesAreAligned) {
  engine_options();
  for (int round = 0; round < 200; ++round) {
    void* blocks[64];
    for (int i = 0; i < 64; ++i) {
      const size_t alignment = i % 2 ? 16 : size_t(64) << (i / 2 % 5);  // 64 .. 1024
      blocks[i] = engine_alloc(i % 2 ? 448 : 512, alignment, false);
      ASSERT_NE(blocks[i], nullptr);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(blocks[i]) % alignment, 0u)
          << "512 bytes at " << alignment << " from " << fallback::name();
    }
    for (void* p : blocks) engine_free(p);
  }
}

TEST(EngineApi, DoubleFreeOfASlabBlockAbortsSayingSo) {
  SKIP_UNLESS_ENGINE_PLANS();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        on_fresh_thread([] {
          Heap heap;
          const Script script = network_pass();
          for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(script);
          heap.begin_pass();
          heap.run({script[0]});  // the plan's first block, from the slab
          void* p = heap.pointer(script[0].id);
          if (origin_of(p) != Origin::kSlab) _exit(3);  // not the case under test
          engine_free(p);
          engine_free(p);  // the guard would forget whichever block lives there next
        });
      },
      "double free");
}

TEST(EngineApi, ReallocWhileTheEngineInitializesStaysInTheBootstrapPool) {
  // What dlsym does when it reallocates its own buffers during initialization: there is no
  // fallback yet (before the fix: a call through a null function pointer). By then the pool is
  // placed (in the span, bootstrap.h): initialized first, then "under way" again.
  engine_options();
  Global& g = global();
  const int state = g.init_state.exchange(1);  // "initialization under way"
  char* p = static_cast<char*>(bootstrap::allocate(100, 16));
  ASSERT_NE(p, nullptr);
  memset(p, 0x5a, 100);
  char* q = static_cast<char*>(engine_realloc(p, 300));
  g.init_state.store(state);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(bootstrap::owns(q));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(q[i], 0x5a) << i;
  engine_free(q);  // a bootstrap block: nothing to do, no crash
}

// free's direct path asks one range whether the shim handed a block out (unplanned.h): every kind
// of the shim's blocks lies in it, the fallback's do not.
TEST(EngineApi, TheShimsBlocksLieInTheOneRangeFreeChecks) {
  SKIP_UNLESS_ENGINE_PLANS();
  ASSERT_NE(unplanned.free, nullptr) << "the direct path is published";
  ASSERT_EQ(unplanned.own_base, global().span_base);
  ASSERT_EQ(unplanned.own_size.load(), global().span_size);
  void* boot = bootstrap::allocate(64, 16);
  ASSERT_NE(boot, nullptr);
  EXPECT_TRUE(unplanned.may_own(boot)) << "a bootstrap block";
  EXPECT_FALSE(bootstrap::static_pool_used());
  void* fallback_block = engine_alloc(64, 16, false);
  EXPECT_FALSE(unplanned.may_own(fallback_block)) << "the fallback's block";
  engine_free(fallback_block);
  const Script script = network_pass();
  on_fresh_thread([&] {
    Heap heap;
    size_t tag_blocks = 0, slab_blocks = 0;  // their addresses, checked after their frees
    for (uint64_t pass = 0; pass <= first_steady_pass(); ++pass) {
      heap.pass(script);
      for (const Allocated& a : heap.last_pass()) {
        if (a.origin == Origin::kFallback) continue;
        (a.origin == Origin::kTag ? tag_blocks : slab_blocks) += 1;
        EXPECT_TRUE(unplanned.may_own(a.p)) << "pass " << pass << ": " << heap.last_pass_origins();
      }
    }
    EXPECT_GT(tag_blocks, 0u) << "profiled blocks";
    EXPECT_GT(slab_blocks, 0u) << "planned blocks";
  });
  EXPECT_FALSE(unplanned.may_own(reinterpret_cast<void*>(unplanned.own_base - 1)));
  EXPECT_FALSE(
      unplanned.may_own(reinterpret_cast<void*>(unplanned.own_base + unplanned.own_size.load())));
}

TEST(EngineApi, TrimGivesTheIdleSlabAndTheProfileBack) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  const Counters before = counters();
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < first_steady_pass() + 1; ++pass) heap.pass(script);
    ThreadState* t = tls_state;
    ASSERT_NE(t, nullptr);
    ASSERT_NE(t->replay.arena, nullptr);
    EXPECT_EQ(t->profiling.profile->log.count(), 0u) << "records released once the plan runs";
    char* base = t->replay.arena->base();
    const uint64_t bytes = t->replay.arena->bytes();
    ASSERT_GT(resident_pages(base, bytes), 0u);
    EXPECT_EQ(engine_trim(0), 1);
    EXPECT_EQ(resident_pages(base, bytes), 0u) << "the idle slab went back to the OS";
    heap.pass(script);  // still planned after the trim
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
  EXPECT_GT((counters() - before).released_bytes, 0u);
}

// profile_keep (options.h): while a thread profiles, the pages its freed blocks keep for the next
// ones stay within profile_keep bytes; once the plan runs they are all given back. The default
// keeps some (profiled passes need no fresh pages); the keep0.* run (profile_keep:0) keeps none.
TEST(EngineApi, FreedProfiledBlocksKeepAtMostProfileKeep) {
  SKIP_UNLESS_ENGINE_PLANS();
  on_fresh_thread([] {
    Global& g = global();
    g.tags.trim();
    const Script script = network_pass();
    Heap heap;
    uint64_t kept = 0;
    for (uint64_t pass = 0; pass + 1 < first_steady_pass(); ++pass) {
      heap.begin_pass();
      heap.run(script);  // its 40000-byte block (a tag slot of its own) freed last
      ASSERT_NE(tls_state, nullptr);
      if (tls_state->phase == Phase::kProfiling) {  // before the pass end plans it
        kept = std::max(kept, g.tags.retained_bytes());
        EXPECT_LE(g.tags.retained_bytes(), g.options.profile_keep) << "pass " << pass;
      }
      heap.end_pass();
    }
    if (g.options.profile_keep == 0) {
      EXPECT_EQ(kept, 0u);
    } else {
      EXPECT_GT(kept, 0u) << "freed profiled blocks kept no pages";
    }
    for (uint64_t pass = 0; pass < 2; ++pass) heap.pass(script);
    EXPECT_EQ(tls_state->phase, Phase::kReplaying);
    EXPECT_EQ(g.tags.retained_bytes(), 0u) << "the kept pages went back when the plan ran";
  });
}

// A block profiled before the plan and freed under it (a pass's output the program holds into the
// next pass, as a Python loop holds `out`) gives its pages back: no profiled block of this thread
// comes to reuse them. They stayed kept beside the slab for good: gpt_decoder's 25.7 MiB output,
// 24 MiB of steady RSS over mimalloc alone (issue 53).
TEST(EngineApi, AProfiledBlockFreedUnderThePlanKeepsNoPages) {
  SKIP_UNLESS_ENGINE_PLANS();
  on_fresh_thread([] {
    Global& g = global();
    g.tags.trim();
    Script script = network_pass();
    ASSERT_EQ(script.back().kind, Op::kFree);
    script.pop_back();  // block 0 (40,000 bytes: a tag slot of its own) outlives its pass
    Heap heap;
    bool held_profiled = false, checked = false;
    for (uint64_t pass = 0; pass < first_steady_pass() + 2; ++pass) {
      heap.begin_pass();
      heap.run(script);
      ASSERT_NE(tls_state, nullptr);
      const bool replaying = tls_state->phase == Phase::kReplaying;
      heap.release_held();  // the previous pass's block 0, once this pass has made its own
      if (replaying && held_profiled) {
        EXPECT_EQ(g.tags.retained_bytes(), 0u) << "a profiled block freed under the plan kept its "
                                                  "pages";
        checked = true;
      }
      held_profiled = tls_state->phase == Phase::kProfiling;
      heap.hold(0);
      heap.end_pass();
    }
    heap.release_held();
    EXPECT_TRUE(checked) << "no profiled block was freed under the plan";
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
}

// `out = model(x)`: the old output is freed once the new one is made, so a pass's output has
// two places (escaping.h). A large one gives its pages back when freed, as a general allocator's
// segment or mmap would: otherwise both places stay resident, and threads that each hold one
// output hold a second one's pages too. The live output keeps its bytes, and the next pass places
// its own in the pages given back.
TEST(EngineApi, AFreedHugeOutputGivesItsPagesBack) {
  SKIP_UNLESS_ENGINE_PLANS();
  static constexpr size_t kOutput = kHugeRequest;
  if (global().tags.slot_bytes() < kOutput) {  // profiling could not record it: no plan place
    GTEST_SKIP() << "tag slots of " << global().tags.slot_bytes()
                 << " bytes (a small address space)";
  }
  on_fresh_thread([] {
    Script script = network_pass();
    ASSERT_EQ(script.back().kind, Op::kFree);
    script.pop_back();  // block 0 outlives its pass
    script.front().size = kOutput;
    Heap heap;
    char* previous = nullptr;
    int checked = 0;
    for (uint64_t pass = 0; pass < first_steady_pass() + 3; ++pass) {
      heap.begin_pass();
      heap.run(script);
      char* output = heap.pointer(0);
      const bool both_in_slab =
          previous && global().slabs.contains(output) && global().slabs.contains(previous);
      if (both_in_slab) {
        EXPECT_EQ(resident_pages(previous, kOutput), kOutput / 4096) << "the previous output";
      }
      const uint64_t released = stats().released_bytes.load();
      heap.release_held();  // the previous output, now that this pass made its own
      if (both_in_slab) {
        EXPECT_NE(output, previous) << "two places";
        EXPECT_LE(resident_pages(previous, kOutput), 2u) << "the freed output kept its pages";
        EXPECT_GE(stats().released_bytes.load() - released, kOutput - 4096);
        EXPECT_EQ(resident_pages(output, kOutput), kOutput / 4096) << "the live output";
        ++checked;
      }
      heap.check_all();  // the live output holds what was written
      heap.hold(0);
      heap.end_pass();
      EXPECT_TRUE(pass < first_steady_pass() || heap.last_pass_all(Origin::kSlab))
          << heap.last_pass_origins();
      previous = output;
    }
    heap.release_held();
    EXPECT_GE(checked, 2) << "no pass placed its output in the slab";
  });
}

// Huge requests the fallback would serve (huge_blocks.h; here the shim's own, under the reentry
// guard, as any request outside a planned pass): tag slots, whose freed pages are kept while the
// kept bytes stay within max(profile_keep, the live huge bytes), and which malloc_trim gives back.
TEST(EngineApi, HugeBlocksKeepTheirPagesUpToTheLiveHugeBytes) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!fallback::maps_each_large_block()) GTEST_SKIP() << "the fallback keeps its large blocks";
  constexpr size_t kMiB = size_t{1} << 20;
  // Below profile_keep (32 MiB): the last one freed is kept too.
  static constexpr size_t kBlock = 24 * kMiB, kGrown = 36 * kMiB;
  if (global().tags.slot_bytes() < 64 * kMiB) {
    GTEST_SKIP() << "tag slots of " << global().tags.slot_bytes()
                 << " bytes (a small address space)";
  }
  on_fresh_thread([] {
    Global& g = global();
    const uint64_t huge_before = stats().huge_blocks.load();
    g.tags.trim();
    g.tags.set_kept_expiry(kKeptLargeBytes, 0);  // kept until trimmed (the next test: expiry)
    std::vector<void*> blocks;
    {
      ReentryGuard guard;
      for (int i = 0; i < 5; ++i) blocks.push_back(engine_alloc(kBlock, 16, false));
      void* zeroed = engine_alloc(kBlock, 16, true);  // calloc: the fallback's fresh pages
      EXPECT_FALSE(g.tags.contains(zeroed));
      engine_free(zeroed);
    }
    EXPECT_EQ(stats().huge_blocks.load() - huge_before, 5u);
    uint64_t live = 5 * kBlock;
    for (void* p : blocks) {
      ASSERT_TRUE(g.tags.contains(p));
      memset(p, 1, kBlock);
      EXPECT_EQ(engine_usable_size(p), kBlock);
    }
    void* grown = engine_realloc(blocks[0], kGrown);
    EXPECT_EQ(grown, blocks[0]) << "grown in place within its slot";
    live += kGrown - kBlock;
    for (void* p : blocks) {
      engine_free(p);
      live -= p == grown ? kGrown : kBlock;
      const uint64_t allowed = std::max<uint64_t>(g.options.profile_keep, live);
      EXPECT_LE(g.tags.retained_bytes(), allowed) << "live huge bytes " << live;
    }
    EXPECT_GT(g.tags.retained_bytes(), 0u);
    EXPECT_EQ(engine_trim(0), 1);
    EXPECT_EQ(g.tags.retained_bytes(), 0u) << "malloc_trim gave the kept pages back";
    g.tags.set_kept_expiry(kKeptLargeBytes, kKeptLargeNs);
  });
}

// A freed huge block's kept pages go within a few reaper rounds (kKeptLargeNs, engine.h), with
// nothing else asked of the shim: a pass's output kept between passes held its pages beside what
// other threads faulted in (gpt_decoder, two inference threads).
TEST(EngineApi, KeptLargeBlocksGiveTheirPagesBackAfterAWhile) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!fallback::maps_each_large_block()) GTEST_SKIP() << "the fallback keeps its large blocks";
  static constexpr size_t kBlock = size_t{24} << 20;
  if (global().tags.slot_bytes() < 2 * kBlock) {
    GTEST_SKIP() << "tag slots of " << global().tags.slot_bytes() << " bytes";
  }
  on_fresh_thread([] {
    Global& g = global();
    g.tags.trim();
    void* block = nullptr;
    {
      ReentryGuard guard;
      block = engine_alloc(kBlock, 16, false);
    }
    ASSERT_TRUE(g.tags.contains(block));
    memset(block, 1, kBlock);
    const uint64_t released = stats().released_bytes.load();
    engine_free(block);
    // Kept (below profile_keep), then expired by the reaper the free started (which counts the
    // bytes after it has unmapped them).
    int waited_ms = 0;
    while (stats().released_bytes.load() - released < kBlock && waited_ms < 5000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      waited_ms += 5;
    }
    EXPECT_EQ(g.tags.retained_bytes(), 0u) << "still kept after 5 s";
    EXPECT_GE(stats().released_bytes.load() - released, kBlock);
  });
}

// Blocks made while the thread profiled that stay alive for the whole run (a model's weights, made
// during the profiled pass) must not keep the profile's records: they go once the plan runs, and
// the late free of such a block (here on another thread) closes nothing.
TEST(EngineApi, RecordsGoOnceThePlanRunsEvenWhileProfiledBlocksLive) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  Script keeps_one = script;  // block 1 is never freed in the profiled pass
  for (size_t i = 0; i < keeps_one.size(); ++i) {
    if (keeps_one[i].kind == Op::kFree && keeps_one[i].id == 1) {
      keeps_one.erase(keeps_one.begin() + static_cast<ptrdiff_t>(i));
      break;
    }
  }
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < engine_options().passes; ++pass) heap.pass(script);
    heap.pass(keeps_one);  // the profiled pass
    ASSERT_EQ(origin_of(heap.pointer(1)), Origin::kTag);
    heap.hold(1);
    // Block 1 escaped the profiled pass: it gets an escaping block's two places after the slab.
    const auto planned = [&heap] {
      size_t slab = 0;
      for (const Allocated& a : heap.last_pass()) slab += a.origin == Origin::kSlab;
      return slab;
    };
    for (int pass = 0; pass < 3; ++pass) heap.pass(script);
    EXPECT_EQ(planned(), allocations_in(script)) << heap.last_pass_origins();
    ThreadState* t = tls_state;
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->profiling.profile->live_blocks(), 1u);
    EXPECT_EQ(t->profiling.profile->log.count(), 0u) << "a live profiled block kept the records";
    EXPECT_EQ(t->profiling.profile->log.footprint_bytes(), 0u);
    heap.release_held(/*elsewhere=*/true);
    EXPECT_EQ(t->profiling.profile->live_blocks(), 0u);
    heap.pass(script);
    EXPECT_EQ(planned(), allocations_in(script)) << heap.last_pass_origins();
  });
}

// The records go while other threads free the profiled blocks they were handed (ThreadSanitizer
// checks that no free writes a record the recorder is giving back).
TEST(EngineApi, RecordsGoWhileOtherThreadsFreeProfiledBlocks) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  for (int round = 0; round < 8; ++round) {
    on_fresh_thread([&] {
      Heap heap;
      for (uint64_t pass = 0; pass < engine_options().passes; ++pass) heap.pass(script);
      std::vector<void*> handed;
      heap.begin_pass();  // the profiled pass makes 64 more blocks, for other threads
      heap.run(script);
      for (int i = 0; i < 64; ++i) handed.push_back(engine_alloc(8192 + 64 * i, 16, false));
      heap.end_pass();
      std::atomic<bool> go{false};
      std::vector<std::thread> freers;
      for (int k = 0; k < 2; ++k) {
        freers.emplace_back([&, k] {
          while (!go.load()) std::this_thread::yield();
          for (size_t i = k; i < handed.size(); i += 2) engine_free(handed[i]);
        });
      }
      go.store(true);
      for (int pass = 0; pass < 3; ++pass) heap.pass(script);  // the records go meanwhile
      for (std::thread& f : freers) f.join();
      EXPECT_EQ(tls_state->profiling.profile->live_blocks(), 0u);
      EXPECT_EQ(tls_state->profiling.profile->log.count(), 0u);
      EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
    });
  }
}

}  // namespace
}  // namespace memoplan::shim::testing
