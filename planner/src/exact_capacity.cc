// See exact_capacity.h.
#include "exact_capacity.h"

#include <algorithm>
#include <array>
#include <numeric>

namespace memoplan::planner {
namespace {

using Clock = std::chrono::steady_clock;

// Tie-breaking orders, larger first: the most constrained blocks (in the fullest sections, the
// longest lived, the largest) go first among equal floors.
constexpr std::array<RankOrder, 3> kOrders = {{
    {RankKey::kLifetime, RankKey::kArea, RankKey::kSectionLoad},
    {RankKey::kSectionLoad, RankKey::kArea, RankKey::kLifetime},
    {RankKey::kSectionLoad, RankKey::kLifetime, RankKey::kArea},
}};

// Blocks a search node visits per second, with room to spare: a node scans its part's blocks and
// tries a few steps, 5-25 ns per block of the problem on the MiniMalloc benchmarks (2-core dev
// box).
constexpr double kBlockVisitsPerSecond = 4e7;

// Every slab a canonical plan makes is a sum of sizes, so a multiple of their gcd.
uint64_t size_unit(const Problem& problem) {
  uint64_t unit = 0;
  for (const Block& b : problem.blocks) unit = std::gcd(unit, b.size);
  return std::max<uint64_t>(unit, 1);
}

FitResult fit_with(ExactSearch& search, size_t n, uint64_t capacity, const ExactLimits& limits) {
  FitResult result;
  uint64_t cap = 2 * std::max<uint64_t>(n, 64);
  while (true) {
    for (const RankOrder& order : kOrders) {
      ExactSearchLimits round{cap, limits.deadline};
      if (limits.max_nodes) {
        if (result.nodes >= limits.max_nodes) return result;
        round.max_nodes = std::min(cap, limits.max_nodes - result.nodes);
      }
      result.outcome = search.run(capacity, order, round);
      result.nodes += search.nodes();
      if (result.outcome == ExactOutcome::kFound) {
        result.offsets = search.offsets();
        return result;
      }
      if (result.outcome == ExactOutcome::kInfeasible) return result;
      if (Clock::now() >= limits.deadline) return result;
    }
    cap *= 2;
  }
}

}  // namespace

FitResult fit_within(const Problem& problem, const TimeSections& sections, uint64_t capacity,
                     const ExactLimits& limits) {
  ExactSearch search(problem, sections);
  return fit_with(search, problem.blocks.size(), capacity, limits);
}

uint64_t exact_search_nodes(const Problem& problem, double seconds) {
  const double blocks = static_cast<double>(std::max<size_t>(problem.blocks.size(), 64));
  return static_cast<uint64_t>(std::max(0.0, seconds) * kBlockVisitsPerSecond / blocks);
}

MinimizeResult minimize_slab(const Problem& problem, const TimeSections& sections,
                             std::vector<uint64_t> incumbent, uint64_t lower_bound,
                             const ExactLimits& limits) {
  const uint64_t unit = size_unit(problem);
  MinimizeResult result;
  result.offsets = std::move(incumbent);
  result.slab = slab_size(problem, result.offsets);
  result.proven_lower = (lower_bound + unit - 1) / unit * unit;
  if (result.slab <= result.proven_lower) {
    result.proven_lower = result.slab;
    result.note = "the plan meets the lower bound";
    return result;
  }

  ExactSearch search(problem, sections);
  const size_t n = problem.blocks.size();
  // Each pass asks about the lower bound first (often it fits, and then all is proven), then
  // bisects between what is proven and what is found, taking a question it could not settle
  // within the pass's nodes as a no. Passes repeat with four times the nodes.
  uint64_t effort = 64 * std::max<uint64_t>(n, 64);
  uint64_t probes = 0;
  while (result.slab > result.proven_lower && Clock::now() < limits.deadline) {
    uint64_t lo = result.proven_lower;
    bool first = true;
    while (lo < result.slab && Clock::now() < limits.deadline) {
      const uint64_t steps = (result.slab - lo) / unit;  // capacities lo .. slab - unit
      const uint64_t capacity = first ? lo : lo + (steps - 1) / 2 * unit;
      first = false;
      ExactLimits probe{limits.deadline, effort};
      if (limits.max_nodes) {
        if (result.nodes >= limits.max_nodes) break;
        probe.max_nodes = std::min(effort, limits.max_nodes - result.nodes);
      }
      FitResult fit = fit_with(search, n, capacity, probe);
      result.nodes += fit.nodes;
      ++probes;
      if (fit.outcome == ExactOutcome::kFound) {
        result.offsets = std::move(fit.offsets);
        result.slab = slab_size(problem, result.offsets);
      } else {
        if (fit.outcome == ExactOutcome::kInfeasible) {
          result.proven_lower = std::max(result.proven_lower, capacity + unit);
        }
        lo = capacity + unit;
      }
    }
    if (limits.max_nodes && result.nodes >= limits.max_nodes) break;
    effort *= 4;
  }
  result.proven_lower = std::min(result.proven_lower, result.slab);
  result.note = std::to_string(probes) + " capacities tried, " + std::to_string(result.nodes) +
                " nodes; " +
                (result.slab == result.proven_lower
                     ? "proven optimal: no plan below " + std::to_string(result.slab) + " bytes"
                     : "proven: no plan below " + std::to_string(result.proven_lower) + " bytes");
  return result;
}

}  // namespace memoplan::planner
