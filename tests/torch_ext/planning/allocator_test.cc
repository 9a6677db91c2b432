// The tagged profiling allocator through c10's CPU allocator slot, without ATen ops: tags,
// zero-byte and large requests, slot recycling past 2^16 allocations, threads, frees after the
// session, and putting the previous allocator back.
#include <c10/core/Allocator.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <thread>
#include <vector>

#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "memoplan/torch/allocator_base.h"
#include "memoplan/torch/graph_node.h"
#include "memoplan/torch/profiler.h"
#include "planning.h"  // runtime_pass::Unrecorded
#include "resident.h"

namespace memoplan::torch_ext {
namespace {

c10::Allocator* cpu() { return c10::GetAllocator(c10::DeviceType::CPU); }

TEST(TaggedAllocator, InstalledForTheSessionThenPreviousRestoredAtItsPriority) {
  c10::Allocator* before = cpu();
  {
    ProfileSession session;
    session.begin();
    EXPECT_NE(cpu(), before);
    EXPECT_NE(cpu()->raw_deleter(), nullptr);  // oneDNN's raw_allocate path needs one
    session.end();
    EXPECT_EQ(cpu(), before);
  }
  // The slot's priority was not ratcheted up: a priority-0 SetAllocator still takes effect.
  struct Dummy final : memoplan::torch_ext::AllocatorBase<Dummy> {
    c10::DataPtr allocate_block(size_t) const { return {}; }
  } dummy;
  c10::SetAllocator(c10::DeviceType::CPU, &dummy, 0);
  EXPECT_EQ(cpu(), &dummy);
  c10::SetAllocator(c10::DeviceType::CPU, before, 0);
  EXPECT_EQ(cpu(), before);
}

TEST(TaggedAllocator, InteriorPointersMapBackToTheirAllocation) {
  ProfileSession session;
  session.begin();
  ASSERT_GE(ProfileSession::tag_slot_bytes(), uint64_t{1} << 20);
  std::vector<c10::DataPtr> blocks;
  const size_t sizes[] = {1, 63, 64, 4096, 100000, 3 << 20};
  for (size_t bytes : sizes) blocks.push_back(cpu()->allocate(bytes));
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto* p = static_cast<char*>(blocks[i].get());
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    EXPECT_EQ(blocks[i].get_context(), p);  // raw_allocate asserts this
    std::memset(p, 0xab, sizes[i]);         // committed and writable
    EXPECT_EQ(session.allocation_of(p), i);
    EXPECT_EQ(session.allocation_of(p + sizes[i] / 2), i);
    EXPECT_EQ(session.allocation_of(p + sizes[i] - 1), i);
  }
  int on_stack = 0;
  EXPECT_EQ(session.allocation_of(&on_stack), std::nullopt);
  const uint64_t freed_row = 2;
  void* freed = blocks[freed_row].get();
  blocks[freed_row].clear();
  EXPECT_EQ(session.allocation_of(freed), std::nullopt);  // only live blocks are found

  const Trace trace = session.end();
  ASSERT_EQ(trace.allocations.size(), std::size(sizes));
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    EXPECT_EQ(trace.allocations[i].size, sizes[i]);
    EXPECT_EQ(trace.allocations[i].escapes, i != freed_row);
  }
  EXPECT_EQ(session.counters().untagged, 0u);
}

TEST(TaggedAllocator, ZeroByteRequestsAreCountedNotRecorded) {
  ProfileSession session;
  session.begin();
  c10::DataPtr empty = cpu()->allocate(0);
  EXPECT_EQ(empty.get(), nullptr);
  c10::DataPtr one = cpu()->allocate(1);
  empty.clear();
  one.clear();
  const Trace trace = session.end();
  EXPECT_EQ(trace.allocations.size(), 1u);
  const ProfileCounters c = session.counters();
  EXPECT_EQ(c.requests, 2u);
  EXPECT_EQ(c.zero_byte, 1u);
  EXPECT_EQ(c.recorded, 1u);
}

