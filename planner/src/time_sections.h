// The time structure the exact search (exact_search.h) works on, after MiniMalloc's sweep (Moffitt,
// ASPLOS 2023, §4): the pass cut at every distinct begin and end tick into sections, so that the
// blocks live in a section are live together for all of it and must be stacked one above another.
// A section's load is their total size; a block spans a contiguous run of sections; two blocks
// overlap in time exactly when their runs intersect.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {

struct TimeSections {
  // Section s covers the ticks [ticks[s], ticks[s + 1]); there are ticks.size() - 1 sections (0
  // when there are no blocks). Sections no block lives in are kept: they hold no one.
  std::vector<uint64_t> ticks;
  std::vector<uint32_t> first;  // block i lives in sections [first[i], last[i]), never empty
  std::vector<uint32_t> last;
  std::vector<uint64_t> load;  // bytes live in section s
  // The blocks live in section s: members[member_begin[s] .. member_begin[s + 1]).
  std::vector<uint32_t> member_begin;
  std::vector<uint32_t> members;
  // The blocks whose lifetimes overlap block i's, i excluded:
  // neighbours[neighbour_begin[i] .. neighbour_begin[i + 1]).
  std::vector<uint32_t> neighbour_begin;
  std::vector<uint32_t> neighbours;

  size_t sections() const { return load.size(); }
};

// The sections of `problem`, in O(n log n + members + pairs). nullopt when more than `max_pairs`
// pairs of blocks overlap in time: a problem that large is beyond an exact search anyway, and its
// neighbour lists alone would cost more than the time limit.
std::optional<TimeSections> make_time_sections(const Problem& problem, size_t max_pairs);

}  // namespace memoplan::planner
