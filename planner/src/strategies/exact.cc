// An exact strategy after MiniMalloc (Moffitt, ASPLOS 2023): a branch and bound over canonical
// plans (exact_search.h), asked under the time limit either whether the problem fits
// StrategyOptions::capacity or, without one, for the smallest slab (exact_capacity.h). The fast
// strategies' best plan is the incumbent: returned when it already fits, bettered otherwise, and
// the fallback when the search runs out of time.
#include <chrono>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../exact_capacity.h"
#include "../time_sections.h"
#include "memoplan/planner/lower_bound.h"
#include "strategies.h"

namespace memoplan::planner {
namespace {

using Clock = std::chrono::steady_clock;

std::string too_big() {
  return "more than " + std::to_string(kExactMaxBlocks) + " blocks or " +
         std::to_string(kExactMaxPairs) + " lifetime-overlapping pairs, too many to search";
}

std::optional<TimeSections> tables(const Problem& problem) {
  if (problem.blocks.size() > kExactMaxBlocks) return std::nullopt;
  return make_time_sections(problem, kExactMaxPairs);
}

// The smallest plan of the fast strategies that place blocks themselves, the default one first
// and the others while the first quarter of the time limit lasts (most take a millisecond; on
// tens of thousands of blocks some take seconds).
std::vector<uint64_t> incumbent_plan(const Problem& problem, const StrategyOptions& options,
                                     Clock::time_point until) {
  std::vector<const StrategyInfo*> members;
  for (const StrategyInfo& info : all_strategies()) {
    const bool places = info.family == Family::kOffsets || info.family == Family::kSharedObjects;
    if (!info.fast || !places) continue;
    members.insert(info.name == kDefaultStrategy ? members.begin() : members.end(), &info);
  }
  std::vector<uint64_t> best;
  uint64_t best_slab = std::numeric_limits<uint64_t>::max();
  for (const StrategyInfo* member : members) {
    if (!best.empty() && Clock::now() >= until) break;
    StrategyResult tried = member->solve(problem, options);
    if (tried.offsets.size() != problem.blocks.size()) continue;
    const uint64_t slab = slab_size(problem, tried.offsets);
    if (slab < best_slab) {
      best_slab = slab;
      best = std::move(tried.offsets);
    }
  }
  return best;
}

// A plan within `capacity`: the incumbent's if it fits, else the search's, else the incumbent with
// what kept the search from finding one.
StrategyResult fit_capacity(const Problem& problem, std::vector<uint64_t> incumbent,
                            uint64_t lower_bound, uint64_t capacity, const ExactLimits& limits) {
  const uint64_t incumbent_slab = slab_size(problem, incumbent);
  const std::string wanted = "within " + std::to_string(capacity) + " bytes";
  auto status_of = [&](uint64_t slab) {
    return slab == lower_bound ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  };
  if (incumbent_slab <= capacity) {
    return {std::move(incumbent), status_of(incumbent_slab),
            "a fast strategy's plan fits " + wanted};
  }
  const std::string fallback = "; a fast strategy's plan (" + std::to_string(incumbent_slab) + ")";
  if (lower_bound > capacity) {
    return {std::move(incumbent), SolveStatus::kHeuristic,
            "infeasible: " + std::to_string(lower_bound) + " bytes are live at once" + fallback};
  }
  const std::optional<TimeSections> sections = tables(problem);
  if (!sections) return {std::move(incumbent), SolveStatus::kTimedOut, too_big() + fallback};
  FitResult fit = fit_within(problem, *sections, capacity, limits);
  const std::string nodes = std::to_string(fit.nodes) + " nodes";
  switch (fit.outcome) {
    case ExactOutcome::kFound: {
      const uint64_t slab = slab_size(problem, fit.offsets);
      return {std::move(fit.offsets), status_of(slab), "found a plan " + wanted + " in " + nodes};
    }
    case ExactOutcome::kInfeasible:
      return {std::move(incumbent), SolveStatus::kHeuristic,
              "infeasible: proven in " + nodes + " that no plan fits " + wanted + fallback};
    case ExactOutcome::kStopped:
      break;
  }
  return {std::move(incumbent), SolveStatus::kTimedOut,
          "no plan " + wanted + " found in the time limit (" + nodes + ")" + fallback};
}

// The smallest plan the search finds from the incumbent's, optimal when it proves so.
StrategyResult minimize(const Problem& problem, std::vector<uint64_t> incumbent,
                        uint64_t lower_bound, const ExactLimits& limits) {
  const uint64_t incumbent_slab = slab_size(problem, incumbent);
  if (incumbent_slab == lower_bound) {
    return {std::move(incumbent), SolveStatus::kOptimal,
            "a fast strategy's plan meets the lower bound"};
  }
  const std::string start = "from a fast strategy's " + std::to_string(incumbent_slab) + " bytes: ";
  const std::optional<TimeSections> sections = tables(problem);
  if (!sections) return {std::move(incumbent), SolveStatus::kTimedOut, start + too_big()};
  MinimizeResult minimized =
      minimize_slab(problem, *sections, std::move(incumbent), lower_bound, limits);
  const SolveStatus status =
      minimized.slab == minimized.proven_lower ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  return {std::move(minimized.offsets), status, start + minimized.note};
}

}  // namespace

StrategyResult solve_exact(const Problem& problem, const StrategyOptions& options) {
  const double seconds = options.time_limit_s > 0 ? std::min(options.time_limit_s, 86400.0) : 0.0;
  ExactLimits limits;
  limits.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(seconds));
  const uint64_t lower_bound = offset_lower_bound(problem);
  std::vector<uint64_t> incumbent = incumbent_plan(
      problem, options,
      Clock::now() +
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds / 4)));
  if (incumbent.size() != problem.blocks.size()) return {};  // no fast strategy registered
  return options.capacity
             ? fit_capacity(problem, std::move(incumbent), lower_bound, options.capacity, limits)
             : minimize(problem, std::move(incumbent), lower_bound, limits);
}

}  // namespace memoplan::planner
