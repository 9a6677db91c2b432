#include "period.h"

#include <algorithm>

namespace memoplan::shim {
namespace {

uint64_t periodic_suffix(const uint64_t* keys, uint64_t n, uint64_t period) {
  uint64_t run = 0;
  for (uint64_t i = n - 1; i >= period && keys[i] == keys[i - period]; --i) ++run;
  return run;
}

}  // namespace

PeriodResult find_period(const uint64_t* keys, const uint64_t* begins, const uint64_t* ends,
                         uint64_t n, const PeriodQuery& query, uint64_t* scratch) {
  PeriodResult result;
  if (n < 3) return result;
  const uint64_t last = n - 1, max_period = query.max_period, required_key = query.required_key;
  uint64_t shortest_allowed = query.min_period ? query.min_period : 1;
  if (required_key) {
    uint64_t newest = n;
    for (uint64_t i = n; i-- > 0 && newest == n;) {
      if (keys[i] == required_key) newest = i;
    }
    if (newest == n) return result;
    if (n - newest > shortest_allowed) shortest_allowed = n - newest;
  }
  // Candidates: every distance back to an earlier occurrence of the newest key within max_period,
  // shortest first. The pass period is always among them (the newest request recurs one pass
  // back), however often its key recurs inside the pass; a capped list of the nearest ones missed
  // it whenever the newest request was a key repeated in every layer. A wrong candidate's
  // periodic suffix ends within a few records; the scan stops once no longer candidate can win
  // (a run of two periods needs three passes of records, and a candidate's run is at most n
  // minus its period).
  // A history built to defeat this (one key nearly everywhere, broken far apart) would make every
  // distance a candidate with a long run: the records compared are capped at 32 per record.
  const uint64_t floor = last > max_period ? last - max_period : 0;
  const uint64_t budget = 32 * n + (uint64_t{1} << 20);
  uint64_t best_period = 0, best_run = 0, compared = 0;
  for (uint64_t j = last; j-- > floor;) {
    const uint64_t period = last - j;
    if (3 * period > n || n - period <= best_run) break;
    if (keys[j] != keys[last] || period < shortest_allowed) continue;
    if (query.not_multiple_of && period % query.not_multiple_of == 0) continue;
    const uint64_t run = periodic_suffix(keys, n, period);
    if ((compared += run + 1) > budget) break;
    if (run > best_run) {  // ties go to the shorter: found first
      best_run = run;
      best_period = period;
    }
  }
  if (best_period == 0 || best_run < 2 * best_period || best_run < query.min_run) return result;

  // A period none of whose blocks has been freed two periods later is accumulation, not a pass: a
  // program filling a table at start-up (LibTorch 2.6's operator registration makes hundreds of
  // equal requests of 4 KiB or more, kept for good). Planned, its blocks would only collide with
  // their own earlier copies, still alive. (Two periods: a pass's output may live until the next
  // pass has made its own; the three periods are there, 3 * period <= n.)
  const uint64_t p = best_period, window = n - 2 * p;
  bool freed = false;
  for (uint64_t r = n - 3 * p; r < window && !freed; ++r) freed = ends[r] <= begins[n - 1];
  if (!freed) return result;

  // Live records at each position of the newest period, counting records of the last two periods.
  uint64_t* sorted_ends = scratch;
  for (uint64_t r = 0; r < 2 * p; ++r) sorted_ends[r] = ends[window + r];
  std::sort(sorted_ends, sorted_ends + 2 * p);
  uint64_t best_position = n - p, fewest_live = ~uint64_t{0};
  for (uint64_t position = n - p; position < n; ++position) {
    const uint64_t started = position - window;
    const uint64_t ended = static_cast<uint64_t>(
        std::upper_bound(sorted_ends, sorted_ends + 2 * p, begins[position]) - sorted_ends);
    const uint64_t live = started - std::min(started, ended);
    if (live < fewest_live) {
      fewest_live = live;
      best_position = position;
    }
  }
  result.found = true;
  result.run = best_run;
  result.period = p;
  result.start = best_position - p;
  return result;
}

uint64_t keep_recurring(uint64_t* keys, uint64_t* begins, uint64_t* ends, uint64_t n,
                        uint64_t* kept, uint64_t* table, uint64_t table_slots) {
  // Open addressing: (key, count) pairs, count 0 marks an empty slot.
  for (uint64_t i = 0; i < 2 * table_slots; ++i) table[i] = 0;
  const uint64_t mask = table_slots - 1;
  auto find = [&](uint64_t key) -> uint64_t* {
    uint64_t slot = (key * 0x9e3779b97f4a7c15ull) >> 20 & mask;
    while (table[2 * slot + 1] != 0 && table[2 * slot] != key) slot = (slot + 1) & mask;
    return table + 2 * slot;
  };
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t* entry = find(keys[i]);
    entry[0] = keys[i];
    ++entry[1];
  }
  uint64_t m = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (find(keys[i])[1] < 2) continue;
    keys[m] = keys[i];
    begins[m] = begins[i];
    ends[m] = ends[i];
    kept[m++] = i;
  }
  return m;
}

