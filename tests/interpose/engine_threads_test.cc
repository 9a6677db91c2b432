// The engine with many threads: exiting threads give their slab back only when nothing of theirs
// is alive, blocks cross threads while their owners keep allocating, and a server that starts a
// thread per request never runs out of slabs.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine_harness.h"
#include "learned_pass.h"
#include "state.h"

namespace memoplan::shim::testing {
namespace {

uint32_t slabs_in_use() { return global().slabs.arenas_in_use(); }

// A thread that reaches the steady state and runs `extra` more passes, then exits.
void planned_thread(const Script& script, int extra = 1) {
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < first_steady_pass() + extra; ++pass) heap.pass(script);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
}

// The statistics at exit count what running threads did since their last flush (a pass end): a
// server stopped in the middle of a pass reports that pass's hits too.
TEST(EngineStatistics, CountersOfRunningThreadsAreIncluded) {
  SKIP_UNLESS_ENGINE_PLANS();
  engine_options();
  std::mutex m;
  std::condition_variable cv;
  bool mid_pass = false, finish = false;
  std::thread worker([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(network_pass());
    heap.begin_pass();
    heap.run(network_pass());  // planned hits not flushed yet: no pass end
    std::unique_lock<std::mutex> lock(m);
    mid_pass = true;
    cv.notify_all();
    cv.wait(lock, [&] { return finish; });
    heap.end_pass();
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return mid_pass; });
  }
  const uint64_t flushed = counters().planned_hits;
  FILE* out = tmpfile();
  ASSERT_NE(out, nullptr);
  print_stats(fileno(out));
  rewind(out);
  char text[4096] = {};
  const size_t n = fread(text, 1, sizeof text - 1, out);
  fclose(out);
  {
    std::lock_guard<std::mutex> lock(m);
    finish = true;
    cv.notify_all();
  }
  worker.join();
  ASSERT_GT(n, 0u);
  ASSERT_NE(strstr(text, "planned hits "), nullptr) << text;
  const uint64_t printed = strtoull(strstr(text, "planned hits ") + 13, nullptr, 10);
  EXPECT_EQ(printed, flushed + allocations_in(network_pass())) << text;
}

// A thread per request (learned_pass.h): threads that each run one pass and exit never plan on
// their own; once three have offered the same pass it is planned process-wide, and threads that
// start it afterwards, several at once, serve it from slabs of their own from its first request.
// Their slabs stay parked for the next threads (the fault and TSan builds run this too).
TEST(EngineLearnedPass, ThreadsThatRunOnePassEachReplayAPassLearnedFromEarlierOnes) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  if (!engine_options().detect) {  // unmarked threads are left alone: they teach nothing
    for (uint32_t i = 0; i < 2 * kThreadsThatAgree; ++i) {
      on_fresh_thread([&] {
        Heap heap;
        heap.pass(script, /*marks=*/false);
        EXPECT_TRUE(heap.last_pass_all(Origin::kFallback)) << heap.last_pass_origins();
      });
    }
    EXPECT_EQ(stats().learned_passes.load(), 0u);
    return;
  }
  for (uint32_t i = 0; i < kThreadsThatAgree; ++i) {
    EXPECT_EQ(stats().learned_passes.load(), 0u);
    on_fresh_thread([&] {
      Heap heap;
      heap.pass(script, /*marks=*/false);
      EXPECT_TRUE(heap.last_pass_all(Origin::kTag)) << heap.last_pass_origins();
    });
  }
  EXPECT_EQ(stats().learned_passes.load(), 1u);
  const Counters before = counters();
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&] {
        Heap heap;
        heap.pass(script, /*marks=*/false);
        EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
      });
    }
    for (std::thread& t : threads) t.join();
  }
  EXPECT_EQ(stats().learned_pass_threads.load(), 12u);
  const Counters d = counters() - before;
  EXPECT_EQ(d.steady_hits, 12 * allocations_in(script));
  EXPECT_GE(d.parked_slab_reuses, 8u) << "rounds after the first take the parked slabs";
  EXPECT_EQ(slabs_in_use(), 0u);
}

