// RecordTable, the profiler's bookkeeping, without torch: lifetimes on the event clock, escapes,
// threads, provenance and counters.
#include <gtest/gtest.h>

#include "memoplan/planner/trace.h"
#include "record_table.h"

namespace memoplan::torch_ext {
namespace {

OpContext at_op(const char* inner, const char* outer, int64_t node = -1) {
  OpContext where;
  where.inner = inner;
  where.outer = outer;
  where.path_hash = 42;
  where.node = node;
  return where;
}

TEST(RecordTable, LifetimesTicksAndEscapes) {
  RecordTable table(/*first_thread=*/7);
  table.count_request(true);
  table.count_request(false);
  const uint64_t a = table.add(100, true, 7, at_op("aten::empty", "aten::conv2d", 3));
  table.count_request(false);
  const uint64_t b = table.add(50, false, 7, OpContext{});
  table.remove(a, 7);
  table.remove(a, 7);  // a second free of the same row changes nothing
  const Trace trace = table.finish(TraceMeta{});

  ASSERT_EQ(trace.allocations.size(), 2u);
  EXPECT_EQ(check_trace(trace), "");
  const Allocation& ra = trace.allocations[a];
  EXPECT_EQ(ra.id, a);
  EXPECT_EQ(ra.size, 100u);
  EXPECT_EQ(ra.begin, 0u);
  EXPECT_EQ(ra.end, 2u);
  EXPECT_FALSE(ra.escapes);
  EXPECT_EQ(ra.provenance.op, "aten::empty");
  EXPECT_EQ(ra.provenance.outer_op, "aten::conv2d");
  EXPECT_EQ(ra.provenance.node, 3);
  EXPECT_EQ(ra.provenance.callsite, 42u);
  EXPECT_EQ(ra.provenance.thread, 0u);
  const Allocation& rb = trace.allocations[b];
  EXPECT_EQ(rb.begin, 1u);
  EXPECT_EQ(rb.end, 3u);  // the pass's end
  EXPECT_TRUE(rb.escapes);
  EXPECT_EQ(rb.provenance.op, "");
  EXPECT_EQ(rb.provenance.node, -1);

  const ProfileCounters& c = table.counters();
  EXPECT_EQ(c.requests, 3u);
  EXPECT_EQ(c.zero_byte, 1u);
  EXPECT_EQ(c.recorded, 2u);
  EXPECT_EQ(c.untagged, 1u);
  EXPECT_EQ(c.frees, 1u);
  EXPECT_EQ(c.escapes, 1u);
  EXPECT_EQ(c.peak_live_bytes, 150u);
  EXPECT_EQ(c.threads, 1u);
}

TEST(RecordTable, ThreadIndicesAndCrossThreadFrees) {
  RecordTable table(/*first_thread=*/100);
  const uint64_t on_worker = table.add(8, true, 200, OpContext{});
  const uint64_t on_main = table.add(8, true, 100, OpContext{});
  table.remove(on_worker, 100);  // freed by another thread
  table.remove(on_main, 100);
  const Trace trace = table.finish(TraceMeta{});
  EXPECT_EQ(trace.allocations[on_worker].provenance.thread, 1u);
  EXPECT_EQ(trace.allocations[on_main].provenance.thread, 0u);
  EXPECT_EQ(table.counters().cross_thread_frees, 1u);
  EXPECT_EQ(table.counters().threads, 2u);
}

TEST(RecordTable, NamesAreCopiedNotReferenced) {
  RecordTable table(1);
  char name[] = "aten::relu";
  table.add(8, true, 1, at_op(name, name));
  name[6] = 'X';  // the op's string is gone after its scope; the table must have its own copy
  table.add(8, true, 1, at_op(name, name));
  const Trace trace = table.finish(TraceMeta{});
  EXPECT_EQ(trace.allocations[0].provenance.op, "aten::relu");
  EXPECT_EQ(trace.allocations[1].provenance.op, "aten::Xelu");
}

}  // namespace
}  // namespace memoplan::torch_ext
