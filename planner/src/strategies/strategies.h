// The solve function of every strategy, one file each in this folder. registry.cc lists them.
#pragma once

#include "memoplan/planner/strategy.h"

namespace memoplan::planner {

StrategyResult solve_naive(const Problem&, const StrategyOptions&);
StrategyResult solve_bump(const Problem&, const StrategyOptions&);
StrategyResult solve_greedy_by_size(const Problem&, const StrategyOptions&);
StrategyResult solve_greedy_by_breadth(const Problem&, const StrategyOptions&);
StrategyResult solve_first_fit(const Problem&, const StrategyOptions&);
StrategyResult solve_best_fit(const Problem&, const StrategyOptions&);
StrategyResult solve_longer_first_fit(const Problem&, const StrategyOptions&);
StrategyResult solve_bigger_first_fit(const Problem&, const StrategyOptions&);
StrategyResult solve_mincost_flow(const Problem&, const StrategyOptions&);
StrategyResult solve_strip_packing_best_fit(const Problem&, const StrategyOptions&);
StrategyResult solve_shared_greedy_by_size_improved(const Problem&, const StrategyOptions&);
StrategyResult solve_shared_greedy_by_breadth(const Problem&, const StrategyOptions&);
StrategyResult solve_mip(const Problem&, const StrategyOptions&);
StrategyResult solve_exact(const Problem&, const StrategyOptions&);
StrategyResult solve_best(const Problem&, const StrategyOptions&);

}  // namespace memoplan::planner
