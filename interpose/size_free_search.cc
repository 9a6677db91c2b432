// The size-free pass search (size_free_search.h).
#include "size_free_search.h"

#include "fallback.h"
#include "state.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

uint64_t mix_live(uint64_t site, uint64_t live) {
  return (site ^ (live * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
}

}  // namespace

// The frees are marked on a bitmap of the log's ticks from the first record's and counted in one
// sweep with the allocations. (A sort of the ends did this: cc1plus, whose many blocks stay alive,
// spent 0.6% of its time in it.)
bool alive_at_each(const uint64_t* begins, const uint64_t* ends, uint64_t n, uint64_t now,
                   uint64_t* alive) {
  if (n == 0) return true;
  const uint64_t base = begins[0];
  auto* freed = static_cast<uint64_t*>(fallback::calloc((now - base) / 64 + 1, sizeof(uint64_t)));
  if (!freed) return false;
  for (uint64_t j = 0; j < n; ++j) {
    if (ends[j] >= now || ends[j] < base) continue;  // alive (kLive); never before base
    const uint64_t at = ends[j] - base;
    freed[at / 64] |= uint64_t{1} << (at % 64);
  }
  uint64_t word = 0, ended = 0;  // the frees in the words before `word`
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t at = begins[i] - base;
    for (; word < at / 64; ++word)
      ended += static_cast<uint64_t>(__builtin_popcountll(freed[word]));
    const uint64_t below = freed[word] & ((uint64_t{1} << (at % 64)) - 1);
    const uint64_t freed_before = ended + static_cast<uint64_t>(__builtin_popcountll(below));
    alive[i] = i - (freed_before < i ? freed_before : i);
  }
  fallback::free(freed);
  return true;
}

uint64_t* search_size_free(ThreadState& t, uint64_t first, uint64_t n, uint64_t* columns,
                           uint64_t* table, uint64_t table_slots, const PeriodQuery& query,
                           uint64_t* recurring, PeriodResult* found) {
  const record::RecordLog& log = t.profiling.profile->log;
  uint64_t *keys = columns, *begins = columns + n, *ends = columns + 2 * n;
  uint64_t *scratch = columns + 3 * n, *kept = columns + 5 * n;
  uint64_t* sites = scratch;  // 2n of scratch: sites first, then the search's own use
  for (uint64_t i = 0; i < n; ++i) sites[i] = log.at(first + i).site;
  // The exact search compacted the columns: load them again (keep_recurring compacts its input).
  // Call sites alone repeat too easily (a Python program's tensors all come through the same few
  // frames): each is searched with the number of blocks alive when it was made (among the
  // searched records), which a pass of other sizes repeats exactly: it follows from the order of
  // the pass's allocations and frees, not from their sizes. Replay then matches by call site, in
  // pass order.
  uint64_t* alive = columns + 5 * n;  // kept[]'s space until keep_recurring fills it
  for (uint64_t i = 0; i < n; ++i) {
    const record::Record& r = log.at(first + i);
    begins[i] = r.begin;
    const uint64_t end = r.end.load(std::memory_order_relaxed);
    ends[i] = end == record::kForeign ? record::kLive : end;
  }
  if (!alive_at_each(begins, ends, n, log.tick(), alive)) {
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  for (uint64_t i = 0; i < n; ++i) keys[i] = mix_live(sites[i], alive[i]);
  const uint64_t m = keep_recurring(keys, begins, ends, n, kept, table, table_slots);
  const PeriodResult sf = find_period(keys, begins, ends, m, query, scratch);
  if (!sf.found || sf.run < 3 * sf.period) return nullptr;
  const uint64_t p = sf.period;
  auto size_of = [&](uint64_t j) { return log.at(first + kept[j]).size; };
  bool varies = false;
  for (uint64_t i = sf.start; i < sf.start + p && !varies; ++i)
    varies = size_of(i) != size_of(i - p);
  if (!varies) return nullptr;
  auto* sizes = static_cast<uint64_t*>(fallback::malloc(p * sizeof(uint64_t)));
  if (!sizes) return nullptr;
  const uint64_t lowest = m - sf.run;  // the periodic records: [m - run, m)
  for (uint64_t i = 0; i < p; ++i) {
    uint64_t j = sf.start + i, largest = 0;
    while (j >= lowest + p) j -= p;
    for (; j < m; j += p) largest = size_of(j) > largest ? size_of(j) : largest;
    sizes[i] = largest;
  }
  *found = sf;
  *recurring = m;
  return sizes;
}

}  // namespace memoplan::shim
