// plan_budget(): slicing, pinning and load steps under a byte budget (budget.h).
#include "memoplan/planner/budget.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace memoplan::planner {
namespace {

uint64_t round_up(uint64_t bytes, uint64_t page) { return (bytes + page - 1) / page * page; }

// One slice of `group` cut in `slices`, in whole pages.
uint64_t slice_bytes(const WeightGroup& group, uint32_t slices, uint64_t page) {
  return round_up((group.bytes + slices - 1) / slices, page);
}

// What an unpinned group holds resident at its use step: all of it, or two slices.
uint64_t use_bytes(const WeightGroup& group, uint32_t slices, uint64_t page) {
  if (slices <= 1) return group.bytes;
  return std::min(group.bytes, 2 * slice_bytes(group, slices, page));
}

// What it holds while loaded ahead of its use: all of it, or its first slice.
uint64_t lead_bytes(const WeightGroup& group, uint32_t slices, uint64_t page) {
  if (slices <= 1) return group.bytes;
  return std::min(group.bytes, slice_bytes(group, slices, page));
}

// The working memory `group` needs computed in `slices`: work_bytes[floor(log2(slices))] (slice
// counts double; a max_slices that is no power of two reads the figure of the power below it,
// which needs at least as much).
uint64_t work_bytes(const WeightGroup& group, uint32_t slices) {
  if (group.work_bytes.empty()) return 0;
  size_t k = 0;
  while ((1u << (k + 1)) <= slices) ++k;
  return group.work_bytes[std::min(k, group.work_bytes.size() - 1)];
}

// The work arena under `slices` (one count per group), optionally with group `g` at `g_slices`.
uint64_t arena_bytes(const BudgetProblem& problem, const std::vector<uint32_t>& slices,
                     size_t g = SIZE_MAX, uint32_t g_slices = 1) {
  uint64_t most = 0;
  for (size_t i = 0; i < problem.groups.size(); ++i) {
    most = std::max(most, work_bytes(problem.groups[i], i == g ? g_slices : slices[i]));
  }
  return most;
}

void check(const BudgetProblem& problem) {
  if (problem.page_bytes == 0) throw std::invalid_argument("budget: page_bytes is 0");
  for (size_t g = 0; g < problem.groups.size(); ++g) {
    const WeightGroup& group = problem.groups[g];
    if (group.first_step > group.last_step || group.last_step >= problem.steps) {
      throw std::invalid_argument("budget: weight group " + std::to_string(g) + " has steps " +
                                  std::to_string(group.first_step) + ".." +
                                  std::to_string(group.last_step) + " of " +
                                  std::to_string(problem.steps));
    }
    if (group.max_slices == 0)
      throw std::invalid_argument("budget: weight group " + std::to_string(g) + " has 0 slices");
    if (group.on_demand && group.max_slices > 1) {
      throw std::invalid_argument("budget: weight group " + std::to_string(g) +
                                  " is read on demand and cannot be sliced");
    }
    if (group.max_slices > 1 && group.first_step != group.last_step) {
      throw std::invalid_argument("budget: weight group " + std::to_string(g) +
                                  " is read by several steps and cannot be sliced");
    }
  }
}

// The unpinned groups' bytes at each step (their windows [load, last]).
struct Profile {
  std::vector<uint64_t> at;
  void add(const WeightGroup& group, uint32_t load, uint32_t slices, uint64_t page, int sign) {
    for (uint32_t t = load; t <= group.last_step; ++t) {
      const uint64_t bytes =
          t < group.first_step ? lead_bytes(group, slices, page) : use_bytes(group, slices, page);
      at[t] = sign > 0 ? at[t] + bytes : at[t] - bytes;
    }
  }
  uint64_t peak() const { return at.empty() ? 0 : *std::max_element(at.begin(), at.end()); }
};

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

uint64_t smallest_feasible_budget(const BudgetProblem& problem) {
  check(problem);
  Profile profile{std::vector<uint64_t>(problem.steps, 0)};
  std::vector<uint32_t> most(problem.groups.size());
  for (size_t g = 0; g < problem.groups.size(); ++g) {
    const WeightGroup& group = problem.groups[g];
    profile.add(group, group.first_step, group.max_slices, problem.page_bytes, +1);
    most[g] = group.max_slices;
  }
  return problem.activation_bytes + arena_bytes(problem, most) + profile.peak();
}

BudgetPlan plan_budget(const BudgetProblem& problem) {
  const uint64_t smallest = smallest_feasible_budget(problem);  // checks the problem
  if (problem.budget_bytes < smallest) {
    std::vector<uint32_t> most(problem.groups.size());
    for (size_t g = 0; g < most.size(); ++g) most[g] = problem.groups[g].max_slices;
    const uint64_t arena = arena_bytes(problem, most);
    throw BudgetInfeasible("budget " + mib(problem.budget_bytes) +
                               " is below the smallest feasible budget " + mib(smallest) +
                               " (activations " + mib(problem.activation_bytes) +
                               (arena ? " + work arena " + mib(arena) : std::string()) +
                               " + the weights one step reads, sliced as far as they may be)",
                           smallest);
  }
  const uint64_t page = problem.page_bytes;
  const uint64_t limit = problem.budget_bytes - problem.activation_bytes;
  const size_t n = problem.groups.size();
  BudgetPlan plan;
  plan.smallest_budget_bytes = smallest;
  plan.pinned.assign(n, 0);
  plan.slices.assign(n, 1);
  plan.load_step.resize(n);
  Profile profile{std::vector<uint64_t>(problem.steps, 0)};
  for (size_t g = 0; g < n; ++g) {
    plan.load_step[g] = problem.groups[g].first_step;
    profile.add(problem.groups[g], plan.load_step[g], 1, page, +1);
  }

  // Slices: until every step fits (it does once each group is cut as far as it may be: smallest
  // <= budget), cut finer either the group holding the most at the worst step or the group that
  // sizes the work arena, whichever leaves the lower peak (the first on a tie).
  uint64_t arena = arena_bytes(problem, plan.slices);
  while (profile.peak() + arena > limit) {
    const size_t worst =
        std::max_element(profile.at.begin(), profile.at.end()) - profile.at.begin();
    size_t holder = n, sizer = n;
    uint64_t holder_bytes = 0, sizer_bytes = 0;
    for (size_t g = 0; g < n; ++g) {
      const WeightGroup& group = problem.groups[g];
      if (plan.slices[g] >= group.max_slices) continue;
      const uint64_t work = work_bytes(group, plan.slices[g]);
      if (work == arena && work > 0 && (sizer == n || work > sizer_bytes)) {
        sizer = g, sizer_bytes = work;
      }
      if (group.first_step > worst || group.last_step < worst) continue;
      const uint64_t bytes = use_bytes(group, plan.slices[g], page);
      if (holder == n || bytes > holder_bytes) holder = g, holder_bytes = bytes;
    }
    // The peak after cutting g once more.
    auto after = [&](size_t g) {
      const WeightGroup& group = problem.groups[g];
      const uint32_t finer = std::min(group.max_slices, plan.slices[g] * 2);
      profile.add(group, plan.load_step[g], plan.slices[g], page, -1);
      profile.add(group, plan.load_step[g], finer, page, +1);
      const uint64_t peak = profile.peak() + arena_bytes(problem, plan.slices, g, finer);
      profile.add(group, plan.load_step[g], finer, page, -1);
      profile.add(group, plan.load_step[g], plan.slices[g], page, +1);
      return peak;
    };
    size_t cut = holder;
    if (sizer != n && sizer != holder && (holder == n || after(sizer) < after(holder))) cut = sizer;
    if (cut == n) break;  // cannot happen: the smallest budget is met when all are cut
    const WeightGroup& group = problem.groups[cut];
    profile.add(group, plan.load_step[cut], plan.slices[cut], page, -1);
    plan.slices[cut] = std::min(group.max_slices, plan.slices[cut] * 2);
    profile.add(group, plan.load_step[cut], plan.slices[cut], page, +1);
    arena = arena_bytes(problem, plan.slices);
  }

  // Pins: the largest groups first, each where the pinned bytes plus the streamed ones still fit
  // at every step. A pinned group is whole (unsliced).
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return problem.groups[a].bytes > problem.groups[b].bytes;
  });
  uint64_t pinned = 0;
  for (size_t g : order) {
    const WeightGroup& group = problem.groups[g];
    if (group.on_demand || pinned + group.bytes > limit) continue;
    profile.add(group, plan.load_step[g], plan.slices[g], page, -1);
    const uint64_t whole_arena = arena_bytes(problem, plan.slices, g, 1);  // pinned: whole
    if (pinned + group.bytes + profile.peak() + whole_arena <= limit) {
      plan.pinned[g] = 1;
      plan.slices[g] = 1;
      pinned += group.bytes;
      arena = whole_arena;
    } else {
      profile.add(group, plan.load_step[g], plan.slices[g], page, +1);
    }
  }

  // Leads: each streamed group, in order of first use, loaded up to max_lead steps earlier while
  // the budget holds at those steps.
  std::vector<size_t> streamed;
  for (size_t g = 0; g < n; ++g) {
    if (!plan.pinned[g]) streamed.push_back(g);
  }
  std::stable_sort(streamed.begin(), streamed.end(), [&](size_t a, size_t b) {
    return problem.groups[a].first_step < problem.groups[b].first_step;
  });
  for (size_t g : streamed) {
    const WeightGroup& group = problem.groups[g];
    const uint64_t bytes = lead_bytes(group, plan.slices[g], page);
    const uint32_t max_lead = group.on_demand ? 0 : problem.max_lead;
    for (uint32_t lead = 1; lead <= max_lead && lead <= group.first_step; ++lead) {
      const uint32_t t = group.first_step - lead;
      if (pinned + profile.at[t] + bytes + arena > limit) break;
      profile.at[t] += bytes;
      plan.load_step[g] = t;
    }
    plan.streamed_bytes += group.bytes;
  }
  plan.pinned_bytes = pinned;
  plan.work_bytes = arena;
  plan.peak_bytes = problem.activation_bytes + arena + pinned + profile.peak();
  return plan;
}

std::vector<uint64_t> resident_profile(const BudgetProblem& problem, const BudgetPlan& plan) {
  std::vector<uint64_t> at(problem.steps,
                           problem.activation_bytes + arena_bytes(problem, plan.slices));
  for (size_t g = 0; g < problem.groups.size(); ++g) {
    const WeightGroup& group = problem.groups[g];
    for (uint32_t t = 0; t < problem.steps; ++t) {
      if (plan.pinned[g]) {
        at[t] += group.bytes;
      } else if (t >= plan.load_step[g] && t <= group.last_step) {
        at[t] += t < group.first_step ? lead_bytes(group, plan.slices[g], problem.page_bytes)
                                      : use_bytes(group, plan.slices[g], problem.page_bytes);
      }
    }
  }
  return at;
}

}  // namespace memoplan::planner
