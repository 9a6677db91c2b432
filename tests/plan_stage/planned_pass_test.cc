// The plan stage (src/plan_stage): the slot table both ways in replay, as each lays it out — the
// shim's keyed by call site with its escaping blocks placed, the extension's keyed by size and cut
// into visits — checked slot by slot against the planner's own offsets.
#include "memoplan/plan_stage/planned_pass.h"

#include <gtest/gtest.h>

#include "trace_rows.h"

namespace memoplan::plan_stage {
namespace {

using testing::add_row;

// Four rows in allocation order: a chain of two, one of zero bytes, one that escapes.
Trace four_rows() {
  Trace trace;
  add_row(trace, 1000, 0, 2).provenance.callsite = 11;
  add_row(trace, 500, 1, 3).provenance.callsite = 22;
  add_row(trace, 0, 2, 3).provenance.callsite = 33;
  Allocation& out = add_row(trace, 300, 3, 4);
  out.provenance.callsite = 44;
  out.escapes = true;
  return trace;
}

TEST(PlannedPassTest, ShimTableMatchesThePlannerRowByRow) {
  const Trace trace = four_rows();
  CompileOptions options;  // by call site, in row order, escaping blocks left unplanned
  Result<PlannedPass> pass = compile(trace, options);
  ASSERT_TRUE(pass.ok()) << pass.error();
  const Result<Plan> plan = plan_trace(trace);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(pass->slab_bytes, plan->slab_bytes);
  EXPECT_EQ(pass->escaping_bytes, 0u);
  EXPECT_EQ(pass->plan.lower_bound_bytes, plan->lower_bound_bytes);
  EXPECT_TRUE(pass->visits.empty());
  ASSERT_EQ(pass->slots.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    const Allocation& a = trace.allocations[i];
    const replay::Slot& s = pass->slots[i];
    EXPECT_EQ(pass->rows[i], i);
    EXPECT_EQ(s.key, a.provenance.callsite);
    EXPECT_EQ(s.size, a.size);
    EXPECT_EQ(s.offset, plan->offsets[i]);
    EXPECT_EQ(s.planned, a.size > 0 && !a.escapes) << "row " << i;
    EXPECT_EQ(s.alternate, replay::Slot::kNoAlternate);
  }
}

TEST(PlannedPassTest, EscapingBlocksGetTwoPlacesAfterTheSlab) {
  const Trace trace = four_rows();
  CompileOptions options;
  options.escaping_limit = 1 << 20;
  Result<PlannedPass> pass = compile(trace, options);
  ASSERT_TRUE(pass.ok()) << pass.error();
  const uint64_t planned = pass->plan.slab_bytes;
  EXPECT_EQ(pass->slab_bytes, 4096 + 2 * 4096) << "the slab to a page, then two pages";
  EXPECT_EQ(pass->escaping_bytes, pass->slab_bytes - planned);
  // Every unplanned slot gets its places (replay/escaping.h), the zero-byte row's one byte first,
  // as the shim's mode:replay did with a trace file's zero-byte rows.
  const replay::Slot& empty = pass->slots[2];
  EXPECT_TRUE(empty.planned);
  EXPECT_EQ(empty.offset, 4096u);
  EXPECT_EQ(empty.alternate, 2 * 4096u);
  const replay::Slot& out = pass->slots[3];
  EXPECT_TRUE(out.planned);
  EXPECT_EQ(out.offset, 4096u + 64);
  EXPECT_EQ(out.alternate, 2 * 4096u + 64);

  options.escaping_limit = 8192;  // no room for two pages after the slab's
  pass = compile(trace, options);
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(pass->slab_bytes, pass->plan.slab_bytes);
  EXPECT_EQ(pass->escaping_bytes, 0u);
  EXPECT_FALSE(pass->slots[2].planned);
  EXPECT_FALSE(pass->slots[3].planned);
}

TEST(PlannedPassTest, RowKeysReplaceTheCallsite) {
  const Trace trace = four_rows();
  CompileOptions options;
  options.row_keys = {7, 8, 9, 10};
  Result<PlannedPass> pass = compile(trace, options);
  ASSERT_TRUE(pass.ok());
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(pass->slots[i].key, 7 + i);
  options.row_keys = {7};
  EXPECT_FALSE(compile(trace, options).ok()) << "one key per row";
}

TEST(PlannedPassTest, AllocationOrderSortsAFilesRows) {
  Trace trace;
  add_row(trace, 64, 5, 6);
  add_row(trace, 128, 0, 2);
  add_row(trace, 256, 5, 7);
  add_row(trace, 512, 1, 3);
  CompileOptions options;
  options.order = SlotOrder::kAllocation;
  Result<PlannedPass> pass = compile(trace, options);
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(pass->rows, (std::vector<uint32_t>{1, 3, 0, 2})) << "by begin, ties in row order";
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(pass->slots[i].size, trace.allocations[pass->rows[i]].size);
    EXPECT_EQ(pass->slots[i].offset, pass->plan.offsets[pass->rows[i]]);
  }
}

TEST(PlannedPassTest, VisitOrderCutsTheTableIntoVisits) {
  Trace trace;
  const int64_t visit[] = {1, 0, 2, 1, 9};  // 9: no such visit, counted as visit 0
  for (uint64_t i = 0; i < 5; ++i)
    add_row(trace, 64 * (i + 1), i, i + 1).provenance.node = visit[i];
  CompileOptions options;
  options.key = SlotKey::kSize;
  options.order = SlotOrder::kVisit;
  options.visit_nodes = {-1, 40, 41};
  Result<PlannedPass> pass = compile(trace, options);
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(pass->rows, (std::vector<uint32_t>{1, 4, 0, 3, 2}));
  ASSERT_EQ(pass->visits.size(), 3u);
  EXPECT_EQ(pass->visits[0].node, -1);
  EXPECT_EQ(pass->visits[0].first_slot, 0u);
  EXPECT_EQ(pass->visits[0].slot_count, 2u);
  EXPECT_EQ(pass->visits[1].node, 40);
  EXPECT_EQ(pass->visits[1].first_slot, 2u);
  EXPECT_EQ(pass->visits[1].slot_count, 2u);
  EXPECT_EQ(pass->visits[2].first_slot, 4u);
  EXPECT_EQ(pass->visits[2].slot_count, 1u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(pass->slots[i].key, pass->slots[i].size);
}

TEST(PlannedPassTest, LayOutTakesAPlanMadeElsewhere) {
  const Trace trace = four_rows();
  Result<Plan> plan = plan_trace(trace);
  ASSERT_TRUE(plan.ok());
  Plan wrong = *plan;
  wrong.offsets.pop_back();
  EXPECT_FALSE(lay_out(trace, wrong, CompileOptions{}).ok()) << "one offset per row";
  Result<PlannedPass> pass = lay_out(trace, *plan, CompileOptions{});
  ASSERT_TRUE(pass.ok());
  Result<PlannedPass> compiled = compile(trace, CompileOptions{});
  ASSERT_TRUE(compiled.ok());
  ASSERT_EQ(pass->slots.size(), compiled->slots.size());
  for (size_t i = 0; i < pass->slots.size(); ++i) {
    EXPECT_EQ(pass->slots[i].offset, compiled->slots[i].offset);
  }
  CompileOptions unknown;
  unknown.planner.strategy = "no_such_strategy";
  EXPECT_FALSE(compile(trace, unknown).ok());
}

}  // namespace
}  // namespace memoplan::plan_stage
