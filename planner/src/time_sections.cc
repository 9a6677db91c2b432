// See time_sections.h.
#include "time_sections.h"

#include <algorithm>

namespace memoplan::planner {

std::optional<TimeSections> make_time_sections(const Problem& problem, size_t max_pairs) {
  const size_t n = problem.blocks.size();
  TimeSections t;
  t.ticks.reserve(2 * n);
  for (const Block& b : problem.blocks) {
    t.ticks.push_back(b.begin);
    t.ticks.push_back(b.end);
  }
  std::sort(t.ticks.begin(), t.ticks.end());
  t.ticks.erase(std::unique(t.ticks.begin(), t.ticks.end()), t.ticks.end());
  const size_t sections = t.ticks.empty() ? 0 : t.ticks.size() - 1;

  auto section_of = [&](uint64_t tick) {
    return static_cast<uint32_t>(std::lower_bound(t.ticks.begin(), t.ticks.end(), tick) -
                                 t.ticks.begin());
  };
  t.first.resize(n);
  t.last.resize(n);
  t.load.assign(sections, 0);
  // Each section a block spans past its first starts at another block's begin or end, and that
  // block overlaps it: the spans add up to at most n + 4 * pairs. Checked before anything is
  // spent on them.
  size_t spans = 0;
  for (size_t i = 0; i < n; ++i) {
    t.first[i] = section_of(problem.blocks[i].begin);
    t.last[i] = section_of(problem.blocks[i].end);
    spans += t.last[i] - t.first[i];
  }
  if (spans > n + 4 * max_pairs) return std::nullopt;
  std::vector<uint32_t> count(sections + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t s = t.first[i]; s < t.last[i]; ++s) {
      t.load[s] += problem.blocks[i].size;
      ++count[s];
    }
  }
  t.member_begin.assign(sections + 1, 0);
  for (size_t s = 0; s < sections; ++s) t.member_begin[s + 1] = t.member_begin[s] + count[s];
  t.members.resize(t.member_begin[sections]);
  std::vector<uint32_t> fill(t.member_begin.begin(), t.member_begin.end() - 1);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t s = t.first[i]; s < t.last[i]; ++s) t.members[fill[s]++] = i;
  }

  // Two blocks overlap iff the later-starting one starts in a section the other lives in: each
  // pair is found once, in the section where the later one starts (ties: by index).
  std::vector<std::vector<uint32_t>> adjacent(n);
  size_t pairs = 0;
  for (uint32_t s = 0; s < sections; ++s) {
    for (uint32_t k = t.member_begin[s]; k < t.member_begin[s + 1]; ++k) {
      const uint32_t i = t.members[k];
      if (t.first[i] != s) continue;
      for (uint32_t m = t.member_begin[s]; m < t.member_begin[s + 1]; ++m) {
        const uint32_t j = t.members[m];
        if (j == i || (t.first[j] == s && j > i)) continue;
        if (++pairs > max_pairs) return std::nullopt;
        adjacent[i].push_back(j);
        adjacent[j].push_back(i);
      }
    }
  }
  t.neighbour_begin.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    t.neighbour_begin[i + 1] = t.neighbour_begin[i] + static_cast<uint32_t>(adjacent[i].size());
  }
  t.neighbours.reserve(t.neighbour_begin[n]);
  for (const std::vector<uint32_t>& list : adjacent) {
    t.neighbours.insert(t.neighbours.end(), list.begin(), list.end());
  }
  return t;
}

}  // namespace memoplan::planner