// Runs `script` once on a fresh thread, unmarked; true when every allocation came from `origin`.
bool one_pass_thread(const Script& script, Origin origin) {
  bool all = false;
  on_fresh_thread([&] {
    Heap heap;
    heap.pass(script, /*marks=*/false);
    all = heap.last_pass_all(origin);
  });
  return all;
}

// network_pass() with one request's size changed: its key is one the pass learned from
// network_pass() does not know (as when an interpreter, once warm, reaches a request by another
// call path).
Script with_changed_request(size_t index, size_t by = 32) {
  Script s = network_pass();
  size_t allocs = 0;
  for (Op& op : s) {
    if (op.kind == Op::kAlloc && allocs++ == index) op.size += by;
  }
  return s;
}

// Threads that start on the learned pass and each miss the same request of it, three in a row:
// the pass is taken out, the threads after them profile and offer theirs, and the pass learned
// again serves every request.
TEST(EngineLearnedPass, APassThatThreadsKeepMissingARequestOfIsLearnedAgain) {
  SKIP_UNLESS_ENGINE_PLANS();
  const bool detect = engine_options().detect;
  for (uint32_t i = 0; i < kThreadsThatAgree; ++i) one_pass_thread(network_pass(), Origin::kTag);
  const Script changed = with_changed_request(3);
  if (!detect) {
    for (uint32_t i = 0; i < 3 * kThreadsThatAgree; ++i)
      one_pass_thread(changed, Origin::kFallback);
    EXPECT_EQ(stats().learned_passes.load(), 0u);
    return;
  }
  ASSERT_EQ(stats().learned_passes.load(), 1u);
  for (uint32_t i = 0; i < kThreadsThatAgree; ++i) {
    EXPECT_FALSE(one_pass_thread(changed, Origin::kSlab)) << "the changed request is not planned";
    EXPECT_EQ(stats().learned_pass_threads.load(), i + 1);
  }
  for (uint32_t i = 0; i < kThreadsThatAgree; ++i) {
    EXPECT_TRUE(one_pass_thread(changed, Origin::kTag)) << "learning again: profiled";
  }
  EXPECT_EQ(stats().learned_passes.load(), 2u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(one_pass_thread(changed, Origin::kSlab));
  EXPECT_EQ(slabs_in_use(), 0u);
}

// A pass learned again that agrees with nothing: after kRelearnOffers offers of passes that all
// differ, the pass taken out is used again; and never more than kMaxRelearns times.
TEST(EngineLearnedPass, APassIsLearnedAgainAtMostSoManyTimes) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!engine_options().detect) return;  // nothing is learned (the test above checks)
  for (uint32_t i = 0; i < kThreadsThatAgree; ++i) one_pass_thread(network_pass(), Origin::kTag);
  ASSERT_EQ(stats().learned_passes.load(), 1u);
  const Script missing = with_changed_request(2);
  size_t varied = 0;
  for (uint32_t relearn = 0; relearn < kMaxRelearns + 1; ++relearn) {
    for (uint32_t i = 0; i < kThreadsThatAgree; ++i) {
      EXPECT_FALSE(one_pass_thread(missing, Origin::kTag)) << "started on the learned pass";
    }
    if (relearn == kMaxRelearns) break;
    // Learning again: each thread's pass differs from every other's.
    for (uint32_t i = 0; i < kRelearnOffers; ++i) {
      EXPECT_TRUE(one_pass_thread(with_changed_request(5, 64 * ++varied), Origin::kTag));
    }
  }
  EXPECT_EQ(stats().learned_passes.load(), 1u);
  const uint64_t started = stats().learned_pass_threads.load();
  EXPECT_FALSE(one_pass_thread(missing, Origin::kTag)) << "the pass is in use";
  EXPECT_EQ(stats().learned_pass_threads.load(), started + 1);
}

// Threads whose first request is not the learned pass's do not start on it: three of them that
// agree teach a pass of their own, and both kinds of thread replay from then on.
TEST(EngineLearnedPass, ThreadsThatStartOnNoLearnedPassTeachTheirOwn) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!engine_options().detect) return;
  for (uint32_t i = 0; i < kThreadsThatAgree; ++i) one_pass_thread(network_pass(), Origin::kTag);
  const Script other = with_changed_request(0);
  for (uint32_t i = 0; i < kThreadsThatAgree; ++i)
    EXPECT_TRUE(one_pass_thread(other, Origin::kTag));
  EXPECT_EQ(stats().learned_passes.load(), 2u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(one_pass_thread(other, Origin::kSlab));
    EXPECT_TRUE(one_pass_thread(network_pass(), Origin::kSlab));
  }
}

