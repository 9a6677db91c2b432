// MemoMalloc §2.3, Eq. 2.1 (offline dynamic storage allocation as a MIP), solved by COIN-OR CBC:
//   min T  s.t.  x_i + s_i <= T;  for every lifetime-overlapping pair (i, j) a binary z_ij with
//   x_i + s_i <= x_j + M (1 - z_ij)  and  x_j + s_j <= x_i + M z_ij.
// greedy_by_size's plan is the incumbent: the model only admits slabs strictly below it (its slab
// less one unit is the bound on T and the big M), so every CBC solution is an improvement, and a
// search that finishes with none proves greedy_by_size optimal. That prunes exactly as handing CBC
// the plan as a start solution (setBestSolution) would, without the full LP re-solve CBC runs on
// its incumbent when it stops, which overran a 2 s limit by 2-4 s at 10k pairs. CBC's answer is
// read back as an address order and re-laid by longest paths.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "../mip_support.h"
#include "memoplan/planner/lower_bound.h"
#include "strategies.h"

#ifdef MEMOPLAN_WITH_CBC
#include <CbcModel.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>
#endif

namespace memoplan::planner {
namespace {

StrategyResult with_status(StrategyResult result, SolveStatus status, std::string note) {
  result.status = status;
  result.note = std::move(note);
  return result;
}

#ifdef MEMOPLAN_WITH_CBC

using Clock = std::chrono::steady_clock;

// Past this many ordered pairs the model is not even built. Below it the root LP still dominates:
// CLP's dual simplex on these big-M rows took ~0.35 s at 10k pairs, ~1.5 s at 25k, ~10 s at 70k
// and ~50 s at 140k on a 2-core dev box, under (pairs / 18k)^2 s, and CBC does not check its time
// limit inside it. So a model is solved only when that estimate fits the time limit.
constexpr size_t kMaxPairs = 200'000;
constexpr double kPairsPerSqrtSecond = 18'000;
// CBC's strong branching at the root solves two LPs per candidate, again without checking the
// clock; it pays off on small models and costs seconds past the limit on big ones.
constexpr size_t kMaxPairsForStrongBranching = 5'000;

struct Solution {
  std::vector<bool> first_below;  // the address order of CBC's best plan, empty when none
  bool proven = false;            // the search finished: the best plan, or greedy's, is optimal
  double objective = 0;           // CBC's T for that plan, in units
};

// Column layout: x_i (offset of block i) at i, T at n, z_k (pairs[k].first below .second) at n+1+k.
class Model {
 public:
  // `upper` is the largest slab (in units) the model admits, `lower` a bound below the optimum.
  Model(const Problem& problem, const std::vector<mip::BlockPair>& pairs, uint64_t unit,
        double lower, double upper)
      : pairs_(pairs), n_(problem.blocks.size()) {
    const size_t columns = n_ + 1 + pairs.size();
    col_lower_.assign(columns, 0.0);
    col_upper_.assign(columns, 1.0);
    objective_.assign(columns, 0.0);
    std::vector<double> size(n_);
    for (size_t i = 0; i < n_; ++i) {
      size[i] = static_cast<double>(problem.blocks[i].size / unit);
      col_upper_[i] = upper - size[i];
    }
    col_lower_[n_] = lower;
    col_upper_[n_] = upper;
    objective_[n_] = 1.0;

    for (size_t i = 0; i < n_; ++i) add_row({{i, 1.0}, {n_, -1.0}}, -size[i]);
    const double big_m = upper;  // x_i + s_i <= upper and x_j >= 0: the tightest valid M
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto [a, b] = pairs[k];
      add_row({{a, 1.0}, {b, -1.0}, {z(k), big_m}}, big_m - size[a]);
      add_row({{b, 1.0}, {a, -1.0}, {z(k), -big_m}}, -size[b]);
    }
    for (size_t k : mip::symmetry_fixes(problem, pairs)) col_lower_[z(k)] = 1.0;
  }

  Solution solve(double seconds) const {
    const CoinPackedMatrix matrix(false, row_index_.data(), col_index_.data(), element_.data(),
                                  static_cast<CoinBigIndex>(element_.size()));
    OsiClpSolverInterface solver;
    solver.messageHandler()->setLogLevel(0);
    solver.setHintParam(OsiDoReducePrint, true, OsiHintTry);
    const std::vector<double> row_lower(row_upper_.size(), -COIN_DBL_MAX);
    solver.loadProblem(matrix, col_lower_.data(), col_upper_.data(), objective_.data(),
                       row_lower.data(), row_upper_.data());
    for (size_t k = 0; k < pairs_.size(); ++k) solver.setInteger(static_cast<int>(z(k)));
    solver.setInteger(static_cast<int>(n_));  // T is whole units: CBC may prune at best - 1

    // Plain branch and bound: CBC's default cut generators and heuristics (CbcStrategyDefault)
    // found fewer improvements in the same time here and overran the limit by seconds in root
    // cut generation; the big-M relaxation stays at the lower bound whatever cuts are added.
    CbcModel model(solver);
    model.setLogLevel(0);
    model.messageHandler()->setLogLevel(0);
    model.solver()->messageHandler()->setLogLevel(0);
    model.setUseElapsedTime(true);
    model.setMaximumSeconds(seconds);
    model.setNumberThreads(0);
    if (pairs_.size() > kMaxPairsForStrongBranching) {
      model.setNumberStrong(0);
      model.setNumberBeforeTrust(0);
    }
    model.branchAndBound();

    Solution solution;
    solution.proven = model.isProvenOptimal() || model.isProvenInfeasible();
    if (const double* best = model.bestSolution()) {
      solution.objective = model.getObjValue();
      solution.first_below.resize(pairs_.size());
      for (size_t k = 0; k < pairs_.size(); ++k) solution.first_below[k] = best[z(k)] > 0.5;
    }
    return solution;
  }