TEST(TaggedAllocator, MoreThan65536AllocationsInOnePassRecycleSlots) {
  constexpr size_t kAllocations = 70000;
  constexpr size_t kLive = 16;  // a few live at once, as in a real pass
  ProfileSession session;
  session.begin();
  std::vector<c10::DataPtr> ring(kLive);
  for (size_t i = 0; i < kAllocations; ++i) {
    c10::DataPtr& slot = ring[i % kLive];
    slot = cpu()->allocate(64 + (i % 5) * 1000);  // frees the block it replaces
    static_cast<char*>(slot.get())[0] = 1;
  }
  for (c10::DataPtr& p : ring) p.clear();
  const Trace trace = session.end();
  ASSERT_EQ(trace.allocations.size(), kAllocations);
  EXPECT_EQ(trace.allocations.back().id, kAllocations - 1);
  EXPECT_EQ(check_trace(trace), "");
  const ProfileCounters c = session.counters();
  EXPECT_EQ(c.untagged, 0u);
  EXPECT_EQ(c.frees, kAllocations);
  EXPECT_EQ(c.escapes, 0u);
  Result<Plan> plan = plan_trace(trace);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_TRUE(validate_plan(trace, *plan).valid);
}

TEST(TaggedAllocator, LargerThanASlotIsRecordedUntagged) {
  ProfileSession session;
  session.begin();
  const uint64_t large = ProfileSession::tag_slot_bytes() + 1;
  c10::DataPtr small = cpu()->allocate(256);
  c10::DataPtr big = cpu()->allocate(large);  // address space only: pages are not touched
  auto* p = static_cast<char*>(big.get());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  p[0] = 1;
  p[large - 1] = 1;
  EXPECT_EQ(session.allocation_of(p), 1u);
  EXPECT_EQ(session.allocation_of(p + large - 1), 1u);
  EXPECT_EQ(session.allocation_of(p + large), std::nullopt);
  big.clear();
  const Trace trace = session.end();
  ASSERT_EQ(trace.allocations.size(), 2u);
  EXPECT_EQ(trace.allocations[1].size, large);
  EXPECT_FALSE(trace.allocations[1].escapes);
  EXPECT_EQ(session.counters().untagged, 1u);
}

TEST(TaggedAllocator, FreesFromOtherThreadsAndAfterTheSession) {
  c10::DataPtr escaping;
  {
    ProfileSession session;
    session.begin();
    c10::DataPtr moved = cpu()->allocate(1000);
    escaping = cpu()->allocate(2000);
    std::thread([&] { moved.clear(); }).join();
    const Trace trace = session.end();
    ASSERT_EQ(trace.allocations.size(), 2u);
    EXPECT_FALSE(trace.allocations[0].escapes);
    EXPECT_TRUE(trace.allocations[1].escapes);
    EXPECT_EQ(trace.allocations[1].end, 3u);  // two allocations and one free: the pass ends at 3
    const ProfileCounters c = session.counters();
    EXPECT_EQ(c.frees, 1u);
    EXPECT_EQ(c.cross_thread_frees, 1u);
    EXPECT_EQ(c.escapes, 1u);
  }
  // The block outlives its session and is freed on another thread: its deleter still works, and
  // its slot is free for the next session.
  static_cast<char*>(escaping.get())[1999] = 1;
  std::thread([&] { escaping.clear(); }).join();
  ProfileSession next;
  next.begin();
  c10::DataPtr again = cpu()->allocate(2000);
  EXPECT_EQ(next.allocation_of(again.get()), 0u);
  again.clear();
  EXPECT_EQ(next.end().allocations.size(), 1u);
}

using testing::resident;

// A profiled pass's memory is its live blocks: a freed slot's pages go back at once (keeping them
// for the next block added up to 64 MiB to a planned process's peak RSS).
TEST(TaggedAllocator, FreedSlotsGiveTheirPagesBackAtOnce) {
  ProfileSession session;
  session.begin();
  c10::DataPtr block = cpu()->allocate(4096);
  void* p = block.get();
  static_cast<char*>(p)[0] = 1;
  EXPECT_TRUE(resident(p));
  block.clear();
  EXPECT_FALSE(resident(p));
  session.end();
}

TEST(TaggedAllocator, CallingThreadSessionLeavesOtherThreadsAlone) {
  ProfileSession session;  // kCallingThread
  session.begin();
  c10::DeleterFnPtr ours = cpu()->raw_deleter();
  c10::DataPtr mine = cpu()->allocate(64);
  std::thread([&] {
    c10::DataPtr theirs = cpu()->allocate(64);
    EXPECT_NE(theirs.get_deleter(), ours);  // served by the previous allocator
  }).join();
  EXPECT_EQ(mine.get_deleter(), ours);
  mine.clear();
  EXPECT_EQ(session.end().allocations.size(), 1u);
  EXPECT_EQ(session.counters().requests, 1u);
}