// A long-lived thread whose first request looks like the learned pass's (a buffer every thread
// makes) but that runs something else: it leaves the pass after one pass's worth of requests and
// detects its own, planned as any thread's (it would have stayed on the learned pass, missing,
// for three re-check windows: 55 passes here).
TEST(EngineLearnedPass, AThreadWhoseFirstRequestOnlyLooksLikeThePassLeavesIt) {
  SKIP_UNLESS_ENGINE_PLANS();
  if (!engine_options().detect) return;
  for (uint32_t i = 0; i < kThreadsThatAgree; ++i) one_pass_thread(network_pass(), Origin::kTag);
  ASSERT_EQ(stats().learned_passes.load(), 1u);
  Script other = network_pass();
  size_t allocs = 0;
  for (Op& op : other) {
    if (op.kind == Op::kAlloc && allocs++ != 0) op.size += 128;  // all but the first request
  }
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < kDetectedPlanPasses + 6; ++pass) heap.pass(other, false);
    EXPECT_TRUE(heap.last_pass_all(Origin::kSlab)) << heap.last_pass_origins();
  });
  EXPECT_EQ(stats().learned_pass_threads.load(), 1u) << "it started on the pass once";
  EXPECT_TRUE(one_pass_thread(network_pass(), Origin::kSlab)) << "the pass stays in use";
}

TEST(EngineThreadExit, ExitingThreadReturnsItsSlab) {
  SKIP_UNLESS_ENGINE_PLANS();
  engine_options();
  const uint32_t before = slabs_in_use();
  planned_thread(network_pass());
  EXPECT_EQ(slabs_in_use(), before);
}

TEST(EngineThreadExit, RemoteFreesAreDrainedBeforeTheSlabGoesBack) {
  SKIP_UNLESS_ENGINE_PLANS();
  engine_options();
  const uint32_t before = slabs_in_use();
  // Block 0 is freed last, after the pass's last allocation: nothing drains the remote-free
  // stack before the thread exits.
  Script remote = network_pass();
  ASSERT_EQ(remote.back().kind, Op::kFree);
  ASSERT_EQ(remote.back().id, 0);
  remote.back().kind = Op::kFreeElsewhere;
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(network_pass());
    heap.pass(remote);
    ASSERT_EQ(origin_of(heap.last_pass()[0].p), Origin::kSlab);
  });
  EXPECT_EQ(slabs_in_use(), before);
}

TEST(EngineThreadExit, SlabStaysWhileABlockOfItIsAlive) {
  SKIP_UNLESS_ENGINE_PLANS();
  engine_options();
  const uint32_t before = slabs_in_use();
  const Script script = network_pass();
  GivenBlock survivor;
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(script);
    heap.begin_pass();
    for (const Op& op : script) {
      if (op.kind == Op::kFree && op.id == 4) {
        survivor = heap.give_away(4);  // outlives its thread
      } else {
        heap.run({op});
      }
    }
    heap.end_pass();
  });
  ASSERT_EQ(origin_of(survivor.p), Origin::kSlab);
  EXPECT_EQ(slabs_in_use(), before + 1);
  // New threads plan and run; a slab handed out again would overwrite the survivor.
  for (int thread = 0; thread < 3; ++thread) planned_thread(script, 3);
  EXPECT_TRUE(intact(survivor));
  engine_free(survivor.p);  // into the slab of a thread that is gone
  planned_thread(script);
}

TEST(EngineThreadExit, ProfiledBlockOutlivesItsThread) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass();
  GivenBlock survivor;
  on_fresh_thread([&] {
    Heap heap;
    for (uint64_t pass = 0; pass < engine_options().passes; ++pass) heap.pass(script);
    heap.begin_pass();  // the profiled pass, left unfinished: the thread exits in it
    heap.run({script[0], script[1]});
    ASSERT_EQ(origin_of(heap.pointer(1)), Origin::kTag);
    survivor = heap.give_away(1);
  });
  ASSERT_NE(survivor.p, nullptr);
  EXPECT_EQ(engine_usable_size(survivor.p), survivor.size);
  EXPECT_TRUE(intact(survivor));
  engine_free(survivor.p);  // reads the records of a thread that is gone
  planned_thread(script);
}

