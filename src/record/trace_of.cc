#include "memoplan/record/trace_of.h"

namespace memoplan::record {
namespace {

template <typename IndexOf>
Trace trace_of_records(const RecordLog& log, uint64_t count, uint64_t cut_tick, IndexOf index_of) {
  Trace trace;
  trace.allocations.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    const Record& r = log.at(index_of(i));
    const uint64_t end = r.end.load(std::memory_order_relaxed);
    Allocation& a = trace.allocations[i];
    a.id = i;
    a.size = r.size;
    a.begin = r.begin;
    a.escapes = end == kLive || end == kForeign || end > cut_tick;
    a.end = a.escapes ? cut_tick : end;
    a.align = r.align > trace.default_align ? r.align : 0;
    a.provenance.callsite = r.key;
    a.provenance.thread = r.thread;
  }
  return trace;
}

}  // namespace

Trace trace_of(const RecordLog& log, uint64_t first, uint64_t count, uint64_t cut_tick) {
  return trace_of_records(log, count, cut_tick, [first](uint64_t i) { return first + i; });
}

Trace trace_of_indices(const RecordLog& log, const uint64_t* indices, uint64_t count,
                       uint64_t cut_tick) {
  return trace_of_records(log, count, cut_tick, [indices](uint64_t i) { return indices[i]; });
}

}  // namespace memoplan::record
