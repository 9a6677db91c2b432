#include <string>

#include "memoplan/planner/strategy.h"
#include "strategies/strategies.h"

namespace memoplan::planner {

const std::vector<StrategyInfo>& all_strategies() {
  static const std::vector<StrategyInfo> strategies = {
      {"naive", "no reuse: every allocation its own range (the eager baseline)", "MemoMalloc §2.3",
       Family::kOffsets, true, solve_naive},
      {"bump", "bump pointer in allocation order, rolled back when the top blocks die",
       "MemoMalloc §2.3", Family::kOffsets, true, solve_bump},
      {"greedy_by_size", "largest first, smallest fitting gap among lifetime-overlapping blocks",
       "Pisarchyk & Lee 2020 §5.2", Family::kOffsets, true, solve_greedy_by_size},
      {"greedy_by_breadth", "widest operator first, its tensors largest first, smallest gap",
       "Pisarchyk & Lee 2020 §5.3", Family::kOffsets, true, solve_greedy_by_breadth},
      {"first_fit", "allocation order, lowest fitting hole", "Occamy §III-C", Family::kOffsets,
       true, solve_first_fit},
      {"best_fit", "allocation order, smallest fitting hole", "Occamy §III-C", Family::kOffsets,
       true, solve_best_fit},
      {"longer_first_fit", "longest lifetime first, lowest fitting hole", "Occamy §III-C",
       Family::kOffsets, true, solve_longer_first_fit},
      {"bigger_first_fit", "largest first, lowest fitting hole", "Occamy §III-C", Family::kOffsets,
       true, solve_bigger_first_fit},
      {"mincost_flow", "shared objects by min-cost flow over reuse edges, laid out contiguously",
       "Lee et al. 2019", Family::kSharedObjects, true, solve_mincost_flow},
      {"strip_packing_best_fit", "2-D strip packing with fixed lifetimes, best-fit skyline",
       "Sekiyama et al. 2018", Family::kOffsets, true, solve_strip_packing_best_fit},
      {"shared_greedy_by_size_improved",
       "shared objects staged by positional maxima, smallest time gap first",
       "Pisarchyk & Lee 2020 §4.4", Family::kSharedObjects, true,
       solve_shared_greedy_by_size_improved},
      {"shared_greedy_by_breadth", "shared objects, widest operator first",
       "Pisarchyk & Lee 2020 §4.2", Family::kSharedObjects, true, solve_shared_greedy_by_breadth},
      {"mip", "exact offline DSA MIP (MemoMalloc Eq. 2.1) solved by CBC under a time limit",
       "MemoMalloc §2.3", Family::kExact, false, solve_mip},
      {"exact", "branch and bound over canonical plans: minimal slab, or a plan within --capacity",
       "MiniMalloc (Moffitt 2023)", Family::kExact, false, solve_exact},
      {"best", "every fast strategy, the smallest slab, then a bounded perturbed-order search",
       "Occamy §III-C, Pisarchyk §7, memoplan", Family::kPortfolio, false, solve_best},
  };
  return strategies;
}

const StrategyInfo* find_strategy(std::string_view name) {
  for (const StrategyInfo& info : all_strategies()) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

std::string strategy_names() {
  std::string names;
  for (const StrategyInfo& info : all_strategies()) {
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

}  // namespace memoplan::planner
