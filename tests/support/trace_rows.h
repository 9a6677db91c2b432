// Traces written by hand in tests: one row per allocation, {size, begin, end} on the pass's clock,
// ids 0, 1, 2, ... in row order. The one helper every test that builds a trace from rows uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/planner/trace.h"

namespace memoplan::testing {

// Sizes in hand-written rows.
inline constexpr uint64_t KiB = 1024;

struct Row {
  uint64_t size = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A trace of `rows` (ids 0..n-1), named `name`.
Trace trace_from_rows(const std::vector<Row>& rows, const std::string& name = "");

// Any rows with size, begin and end members (e.g. planner::Block).
template <typename Rows>
Trace trace_from(const Rows& rows, const std::string& name = "") {
  std::vector<Row> plain;
  for (const auto& r : rows) plain.push_back(Row{r.size, r.begin, r.end});
  return trace_from_rows(plain, name);
}

// Appends one row with the next id.
Allocation& add_row(Trace& trace, uint64_t size, uint64_t begin, uint64_t end);

}  // namespace memoplan::testing