uint64_t keep_regular(uint64_t* keys, uint64_t* begins, uint64_t* ends, uint64_t* kept, uint64_t n,
                      uint64_t anchor, uint64_t intervals, uint64_t* table, uint64_t table_slots,
                      uint64_t* dropped, int max_dropped, int* dropped_count) {
  *dropped_count = 0;
  if (intervals == 0) return 0;
  // The anchor's last intervals + 1 occurrences: stretches [start, ...) up to the newest one.
  uint64_t seen = 0, start = n;
  for (uint64_t i = n; i-- > 0;) {
    if (keys[i] != anchor) continue;
    start = i;
    if (++seen == intervals + 1) break;
  }
  if (seen < intervals + 1) return 0;
  // Per slot: key, its count in the first stretch, (the last stretch it was seen in << 32 | its
  // count there), and whether it is irregular: counted differently from the first stretch, or
  // absent from one. A key's previous stretch is settled when it is seen in a later one, the last
  // one in the check below: one look per record, however many stretches and slots.
  for (uint64_t i = 0; i < 4 * table_slots; ++i) table[i] = 0;
  const uint64_t mask = table_slots - 1;
  auto find = [&](uint64_t key) -> uint64_t* {
    uint64_t slot = (key * 0x9e3779b97f4a7c15ull) >> 20 & mask;
    while (table[4 * slot + 2] != 0 && table[4 * slot] != key) slot = (slot + 1) & mask;
    return table + 4 * slot;
  };
  uint64_t stretch = 0;
  for (uint64_t i = start; i < n; ++i) {
    if (keys[i] == anchor && i != start) {
      if (stretch + 1 == intervals) break;  // the newest anchor ends the last stretch
      ++stretch;
    }
    uint64_t* e = find(keys[i]);
    const uint64_t seen_in = e[2] >> 32, count = e[2] & 0xffffffffu;
    if (e[2] == 0) {
      e[0] = keys[i];
      if (stretch != 0) e[3] = 1;  // absent from the first stretch
    } else if (seen_in != stretch) {
      if (seen_in == 0) {
        e[1] = count;
      } else if (count != e[1]) {
        e[3] = 1;
      }
      if (stretch != seen_in + 1) e[3] = 1;  // absent from the stretches between
    }
    e[2] = stretch << 32 | (seen_in == stretch && e[2] != 0 ? count + 1 : 1);
  }
  // Regular: seen in every stretch (the last one included) as often as in the first.
  auto regular = [&](const uint64_t* e, uint64_t key) {
    if (e[2] == 0 || e[0] != key || e[3] != 0 || (e[2] >> 32) + 1 != intervals) return false;
    return intervals == 1 || (e[2] & 0xffffffffu) == e[1];
  };
  uint64_t m = 0;
  for (uint64_t i = start; i < n; ++i) {
    if (!regular(find(keys[i]), keys[i])) {
      bool known = false;
      for (int d = 0; d < *dropped_count && !known; ++d) known = dropped[d] == keys[i];
      if (!known && *dropped_count < max_dropped) dropped[(*dropped_count)++] = keys[i];
      continue;
    }
    keys[m] = keys[i];
    begins[m] = begins[i];
    ends[m] = ends[i];
    kept[m++] = kept[i];
  }
  return m;
}

bool counts_repeat(const uint8_t* counts, uint32_t n) {
  bool any = false;
  for (uint32_t j = 0; j < n && !any; ++j) any = counts[j] != 0;
  if (!any) return false;
  for (uint32_t q = 1; q <= n / 2; ++q) {
    bool periodic = true;
    for (uint32_t j = q; j < n && periodic; ++j) periodic = counts[j] == counts[j - q];
    if (!periodic) continue;
    // The shortest period: one pass in it misses the key (a multiple of it has more).
    uint32_t missing = 0;
    for (uint32_t j = 0; j < q; ++j) missing += counts[j] != 0;
    return missing == 1;
  }
  return false;
}

}  // namespace memoplan::shim
