// Pass detection for a pass whose sizes vary from request to request (detect.cc asks it when the
// exact search finds nothing): the same records keyed by call site and by how many blocks were
// alive at each allocation, which a pass repeats whatever its input's shape.
#pragma once

#include <cstdint>

#include "period.h"

namespace memoplan::shim {

struct ThreadState;

// For each of n records in allocation order (begins[], ascending allocation ticks; ends[], their
// free ticks, record::kLive or any tick >= `now` while alive), how many of the records before it
// were alive at its allocation, into alive[]. False when its scratch cannot be allocated.
bool alive_at_each(const uint64_t* begins, const uint64_t* ends, uint64_t n, uint64_t now,
                   uint64_t* alive);

// The thread's n profile records from log index `first` searched by call site and live count.
// Taken only if the call sites repeat for three whole periods and some request's size differs
// between periods (else the exact search would have found it). Returns each slot's largest size
// over the periodic records (fallback::malloc, found->period values) and updates *found and
// *recurring, or returns null and leaves them. columns[] and table[] are detect.cc's: the exact
// search's columns (10n words; keys, begins, ends and kept are loaded again) and keep_recurring's
// hash table.
uint64_t* search_size_free(ThreadState& t, uint64_t first, uint64_t n, uint64_t* columns,
                           uint64_t* table, uint64_t table_slots, const PeriodQuery& query,
                           uint64_t* recurring, PeriodResult* found);

}  // namespace memoplan::shim