// A server that starts a thread per request: more threads over time than there are slabs.
TEST(EngineThreadExit, ThreadPerRequestNeverRunsOutOfSlabs) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass(4);
  engine_options();  // reserves the slabs
  const uint32_t slabs = global().slabs.arena_count();
  ASSERT_GT(slabs, 0u);
  const Counters before = counters();
  for (uint32_t request = 0; request < slabs + 8; ++request) {
    planned_thread(script, 0);
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ((counters() - before).plans, slabs + 8);
}

// Threads run passes at once and pass blocks to each other through a mailbox; each frees what it
// takes after checking it. Remote frees race with the owners' own allocations and frees.
TEST(EngineThreadsConcurrently, ThreadsExchangeBlocksWhileReplaying) {
  SKIP_UNLESS_ENGINE_PLANS();
  constexpr int kThreads = 6, kPasses = 150;
  std::mutex mutex;
  std::vector<GivenBlock> mailbox;
  std::atomic<int> corrupted{0};
  const Counters before = counters();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Heap heap;
      const Script script = network_pass(8 + t);
      for (int pass = 0; pass < kPasses; ++pass) {
        heap.begin_pass();
        for (const Op& op : script) {
          if (op.kind == Op::kFree && op.id == 5 && pass > 8 && pass % 2 == 0) {
            const GivenBlock given = heap.give_away(5);
            std::lock_guard<std::mutex> lock(mutex);
            mailbox.push_back(given);
            continue;
          }
          heap.run({op});
          if (op.kind == Op::kAlloc && op.id == 3) {
            GivenBlock taken;
            {
              std::lock_guard<std::mutex> lock(mutex);
              if (!mailbox.empty()) {
                taken = mailbox.back();
                mailbox.pop_back();
              }
            }
            if (taken.p) {
              if (!intact(taken)) ++corrupted;
              engine_free(taken.p);
            }
          }
        }
        heap.end_pass();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const GivenBlock& left : mailbox) {
    EXPECT_TRUE(intact(left));
    engine_free(left.p);
  }
  EXPECT_EQ(corrupted.load(), 0);
  const Counters d = counters() - before;
  EXPECT_EQ(d.plans, static_cast<uint64_t>(kThreads));
  EXPECT_GT(d.remote_frees, 0u);
}

// The same server, where each request thread hands its result (a planned block) to the main
// thread, which frees it after the request thread has exited: a common shape (a worker produces
// an output tensor that the caller consumes). Last in the file: while the bug stands it uses up
// every slab of the process, so in a whole-binary run (CTest runs each test in a process of its
// own) nothing may run after it. BUG (see the report): a slab whose owner exited
// with a block alive is never given back, not even after that block is freed (the free lands on
// the dead thread's remote-free stack, which nothing drains), so after `threads` requests no
// thread gets a slab any more; the thread's state and records leak the same way.
TEST(EngineThreadExitWithLiveBlocks, ThreadPerRequestHandingOutItsResultNeverRunsOutOfSlabs) {
  SKIP_UNLESS_ENGINE_PLANS();
  const Script script = network_pass(4);
  engine_options();  // reserves the slabs
  const uint32_t slabs = global().slabs.arena_count();
  const Counters before = counters();
  for (uint32_t request = 0; request < slabs + 8; ++request) {
    GivenBlock result;
    on_fresh_thread([&] {
      Heap heap;
      for (uint64_t pass = 0; pass < first_steady_pass(); ++pass) heap.pass(script);
      heap.begin_pass();
      for (const Op& op : script) {
        if (op.kind == Op::kFree && op.id == 0) {
          result = heap.give_away(0);
        } else {
          heap.run({op});
        }
      }
      heap.end_pass();
    });
    ASSERT_TRUE(intact(result));
    engine_free(result.p);
  }
  EXPECT_EQ((counters() - before).plans, slabs + 8);
}

}  // namespace
}  // namespace memoplan::shim::testing
