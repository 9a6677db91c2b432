// The strategy to pick when a few hundred milliseconds of planning are affordable: every fast
// strategy (a portfolio: no single heuristic wins on every model), then the remaining time spent
// improving the winner by a search over placement orders (order_search.h), and what is left of it
// by the exact search (exact_capacity.h), which may also prove the plan optimal.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../exact_capacity.h"
#include "../order_search.h"
#include "../time_sections.h"
#include "memoplan/planner/lower_bound.h"
#include "strategies.h"

namespace memoplan::planner {
namespace {

using Clock = std::chrono::steady_clock;

// Every fast strategy that places blocks itself, the default one first: however short the time
// limit, `best` is never worse than what a user gets without choosing.
std::vector<const StrategyInfo*> portfolio() {
  std::vector<const StrategyInfo*> members;
  for (const StrategyInfo& info : all_strategies()) {
    const bool places = info.family == Family::kOffsets || info.family == Family::kSharedObjects;
    if (!info.fast || !places || info.solve == solve_best) continue;
    members.insert(info.name == kDefaultStrategy ? members.begin() : members.end(), &info);
  }
  return members;
}

// The exact search's node cap, as a share of the time limit: the order search's own cap leaves
// most of the limit unused on an ordinary core, and the deadline stops a slower one.
constexpr double kExactShare = 0.5;

std::string ratio_text(uint64_t slab, uint64_t lower_bound) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4fx",
                lower_bound ? static_cast<double>(slab) / static_cast<double>(lower_bound) : 1.0);
  return text;
}

}  // namespace

StrategyResult solve_best(const Problem& problem, const StrategyOptions& options) {
  // A day is "unlimited"; capping it keeps the clock arithmetic from overflowing (NaN counts as 0).
  const double seconds = options.time_limit_s > 0 ? std::min(options.time_limit_s, 86400.0) : 0.0;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(seconds));
  const uint64_t lower_bound = offset_lower_bound(problem);

  const StrategyInfo* winner = nullptr;
  std::vector<uint64_t> offsets;
  uint64_t slab = std::numeric_limits<uint64_t>::max();
  size_t skipped = 0;
  for (const StrategyInfo* member : portfolio()) {
    // Once there is a plan, the time limit outranks trying more members.
    if (winner && Clock::now() >= deadline) {
      ++skipped;
      continue;
    }
    StrategyResult tried = member->solve(problem, options);
    if (tried.offsets.size() != problem.blocks.size()) continue;
    const uint64_t tried_slab = slab_size(problem, tried.offsets);
    // Below the lower bound is impossible for a valid plan: a member's bug must not become ours.
    if (tried_slab < lower_bound) continue;
    if (tried_slab < slab) {
      winner = member;
      slab = tried_slab;
      offsets = std::move(tried.offsets);
    }
    if (slab == lower_bound) break;  // optimal: nothing left to win
  }
  if (!winner) return {};  // the registry lists no fast strategy: nothing to return

  std::string note = "portfolio winner " + std::string(winner->name) + " at " +
                     ratio_text(slab, lower_bound) + " of the lower bound";
  if (skipped) note += " (" + std::to_string(skipped) + " members skipped: time limit)";
  if (slab > lower_bound && Clock::now() < deadline) {
    OrderSearchOptions search;
    search.deadline = deadline;
    search.seed = options.seed;
    search.target_slab = lower_bound;
    search.max_iterations = order_search_iterations(problem, seconds);
    OrderSearchResult improved = search_placement_orders(problem, offsets, search);
    note += "; order search " + ratio_text(improved.slab, lower_bound) + " after " +
            std::to_string(improved.iterations) + " orders" +
            (improved.hit_deadline ? " (time limit)" : "");
    slab = improved.slab;
    offsets = std::move(improved.offsets);
  }
  bool proven = slab == lower_bound;
  if (!proven && Clock::now() < deadline) {
    // Capped by nodes, not by the clock, so that best stays reproducible where the cap binds
    // first. Too few nodes to get anywhere (a huge problem, a tiny limit) are not worth building
    // the tables for, nor are tables that would take more than a fraction of the search's time.
    const uint64_t nodes = exact_search_nodes(problem, seconds * kExactShare);
    const size_t n = problem.blocks.size();
    std::optional<TimeSections> sections;
    if (nodes >= 16 * n && n <= kExactMaxBlocks) {
      sections = make_time_sections(problem, std::min<uint64_t>(kExactMaxPairs, nodes * n / 4));
    }
    if (sections) {
      ExactLimits limits;
      limits.deadline = deadline;
      limits.max_nodes = nodes;
      MinimizeResult exact = minimize_slab(problem, *sections, offsets, lower_bound, limits);
      note += "; exact search " + ratio_text(exact.slab, lower_bound) + ", " + exact.note;
      if (exact.slab < slab) {
        slab = exact.slab;
        offsets = std::move(exact.offsets);
      }
      proven = exact.proven_lower == slab;
      if (!proven && Clock::now() >= deadline) note += " (time limit)";
    }
  }
  return {std::move(offsets), proven ? SolveStatus::kOptimal : SolveStatus::kHeuristic,
          std::move(note)};
}

}  // namespace memoplan::planner
