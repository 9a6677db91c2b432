// Records -> the planner's trace: the one place where a recorded stretch becomes planning input,
// for the shim and the LibTorch extension alike.
#pragma once

#include <cstdint>

#include "memoplan/planner/trace.h"
#include "memoplan/record/record_log.h"

namespace memoplan::record {

// Records [first, first + count) of `log` as a trace, ids 0.., in record order. A block alive
// after `cut_tick`, still alive, or freed off the log's clock escapes: it is never planned (in
// replay it would still be alive when the next pass wants its memory) and ends at cut_tick.
// Offsets are multiples of the trace's 64-byte default alignment; stricter requests say so.
Trace trace_of(const RecordLog& log, uint64_t first, uint64_t count, uint64_t cut_tick);
// The records at indices[0..count) (increasing) as a trace, ids 0.., the same way: a detected
// pass without the requests that occurred once (see the shim's period search).
Trace trace_of_indices(const RecordLog& log, const uint64_t* indices, uint64_t count,
                       uint64_t cut_tick);

}  // namespace memoplan::record