 private:
  size_t z(size_t k) const { return n_ + 1 + k; }

  // Every row is `terms <= upper`.
  void add_row(std::initializer_list<std::pair<size_t, double>> terms, double upper) {
    const int row = static_cast<int>(row_upper_.size());
    for (const auto& [column, value] : terms) {
      row_index_.push_back(row);
      col_index_.push_back(static_cast<int>(column));
      element_.push_back(value);
    }
    row_upper_.push_back(upper);
  }

  const std::vector<mip::BlockPair>& pairs_;
  const size_t n_;
  std::vector<double> col_lower_, col_upper_, objective_, row_upper_;
  std::vector<int> row_index_, col_index_;
  std::vector<double> element_;
};

#endif  // MEMOPLAN_WITH_CBC

}  // namespace

StrategyResult solve_mip(const Problem& problem, const StrategyOptions& options) {
#ifndef MEMOPLAN_WITH_CBC
  return with_status(solve_greedy_by_size(problem, options), SolveStatus::kTimedOut,
                     "built without CBC: greedy_by_size's plan");
#else
  const Clock::time_point start = Clock::now();
  StrategyResult greedy = solve_greedy_by_size(problem, options);
  const uint64_t greedy_slab = slab_size(problem, greedy.offsets);
  const uint64_t lower_bound = offset_lower_bound(problem);
  if (greedy_slab == lower_bound) {
    return with_status(std::move(greedy), SolveStatus::kOptimal,
                       "greedy_by_size's plan meets the lower bound");
  }
  const double limit = std::max(0.0, options.time_limit_s);
  const size_t max_pairs = std::min(
      kMaxPairs, static_cast<size_t>(kPairsPerSqrtSecond * std::sqrt(std::max(limit, 0.01))));
  const std::optional<std::vector<mip::BlockPair>> pairs =
      mip::lifetime_overlapping_pairs(problem, max_pairs);
  if (!pairs) {
    return with_status(std::move(greedy), SolveStatus::kTimedOut,
                       "more than " + std::to_string(max_pairs) +
                           " lifetime-overlapping pairs: too big for the MIP in the time limit; "
                           "greedy_by_size's plan");
  }

  // Every size and offset is a multiple of the sizes' gcd (at least the alignment): solving in
  // those units keeps the big M, and CBC's tolerances relative to it, small.
  uint64_t unit = 0;
  for (const Block& b : problem.blocks) unit = std::gcd(unit, b.size);
  const Model model(problem, *pairs, unit, static_cast<double>(lower_bound / unit),
                    static_cast<double>(greedy_slab / unit - 1));
  const double spent = std::chrono::duration<double>(Clock::now() - start).count();
  const Solution solution = model.solve(std::max(0.001, limit - spent));

  const std::string greedy_note = "greedy_by_size's slab " + std::to_string(greedy_slab) + " bytes";
  if (solution.first_below.empty()) {
    return solution.proven
               ? with_status(std::move(greedy), SolveStatus::kOptimal,
                             "CBC proved greedy_by_size's plan optimal")
               : with_status(std::move(greedy), SolveStatus::kFeasible,
                             "CBC found no better plan than greedy_by_size's in the time limit");
  }
  // The z values define the order; offsets from it are exact and, up to CBC's tolerances, no
  // higher than its own x values.
  std::vector<uint64_t> offsets = mip::offsets_from_order(problem, *pairs, solution.first_below);
  const uint64_t slab = offsets.empty() ? greedy_slab : slab_size(problem, offsets);
  if (offsets.empty() || slab >= greedy_slab) {  // z at the edge of CBC's tolerance
    return with_status(std::move(greedy), SolveStatus::kFeasible,
                       "CBC's answer did not beat greedy_by_size's plan once laid out exactly");
  }
  // CBC's optimum is exact only up to its tolerances; claim it only when the exact layout
  // reaches it (or the lower bound).
  const bool optimal =
      slab == lower_bound ||
      (solution.proven && static_cast<double>(slab / unit) <= std::ceil(solution.objective - 1e-6));
  return {std::move(offsets), optimal ? SolveStatus::kOptimal : SolveStatus::kFeasible,
          (optimal ? "CBC proved it optimal; " : "CBC stopped at the time limit; ") + greedy_note};
#endif
}

}  // namespace memoplan::planner
