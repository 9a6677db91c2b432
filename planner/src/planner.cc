#include "memoplan/planner/planner.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "memoplan/planner/aliasing.h"
#include "memoplan/planner/lower_bound.h"
#include "memoplan/planner/validator.h"
#include "offset_placer.h"

namespace memoplan {
namespace {

constexpr size_t kNoBlock = std::numeric_limits<size_t>::max();

// The blocks of `problem` in the order of `rows` (PlanOptions::row_order), then the blocks it
// lacks, largest first.
std::vector<size_t> blocks_in_row_order(const planner::Problem& problem, size_t trace_rows,
                                        const std::vector<size_t>& rows) {
  std::vector<size_t> block_of_row(trace_rows, kNoBlock);
  for (size_t i = 0; i < problem.blocks.size(); ++i) block_of_row[problem.row[i]] = i;
  std::vector<bool> taken(problem.blocks.size(), false);
  std::vector<size_t> order;
  order.reserve(problem.blocks.size());
  for (size_t row : rows) {
    const size_t block = row < trace_rows ? block_of_row[row] : kNoBlock;
    if (block == kNoBlock || taken[block]) continue;
    taken[block] = true;
    order.push_back(block);
  }
  for (size_t block : planner::order_by_size_desc(problem)) {
    if (!taken[block]) order.push_back(block);
  }
  return order;
}

// The trace with every group of `groups` as one row (its span, alive from its first member's
// birth to its last's death), in the order of each group's first member; the claims dropped.
// row_of[r]: the row of trace row r in it.
Trace grouped_trace(const Trace& trace, const planner::AliasGroups& groups, uint64_t alignment,
                    std::vector<size_t>& row_of) {
  Trace out;
  out.meta = trace.meta;
  out.default_align = trace.default_align;
  const auto& rows = trace.allocations;
  row_of.assign(rows.size(), kNoBlock);
  std::vector<size_t> group_row(groups.span.size(), kNoBlock);
  for (size_t row = 0; row < rows.size(); ++row) {
    const size_t group = groups.group[row];
    if (group == planner::AliasGroups::kAlone) {
      row_of[row] = out.allocations.size();
      Allocation a = rows[row];
      a.id = out.allocations.size();
      a.alias_of = a.slice_of = kNoRow;
      a.slice_offset = 0;
      out.allocations.push_back(std::move(a));
      continue;
    }
    if (group_row[group] == kNoBlock) {
      group_row[group] = out.allocations.size();
      Allocation a;
      a.id = out.allocations.size();
      a.size = groups.span[group];
      a.align = alignment;
      a.begin = ~uint64_t{0};
      a.provenance = rows[row].provenance;
      for (size_t member : groups.members[group]) {
        a.begin = std::min(a.begin, rows[member].begin);
        a.end = std::max(a.end, effective_end(rows[member]));
      }
      out.allocations.push_back(std::move(a));
    }
    row_of[row] = group_row[group];
  }
  return out;
}

// plan_trace with PlanOptions::aliases. The groups the claims allow are planned three ways, and
// the smallest slab wins: each group as one row of the strategy (its span for its whole life),
// and each group as the rigid shape its members make, first fit by span and by bytes in use.
// When sharing makes no smaller slab than the trace planned without it (conv temporaries, not the
// shared tensors, set the peak), that plan is taken: memory "min" is never worse than "offset".
Result<Plan> plan_with_aliases(const Trace& trace, const PlanOptions& options) {
  Result<planner::Problem> problem = planner::make_problem(trace, options.min_alignment);
  if (!problem) return Error{problem.error()};
  const planner::AliasGroups groups = planner::accept_aliases(trace, problem->alignment);
  PlanOptions without = options;
  without.aliases = false;
  Result<Plan> plain = plan_trace(trace, without);
  if (!plain) return plain;
  const uint64_t aliased_bound = planner::aliased_lower_bound(trace, groups);
  const std::string taken = "aliases: " + std::to_string(groups.aliases_taken) + " taken, " +
                            std::to_string(groups.aliases_left) +
                            " left; slices: " + std::to_string(groups.slices_taken) + " taken, " +
                            std::to_string(groups.slices_left) + " left";

  const auto start = std::chrono::steady_clock::now();
  std::vector<size_t> row_of;
  const Trace grouped = grouped_trace(trace, groups, problem->alignment, row_of);
  PlanOptions inner = without;
  inner.row_order.clear();
  for (size_t row : options.row_order) {
    if (row < row_of.size() && row_of[row] != kNoBlock) inner.row_order.push_back(row_of[row]);
  }
  Result<Plan> rectangles = plan_trace(grouped, inner);
  if (!rectangles) return rectangles;
  std::vector<uint64_t> best(trace.allocations.size(), 0);
  for (size_t row = 0; row < trace.allocations.size(); ++row) {
    if (planner::is_planned(trace.allocations[row])) {
      best[row] = rectangles->offsets[row_of[row]] + groups.offset[row];
    }
  }
  uint64_t best_slab = rectangles->slab_bytes;
  std::string how = rectangles->strategy + " on each group as one block";
  for (bool by_span : {true, false}) {
    std::vector<uint64_t> offsets =
        planner::place_groups_rigidly(trace, groups, problem->alignment, by_span);
    uint64_t slab = 0;
    for (size_t row = 0; row < trace.allocations.size(); ++row) {
      const Allocation& a = trace.allocations[row];
      if (planner::is_planned(a)) slab = std::max(slab, offsets[row] + a.size);
    }
    slab = (slab + problem->alignment - 1) / problem->alignment * problem->alignment;
    if (slab < best_slab) {
      best_slab = slab;
      best = std::move(offsets);
      how = std::string("groups placed whole, largest ") + (by_span ? "span" : "in use") + " first";
    }
  }
  const auto stop = std::chrono::steady_clock::now();

  Plan plan = std::move(*plain);
  plan.offset_lower_bound_bytes = plan.lower_bound_bytes;
  plan.lower_bound_bytes = aliased_bound;
  plan.planning_ms += std::chrono::duration<double, std::milli>(stop - start).count();
  if (best_slab >= plan.slab_bytes) {
    plan.note = (plan.note.empty() ? "" : plan.note + "; ") + taken +
                "; sharing made no smaller slab (" + std::to_string(best_slab) + " bytes): none";
    plan.status =
        plan.slab_bytes == plan.lower_bound_bytes ? SolveStatus::kOptimal : SolveStatus::kHeuristic;
    return plan;
  }
  plan.offsets = std::move(best);
  plan.slab_bytes = best_slab;
  plan.aliased_rows = 0;
  for (size_t row = 0; row < trace.allocations.size(); ++row) {
    const size_t group = groups.group[row];
    if (group != planner::AliasGroups::kAlone && groups.members[group].front() != row &&
        planner::is_planned(trace.allocations[row])) {
      ++plan.aliased_rows;  // every member but one: that one has its bytes anyway
    }
  }
  plan.status =
      plan.slab_bytes == plan.lower_bound_bytes ? SolveStatus::kOptimal : SolveStatus::kHeuristic;
  plan.note = how + "; " + taken;

  ValidationReport report = validate_plan(trace, plan, 3);
  if (!report.valid) {
    std::string message =
        "the aliased plan (" + how + ") is invalid (a planner bug; please report it): ";
    for (const std::string& m : report.messages) message += m + "; ";
    return Error{message};
  }
  return plan;
}

}  // namespace

Result<Plan> plan_trace(const Trace& trace, const PlanOptions& options) {
  if (options.aliases) return plan_with_aliases(trace, options);
  const planner::StrategyInfo* strategy = planner::find_strategy(options.strategy);
  if (!strategy) {
    return Error{"unknown strategy '" + options.strategy +
                 "' (known: " + planner::strategy_names() + ")"};
  }
  Result<planner::Problem> problem = planner::make_problem(trace, options.min_alignment);
  if (!problem) return Error{problem.error()};

  const auto start = std::chrono::steady_clock::now();
  planner::StrategyResult solved = strategy->solve(*problem, options.strategy_options);
  if (solved.offsets.size() != problem->blocks.size()) {
    return Error{std::string("strategy ") + strategy->name + " returned " +
                 std::to_string(solved.offsets.size()) + " offsets for " +
                 std::to_string(problem->blocks.size()) + " blocks"};
  }
  if (!options.row_order.empty()) {
    const std::vector<size_t> order =
        blocks_in_row_order(*problem, trace.allocations.size(), options.row_order);
    std::vector<uint64_t> learned = planner::place_in_order(*problem, order, planner::Fit::kFirst);
    const uint64_t learned_slab = planner::slab_size(*problem, learned);
    const uint64_t strategy_slab = planner::slab_size(*problem, solved.offsets);
    if (learned_slab < strategy_slab) {
      solved.offsets = std::move(learned);
      solved.status = SolveStatus::kHeuristic;
      solved.note = "placed in the learned order: " + std::to_string(learned_slab) + " bytes, " +
                    strategy->name + " " + std::to_string(strategy_slab);
    }
  }
  const auto stop = std::chrono::steady_clock::now();

  Plan plan;
  plan.strategy = strategy->name;
  plan.alignment = problem->alignment;
  plan.slab_bytes = planner::slab_size(*problem, solved.offsets);
  plan.lower_bound_bytes = planner::offset_lower_bound(*problem);
  plan.offset_lower_bound_bytes = plan.lower_bound_bytes;
  plan.offsets.assign(trace.allocations.size(), 0);
  for (size_t i = 0; i < problem->blocks.size(); ++i) {
    plan.offsets[problem->row[i]] = solved.offsets[i];
  }
  plan.trace_fingerprint = trace_fingerprint(trace);
  plan.planning_ms = std::chrono::duration<double, std::milli>(stop - start).count();
  plan.status = solved.status;
  if (plan.status == SolveStatus::kHeuristic && plan.slab_bytes == plan.lower_bound_bytes) {
    plan.status = SolveStatus::kOptimal;  // meeting the lower bound proves optimality
  }
  plan.note = std::move(solved.note);

  ValidationReport report = validate_plan(trace, plan, 3);
  if (!report.valid) {
    std::string message = std::string("strategy ") + strategy->name +
                          " produced an invalid plan (a planner bug; please report it): ";
    for (const std::string& m : report.messages) message += m + "; ";
    return Error{message};
  }
  return plan;
}

std::vector<size_t> placement_order(const Trace& trace, const Plan& plan) {
  std::vector<size_t> rows;
  if (plan.offsets.size() != trace.allocations.size()) return rows;
  for (size_t row = 0; row < trace.allocations.size(); ++row) {
    if (planner::is_planned(trace.allocations[row])) rows.push_back(row);
  }
  const auto& a = trace.allocations;
  std::sort(rows.begin(), rows.end(), [&](size_t x, size_t y) {
    if (plan.offsets[x] != plan.offsets[y]) return plan.offsets[x] < plan.offsets[y];
    if (a[x].size != a[y].size) return a[x].size > a[y].size;
    return x < y;
  });
  return rows;
}

}  // namespace memoplan
