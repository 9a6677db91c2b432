// sharing.h without torch: what a profiled pass's ShareInputs records become in the trace
// (resolve_claims), and what a replayed pass then checks (share_checks).
#include <gtest/gtest.h>

#include "compiled_plan.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/validator.h"
#include "sharing.h"

namespace memoplan::torch_ext {
namespace {

Allocation row(uint64_t id, uint64_t size, int64_t visit, uint64_t begin, uint64_t end) {
  Allocation a;
  a.id = id;
  a.size = size;
  a.begin = begin;
  a.end = end;
  a.provenance.node = visit;
  return a;
}

ShareClaim elementwise(uint32_t visit, uint64_t input_row, uint64_t bytes) {
  ShareClaim c;
  c.visit = visit;
  c.kind = ShareKind::kElementwise;
  c.inputs.push_back({0, input_row, bytes, 0});
  return c;
}

// Visit 1 makes A; visit 2 (from tick 1) makes B, and A dies in it (tick 2).
TEST(ResolveClaims, AnOutputTakesTheBytesOfAnInputThatDiesInItsOp) {
  Trace t;
  t.allocations = {row(0, 1024, 1, 0, 2), row(1, 1024, 2, 1, 6)};
  std::vector<ShareClaim> claims = {elementwise(2, 0, 1024)};
  resolve_claims(t, claims, {0, 0, 1, 4});
  EXPECT_EQ(t.allocations[1].alias_of, 0u);
  EXPECT_EQ(claims[0].out_row, 1u);
}

TEST(ResolveClaims, NoAliasWhenTheInputOutlivesTheOpOrDiffersInSize) {
  Trace t;
  t.allocations = {row(0, 1024, 1, 0, 5), row(1, 1024, 2, 1, 6)};  // A dies after visit 3 began
  std::vector<ShareClaim> claims = {elementwise(2, 0, 1024)};
  resolve_claims(t, claims, {0, 0, 1, 4});
  EXPECT_EQ(t.allocations[1].alias_of, kNoRow);
  EXPECT_EQ(claims[0].out_row, kNoRow);

  t.allocations = {row(0, 2048, 1, 0, 2), row(1, 1024, 2, 1, 6)};  // another size: a reduction
  claims = {elementwise(2, 0, 2048)};
  resolve_claims(t, claims, {0, 0, 1, 4});
  EXPECT_EQ(t.allocations[1].alias_of, kNoRow);
}

// DenseNet: c1 = cat([x0]), c2 = cat([x0, x1]). x0 lies in c1, c1 (all of it) in c2, x1 in c2.
TEST(ResolveClaims, AConcatWholeInTheNextBecomesItsSlice) {
  Trace t;
  t.allocations = {row(0, 128, 1, 0, 10), row(1, 128, 2, 1, 10), row(2, 128, 3, 2, 3),
                   row(3, 256, 4, 4, 11)};
  ShareClaim c1;
  c1.visit = 3;
  c1.kind = ShareKind::kConcat;
  c1.total_bytes = 128;
  c1.complete = true;
  c1.inputs = {{0, 0, 128, 0}};
  ShareClaim c2 = c1;
  c2.visit = 4;
  c2.total_bytes = 256;
  c2.inputs = {{0, 0, 128, 0}, {1, 1, 128, 128}};
  std::vector<ShareClaim> claims = {c1, c2};
  resolve_claims(t, claims, {0, 0, 1, 2, 4});
  EXPECT_EQ(t.allocations[0].slice_of, 2u);
  EXPECT_EQ(t.allocations[2].slice_of, 3u);
  EXPECT_EQ(t.allocations[2].slice_offset, 0u);
  EXPECT_EQ(t.allocations[1].slice_of, 3u);
  EXPECT_EQ(t.allocations[1].slice_offset, 128u);
  EXPECT_EQ(check_trace(t), "");

  memoplan::PlanOptions options;
  options.aliases = true;
  Result<Plan> plan = plan_trace(t, options);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_TRUE(validate_plan(t, *plan).valid);
  EXPECT_EQ(plan->slab_bytes, 256u);  // everything in c2's bytes
  std::vector<bool> shares;
  const std::vector<ShareCheck> checks = share_checks(t, claims, *plan, shares);
  // c1 over x0 (visit 3), c2 over x0 and x1 (visit 4).
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_EQ(checks[0].visit, 3u);
  EXPECT_EQ(checks[1].visit, 4u);
  EXPECT_EQ(checks[2].offset, plan->offsets[1]);
  EXPECT_EQ(checks[2].index, 1u);
  EXPECT_TRUE(shares[2]);
  EXPECT_TRUE(shares[3]);
  EXPECT_FALSE(shares[0]);
  EXPECT_FALSE(shares[1]);
}

// cat([a, b]) and then cat([a, c]): the first concat is not whole in the second (b is not there),
// so it stays apart; a lies in the first only.
TEST(ResolveClaims, AConcatNotWholeInTheNextStaysApart) {
  Trace t;
  t.allocations = {row(0, 128, 1, 0, 10), row(1, 128, 2, 1, 10), row(2, 256, 3, 2, 3),
                   row(3, 128, 4, 4, 10), row(4, 256, 5, 5, 11)};
  ShareClaim c1;
  c1.visit = 3;
  c1.kind = ShareKind::kConcat;
  c1.total_bytes = 256;
  c1.complete = true;
  c1.inputs = {{0, 0, 128, 0}, {1, 1, 128, 128}};
  ShareClaim c2 = c1;
  c2.visit = 5;
  c2.inputs = {{0, 0, 128, 0}, {1, 3, 128, 128}};
  std::vector<ShareClaim> claims = {c1, c2};
  resolve_claims(t, claims, {0, 0, 1, 2, 4, 5});
  EXPECT_EQ(t.allocations[0].slice_of, 2u);
  EXPECT_EQ(t.allocations[2].slice_of, kNoRow);
  EXPECT_EQ(t.allocations[3].slice_of, 4u);
  EXPECT_EQ(t.allocations[3].slice_offset, 128u);
  EXPECT_EQ(check_trace(t), "");
}

// Memory min is for the smallest slab: where greedy_by_size leaves it above its lower bound, the
// planner's best-of search is tried and the smaller plan kept. Four blocks (KiB): A 4 [0,2),
// B 4 [1,4), C 2 [3,6), D 4 [4,6): greedy_by_size packs them in 10 KiB, 8 suffice (planner's
// BestTest). The offset plan (no claims) is left as its strategy made it.
TEST(CompilePlan, MemoryMinTakesTheBestStrategyWhereGreedyMissesTheBound) {
  Trace t;
  t.allocations = {row(0, 4096, 1, 0, 2), row(1, 4096, 2, 1, 4), row(2, 2048, 3, 3, 6),
                   row(3, 4096, 4, 4, 6)};
  const std::vector<int64_t> visits = {0, 1, 2, 3, 4};
  const std::vector<ShareClaim> none;
  Result<CompiledPlan> offset = compile_plan(t, visits, "greedy_by_size");
  ASSERT_TRUE(offset.ok()) << offset.error();
  EXPECT_EQ(offset->slab_bytes, 10240u);
  Result<CompiledPlan> minimum = compile_plan(t, visits, "greedy_by_size", {}, &none);
  ASSERT_TRUE(minimum.ok()) << minimum.error();
  EXPECT_EQ(minimum->slab_bytes, 8192u);
  EXPECT_EQ(minimum->lower_bound_bytes, 8192u);
}

}  // namespace
}  // namespace memoplan::torch_ext