// What an op does beside the pass (sliced_ops.cc's check) is in no session's trace, an
// all-threads session's included, and the calling thread records again once the scope ends.
TEST(TaggedAllocator, UnrecordedScopeLeavesNothingInTheTrace) {
  for (const ProfileThreads threads :
       {ProfileThreads::kCallingThread, ProfileThreads::kAllThreads}) {
    ProfileOptions options;
    options.threads = threads;
    ProfileSession session(options);
    session.begin();
    c10::DeleterFnPtr ours = cpu()->raw_deleter();
    c10::DataPtr before = cpu()->allocate(64);
    {
      runtime_pass::Unrecorded beside_the_pass;
      c10::DataPtr aside = cpu()->allocate(4096);
      EXPECT_NE(aside.get_deleter(), ours);  // served by the previous allocator
      { runtime_pass::Unrecorded nested; }
      c10::DataPtr still_aside = cpu()->allocate(32);  // the inner scope restored "unrecorded"
      EXPECT_NE(still_aside.get_deleter(), ours);
    }
    c10::DataPtr after = cpu()->allocate(128);
    EXPECT_EQ(after.get_deleter(), ours);
    before.clear();
    after.clear();
    const Trace trace = session.end();
    ASSERT_EQ(trace.allocations.size(), 2u);
    EXPECT_EQ(trace.allocations[0].size, 64u);
    EXPECT_EQ(trace.allocations[1].size, 128u);
  }
}

TEST(TaggedAllocator, AllThreadsSessionRecordsWorkersAndExcludesOtherSessions) {
  ProfileOptions options;
  options.threads = ProfileThreads::kAllThreads;
  ProfileSession session(options);
  session.begin();
  c10::DataPtr mine = cpu()->allocate(64);
  std::thread([&] {
    c10::DataPtr theirs = cpu()->allocate(128);
    ProfileSession other;
    EXPECT_THROW(other.begin(), std::runtime_error);
  }).join();
  ProfileSession nested;
  EXPECT_THROW(nested.begin(), std::runtime_error);
  const Trace trace = session.end();
  ASSERT_EQ(trace.allocations.size(), 2u);
  EXPECT_EQ(trace.allocations[0].provenance.thread, 0u);
  EXPECT_EQ(trace.allocations[1].provenance.thread, 1u);
  EXPECT_FALSE(trace.allocations[1].escapes);
  EXPECT_EQ(session.counters().threads, 2u);
}

TEST(TaggedAllocator, ConcurrentCallingThreadSessionsKeepTheirOwnRecords) {
  constexpr int kThreads = 4;
  std::vector<size_t> rows(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&rows, t] {
      ProfileSession session;
      session.begin();
      std::vector<c10::DataPtr> blocks;
      for (int i = 0; i <= t * 10; ++i) blocks.push_back(cpu()->allocate(64 + i));
      blocks.clear();
      rows[t] = session.end().allocations.size();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(rows[t], static_cast<size_t>(t * 10 + 1)) << t;
}

TEST(TaggedAllocator, RawAllocateAndGraphNodes) {
  ProfileSession session;
  session.begin();
  void* raw = nullptr;
  {
    GraphNodeScope node(12);
    raw = cpu()->raw_allocate(4096);  // as oneDNN does
  }
  c10::DataPtr outside = cpu()->allocate(8);
  cpu()->raw_deallocate(raw);
  outside.clear();
  EXPECT_EQ(current_node(), kUnknownNode);
  const Trace trace = session.end();
  ASSERT_EQ(trace.allocations.size(), 2u);
  EXPECT_EQ(trace.allocations[0].provenance.node, 12);
  EXPECT_EQ(trace.allocations[1].provenance.node, kUnknownNode);
  EXPECT_FALSE(trace.allocations[0].escapes);
}

TEST(TaggedAllocator, SessionMisuseThrows) {
  ProfileSession session;
  EXPECT_THROW(session.end(), std::logic_error);
  session.begin();
  EXPECT_THROW(session.begin(), std::logic_error);
  ProfileSession second_on_this_thread;
  EXPECT_THROW(second_on_this_thread.begin(), std::runtime_error);
  session.end();
  EXPECT_THROW(session.begin(), std::logic_error);
}

}  // namespace
}  // namespace memoplan::torch_ext
