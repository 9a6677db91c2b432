// One interface for every planning strategy: a function from a Problem to one offset per block.
// Each strategy lives in its own file under planner/src/strategies/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/problem.h"

namespace memoplan::planner {

struct StrategyOptions {
  double time_limit_s = 0.25;  // budget for strategies that search (mip, best's improvement phase)
  uint64_t seed = 1;           // for randomized search; same seed, same plan
  // Bytes the slab may take, for strategies that search for a plan within it (exact); 0: as few
  // as they can find.
  uint64_t capacity = 0;
};

struct StrategyResult {
  StrategyResult() = default;
  StrategyResult(std::vector<uint64_t> offsets_in,  // NOLINT: `return {offsets};` reads well
                 SolveStatus status_in = SolveStatus::kHeuristic, std::string note_in = {})
      : offsets(std::move(offsets_in)), status(status_in), note(std::move(note_in)) {}

  std::vector<uint64_t> offsets;  // one per Problem::blocks entry, multiples of Problem::alignment
  SolveStatus status = SolveStatus::kHeuristic;
  std::string note;
};

using SolveFn = StrategyResult (*)(const Problem&, const StrategyOptions&);

enum class Family {
  kOffsets,        // places blocks in one address space directly
  kSharedObjects,  // assigns blocks to shared buffers, laid out contiguously (Pisarchyk §4)
  kExact,          // solves to optimality under a time limit
  kPortfolio,      // combines other strategies
};

struct StrategyInfo {
  const char* name;
  const char* summary;    // one line for `memoplan plan --list`
  const char* reference;  // the paper it comes from
  Family family;
  bool fast;  // near-linear; included in `best`'s portfolio and in benchmarks by default
  SolveFn solve;
};

// Every strategy, in a stable order (the order of `memoplan compare` columns).
const std::vector<StrategyInfo>& all_strategies();
// nullptr when no strategy has that name.
const StrategyInfo* find_strategy(std::string_view name);
std::string strategy_names();  // comma-separated, for error messages

inline constexpr std::string_view kDefaultStrategy = "greedy_by_size";

}  // namespace memoplan::planner
