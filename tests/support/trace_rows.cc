#include "trace_rows.h"

namespace memoplan::testing {

Allocation& add_row(Trace& trace, uint64_t size, uint64_t begin, uint64_t end) {
  Allocation a;
  a.id = trace.allocations.size();
  a.size = size;
  a.begin = begin;
  a.end = end;
  trace.allocations.push_back(a);
  return trace.allocations.back();
}

Trace trace_from_rows(const std::vector<Row>& rows, const std::string& name) {
  Trace trace;
  trace.meta.name = name;
  for (const Row& r : rows) add_row(trace, r.size, r.begin, r.end);
  return trace;
}

}  // namespace memoplan::testing
