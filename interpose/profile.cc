// Profiling: every tracked allocation gets its own slot of the tag region (record::TagRegion), so
// its free (from any thread, through any interior pointer) finds its record with a shift; records
// go to the thread's record::RecordLog. Costs two system calls per allocation, paid only in the
// passes being profiled.
#include <algorithm>
#include <cstring>

#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "period.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

void give_up_profiling(ThreadState& t, const char* why) {
  t.phase = Phase::kDisabled;
  stats().plan_failures.fetch_add(1, std::memory_order_relaxed);
  log_line("memoplan: thread %u runs unplanned: %s", t.index, why);
  // Its records are of no use any more.
  stats().released_bytes.fetch_add(give_back_records(*t.profile), std::memory_order_relaxed);
}

std::atomic<bool> budget_reported{false};

// A period is taken for the pass only once it has held for this many allocations (and for three
// passes): a pass of identical layers is periodic with the layer until the pass ends, and 256
// allocations is longer than the layer runs of the transformers measured (docs/SHIM.md, "Pass
// detection": whole passes of 54 and about 112 requests);
// deeper stacks are caught by re-detection. A
// program whose pass is shorter profiles a few more passes (profiling costs little: see
// TagRegion's retained pages in engine.cc).
constexpr uint64_t kMinPeriodicRun = 256;

}  // namespace

void* profile_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key, uint64_t site,
                    bool zero) {
  Global& g = global();
  if (size > g.tags.slot_bytes()) {
    stats().untracked_large.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  record::TagRegion::Miss miss;
  void* p = g.tags.take(size, zero, reinterpret_cast<uintptr_t>(t.profile),
                        t.profile->record_tag(t.profile->log.count()), &miss);
  if (!p) {
    // Untracked: the fallback serves it, and the plan will not know it (a not_planned fallback).
    // No free slot: 65,536 tracked blocks are alive.
    if (miss == record::TagRegion::Miss::kCommitFailed) {
      stats().tag_commit_failures.fetch_add(1, std::memory_order_relaxed);
    } else if (miss == record::TagRegion::Miss::kOverLimit) {
      stats().untracked_budget.fetch_add(1, std::memory_order_relaxed);
      if (!budget_reported.exchange(true, std::memory_order_relaxed)) {
        log_line(
            "memoplan: %u profiled blocks alive, the tag budget (vm.max_map_count / 8): "
            "more go untracked, unplanned",
            g.tags.live_limit());
      }
    }
    return nullptr;
  }
  record::RecordLog::Full full = record::RecordLog::Full::kNo;
  if (t.profile->log.append(key, site, size, alignment, t.index, &full) ==
      record::RecordLog::kNone) {
    g.tags.give_back(p);
    if (full == record::RecordLog::Full::kOutOfMemory) {
      stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
      give_up_profiling(t, "out of memory for its profile records");
    } else {
      give_up_profiling(t, "the profile outgrew its record space");
    }
    return nullptr;
  }
  t.profile->refs.fetch_add(1, std::memory_order_relaxed);  // the block's: its free drops it
  stats().profiled.fetch_add(1, std::memory_order_relaxed);
  profile_maybe_detect(t);
  return p;
}

void profile_free(void* p) {
  Global& g = global();
  const record::TagRegion::Owner owner = g.tags.owner_of(p);
  Profile* profile = reinterpret_cast<Profile*>(owner.owner);
  const uint32_t generation = static_cast<uint32_t>(owner.record >> 32);
  const uint64_t index = owner.record & 0xffffffffu;
  if (tls_state && profile->recorder.load(std::memory_order_relaxed) == tls_state) {
    // The recorder itself: nobody else gives its records back.
    if (generation == profile->generation.load(std::memory_order_relaxed)) {
      profile->log.close(index);
    }
  } else {
    // Either this free sees the new generation (and writes nothing), or give_back_records sees
    // it closing (and waits): both sides are sequentially consistent.
    profile->closing.fetch_add(1, std::memory_order_seq_cst);
    if (generation == profile->generation.load(std::memory_order_seq_cst)) {
      profile->log.close_foreign(index);  // not on the recorder's clock: never planned
    }
    profile->closing.fetch_sub(1, std::memory_order_release);
  }
  g.tags.give_back(p);
  release_profile(profile);  // the block's reference
}

uint64_t give_back_records(Profile& profile) {
  if (profile.log.count() == 0 && profile.log.footprint_bytes() == 0) return 0;
  profile.generation.fetch_add(1, std::memory_order_seq_cst);
  while (profile.closing.load(std::memory_order_seq_cst) != 0) {  // a few instructions each
  }
  std::atomic_thread_fence(std::memory_order_acquire);  // after the closers' last writes
  const uint64_t bytes = profile.log.footprint_bytes();
  profile.log.clear();
  return bytes;
}

void release_profile(Profile* profile) {
  if (profile->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  profile->~Profile();  // gives the records back
  fallback::free(profile);
}

size_t profile_usable_size(void* p) { return global().tags.owner_of(p).bytes; }

namespace {

uint64_t mix_live(uint64_t site, uint64_t live) {
  return (site ^ (live * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
}

// When the exact search finds nothing: the same records by call site alone (Record::site). A pass
// whose input shapes vary from request to request makes the same requests from the same call
// sites every pass, with other sizes. Taken only if the call sites repeat for three whole periods
// and some request's size differs between periods (else the exact search would have found it:
// whatever repeats here is not a pass of varying sizes). Returns each slot's largest size over
// the periodic records (fallback::malloc, found->period values) and updates *found and
// *recurring, or returns null and leaves them.
uint64_t* search_size_free(ThreadState& t, uint64_t first, uint64_t n, uint64_t* columns,
                           uint64_t* table, uint64_t table_slots, const PeriodQuery& query,
                           uint64_t* recurring, PeriodResult* found) {
  uint64_t *keys = columns, *begins = columns + n, *ends = columns + 2 * n;
  uint64_t *scratch = columns + 3 * n, *kept = columns + 5 * n;
  uint64_t* sites = scratch;  // 2n of scratch: sites first, then the search's own use
  for (uint64_t i = 0; i < n; ++i) sites[i] = t.profile->log.at(first + i).site;
  // The exact search compacted the columns: load them again (keep_recurring compacts its input).
  // Call sites alone repeat too easily (a Python program's tensors all come through the same few
  // frames): each is searched with the number of blocks alive when it was made (among the
  // searched records), which a pass of other sizes repeats exactly: it follows from the order of
  // the pass's allocations and frees, not from their sizes. Replay then matches by call site, in
  // pass order.
  uint64_t* sorted_ends = columns + 5 * n;  // kept[]'s space until keep_recurring fills it
  for (uint64_t i = 0; i < n; ++i) {
    const record::Record& r = t.profile->log.at(first + i);
    begins[i] = r.begin;
    const uint64_t end = r.end.load(std::memory_order_relaxed);
    ends[i] = end == record::kForeign ? record::kLive : end;
    sorted_ends[i] = ends[i];
  }
  std::sort(sorted_ends, sorted_ends + n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t ended = static_cast<uint64_t>(
        std::upper_bound(sorted_ends, sorted_ends + n, begins[i]) - sorted_ends);
    keys[i] = mix_live(sites[i], i - (ended < i ? ended : i));
  }
  const uint64_t m = keep_recurring(keys, begins, ends, n, kept, table, table_slots);
  const PeriodResult sf = find_period(keys, begins, ends, m, query, scratch);
  if (!sf.found || sf.run < 3 * sf.period) return nullptr;
  const uint64_t p = sf.period;
  auto size_of = [&](uint64_t j) { return t.profile->log.at(first + kept[j]).size; };
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

// Whether any of the dropped keys' counts per stretch between the anchor's last intervals + 1
// occurrences (in keys[0, n)) repeat as a pass's head or tail does under a layer's anchor
// (counts_repeat, over at most kIrregularHistory stretches).
bool dropped_keys_repeat(const uint64_t* keys, uint64_t n, uint64_t anchor, uint64_t intervals,
                         const uint64_t* dropped, int dropped_count) {
  constexpr uint64_t kMaxStretches = ThreadState::kIrregularHistory;
  uint64_t start = n, seen = 0;
  for (uint64_t i = n; i-- > 0 && seen < intervals + 1;) {
    if (keys[i] == anchor) {
      start = i;
      ++seen;
    }
  }
  const uint64_t stretches = intervals < kMaxStretches ? intervals : kMaxStretches;
  for (int d = 0; d < dropped_count; ++d) {
    uint8_t counts[kMaxStretches] = {};
    uint64_t stretch = 0;
    for (uint64_t i = start; i < n && stretch < stretches; ++i) {
      if (keys[i] == anchor && i != start) ++stretch;
      if (stretch < stretches && keys[i] == dropped[d] && counts[stretch] != 255) {
        ++counts[stretch];
      }
    }
    if (counts_repeat(counts, static_cast<uint32_t>(stretches))) return true;
  }
  return false;
}

// When the exact search fails: the same records without the requests that recur irregularly
// between passes (keep_regular), anchored in turn on the distinct keys among the newest records
// (the pass makes some of them once). Of the anchors under which a pass is found, the longest pass
// wins: an anchor a layer makes cuts the pass into layers (the head and tail then look irregular),
// and where the whole pass is found too, it is longer. The columns' first 6n values are the exact
// search's (keys, begins, ends, scratch, kept); the recurring records are copied to the four
// columns after them and restored before each try. On success the compacted columns hold the
// search's records, *searched of them, and the dropped keys go to t.irregular.
PeriodResult search_through_irregular_work(ThreadState& t, uint64_t* columns, uint64_t n,
                                           uint64_t recurring, const PeriodQuery& query,
                                           uint64_t* searched) {
  uint64_t *keys = columns, *begins = columns + n, *ends = columns + 2 * n;
  uint64_t *scratch = columns + 3 * n, *kept = columns + 5 * n, *table = columns + 10 * n;
  uint64_t* saved = columns + 6 * n;  // keys, begins, ends, kept
  uint64_t table_slots = 16;
  while (table_slots < 2 * n) table_slots *= 2;
  for (uint64_t i = 0; i < recurring; ++i) {
    saved[i] = keys[i];
    saved[n + i] = begins[i];
    saved[2 * n + i] = ends[i];
    saved[3 * n + i] = kept[i];
  }
  // Anchors: of the distinct keys among the newest records, the rarest ones that occur 17 times
  // or more (a key the pass makes once is as rare as a pass; a layer's keys recur with every layer,
  // and a layer may have more distinct keys than there are anchors). The counts are
  // keep_recurring's, still in `table` (two values a slot), read before keep_regular reuses it.
  constexpr int kAnchors = 8;
  constexpr uint64_t kMinOccurrences = 17, kAnchorScan = 8192;
  uint64_t anchors[kAnchors], anchor_counts[kAnchors];
  int anchor_count = 0;
  const uint64_t mask = table_slots - 1;
  auto count_of = [&](uint64_t key) {
    uint64_t slot = (key * 0x9e3779b97f4a7c15ull) >> 20 & mask;
    while (table[2 * slot + 1] != 0 && table[2 * slot] != key) slot = (slot + 1) & mask;
    return table[2 * slot + 1];
  };
  for (uint64_t i = recurring; i-- > 0 && recurring - i <= kAnchorScan;) {
    const uint64_t key = saved[i];
    bool seen = false;
    for (int a = 0; a < anchor_count && !seen; ++a) seen = anchors[a] == key;
    if (seen) continue;
    const uint64_t count = count_of(key);
    if (count < kMinOccurrences) continue;
    if (anchor_count == kAnchors && count >= anchor_counts[kAnchors - 1]) continue;
    int at = anchor_count < kAnchors ? anchor_count++ : kAnchors - 1;  // drop the most frequent
    for (; at > 0 && anchor_counts[at - 1] > count; --at) {
      anchors[at] = anchors[at - 1];
      anchor_counts[at] = anchor_counts[at - 1];
    }
    anchors[at] = key;
    anchor_counts[at] = count;
  }
  // Compacts the columns to the records regular under anchor a and searches them.
  auto try_anchor = [&](int a, uint64_t* m, int* dropped) -> PeriodResult {
    for (uint64_t i = 0; i < recurring; ++i) {
      keys[i] = saved[i];
      begins[i] = saved[n + i];
      ends[i] = saved[2 * n + i];
      kept[i] = i;  // positions in saved, for the check
    }
    // keep_recurring's count of the anchor is its count among the recurring records.
    const uint64_t intervals = anchor_counts[a] - 1 < 32 ? anchor_counts[a] - 1 : 32;
    *m = keep_regular(keys, begins, ends, kept, recurring, anchors[a], intervals, table,
                      table_slots, t.irregular, ThreadState::kIrregularKeys, dropped);
    if (*m == 0 || *dropped == 0 || *dropped >= ThreadState::kIrregularKeys) return {};
    // The keys a pass makes once (its head and tail) look irregular under a layer's anchor, and
    // their counts per stretch repeat with the number of layers; a truly irregular key's do not
    // repeat at any scale. (The JIT's first passes can hide that repetition: the replay checks it
    // again on the plan's passes, note_irregular_pass.)
    if (dropped_keys_repeat(saved, recurring, anchors[a], intervals, t.irregular, *dropped)) {
      return {};
    }
    PeriodResult result = find_period(keys, begins, ends, *m, query, scratch);
    bool required_dropped = false;
    for (int d = 0; d < *dropped && query.required_key; ++d) {
      required_dropped |= t.irregular[d] == query.required_key;
    }
    if (!result.found && required_dropped) {
      // The request the old plan missed is itself irregular work: any pass longer than the old
      // plan will do.
      PeriodQuery longer = query;
      longer.required_key = 0;
      result = find_period(keys, begins, ends, *m, longer, scratch);
    }
    return result;
  };
  int best = -1;
  uint64_t best_period = 0;
  for (int a = 0; a < anchor_count; ++a) {
    uint64_t m = 0;
    int dropped = 0;
    const PeriodResult candidate = try_anchor(a, &m, &dropped);
    if (candidate.found && candidate.period > best_period) {
      best = a;
      best_period = candidate.period;
    }
  }
  if (best < 0) return {};
  uint64_t m = 0;
  int dropped = 0;
  const PeriodResult found = try_anchor(best, &m, &dropped);
  for (uint64_t i = 0; i < m; ++i) kept[i] = saved[3 * n + kept[i]];
  *searched = m;
  t.irregular_count = dropped;
  t.irregular_passes = 0;
  for (auto& history : t.irregular_history) {
    for (uint8_t& count : history) count = 0;
  }
  return found;
}

}  // namespace

void profile_maybe_detect(ThreadState& t) {
  Global& g = global();
  if (t.explicit_passes || !g.options.detect || t.profile->log.count() < t.next_detection) return;
  const uint64_t span = 3 * g.options.max_period;
  // Search often while the history is short, at most every 2,048 allocations once it is long. A
  // search costs a few operations per record searched; every sixteenth of the history keeps that
  // near ten per allocation, and a program that made thousands of requests at start-up (a model's
  // weights) still has its pass searched for within a pass or two of the third.
  uint64_t interval = t.profile->log.count() / 16;
  interval = interval < 64 ? 64 : interval > 2048 ? 2048 : interval;
  t.next_detection = t.profile->log.count() + interval;
  const uint64_t records = t.profile->log.count();
  if (records > 8 * g.options.max_period ||
      records + record::RecordLog::kPerChunk >=
          record::RecordLog::kPerChunk * record::RecordLog::kChunks) {
    give_up_profiling(t,
                      "no repeating pass found (raise max_period, or mark passes with "
                      "memoplan_pass_begin/end)");
    return;
  }
  const uint64_t history = t.profile->log.count() - t.detect_first_record;
  if ((t.required_key || t.redetect_relaxed) && history > t.redetect_budget) {
    // The request the old plan missed never recurred inside a repeating pass (a one-off): search
    // without it once more, then stop profiling rather than profile (and fault) forever.
    if (!t.redetect_relaxed) {
      t.required_key = 0;
      t.redetect_relaxed = true;
      t.detect_first_record = t.profile->log.count();
    } else {
      give_up_profiling(t, "re-detection found no repeating pass");
    }
    return;
  }
  // Copy the newest records into columns for the search: keys, begins, ends, the search's scratch
  // (2n), the kept records' indices (n) and the key-count table (two values a slot).
  const uint64_t n = history < span ? history : span;
  const uint64_t first = t.profile->log.count() - n;
  uint64_t table_slots = 16;
  while (table_slots < 2 * n) table_slots *= 2;
  // Four more columns keep the recurring records for the search through irregular work, whose
  // table takes four values a slot.
  uint64_t* columns =
      static_cast<uint64_t*>(fallback::malloc((10 * n + 4 * table_slots) * sizeof(uint64_t)));
  if (!columns) {  // searched again at the next interval
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint64_t *keys = columns, *begins = columns + n, *ends = columns + 2 * n;
  uint64_t *scratch = columns + 3 * n, *kept = columns + 5 * n, *table = columns + 10 * n;
  for (uint64_t i = 0; i < n; ++i) {
    const record::Record& r = t.profile->log.at(first + i);
    keys[i] = r.key;
    begins[i] = r.begin;
    const uint64_t end = r.end.load(std::memory_order_relaxed);
    ends[i] = end == record::kForeign ? record::kLive : end;
  }
  uint64_t recurring = keep_recurring(keys, begins, ends, n, kept, table, table_slots);
  PeriodQuery query;
  query.max_period = g.options.max_period;
  query.required_key = t.required_key;
  query.min_period = t.required_key ? t.redetect_min_period : 1;
  query.min_run = kMinPeriodicRun;
  PeriodResult found = find_period(keys, begins, ends, recurring, query, scratch);
  uint64_t searched = recurring;
  t.irregular_count = 0;
  if (!found.found) {
    found = search_through_irregular_work(t, columns, n, recurring, query, &searched);
  }
  uint64_t* sizes = nullptr;  // a pass whose sizes vary: each slot's largest
  if (!found.found && !t.required_key) {
    sizes = search_size_free(t, first, n, columns, table, table_slots, query, &recurring, &found);
    searched = recurring;
  }
  // Re-detection: the old slab goes once its last block is freed; until then, keep profiling.
  if (!found.found || !retire_replay(t)) {
    fallback::free(sizes);
    fallback::free(columns);
    return;
  }
  t.phase = Phase::kProfiling;
  stats().passes.fetch_add(3, std::memory_order_relaxed);  // the three passes the search saw
  // The pass: the recurring records [found.start, found.start + period), as log indices.
  uint64_t* pass = kept + found.start;
  for (uint64_t i = 0; i <= found.period; ++i) pass[i] += first;
  const uint64_t cut_tick = t.profile->log.at(pass[found.period]).begin;
  const uint32_t cursor = static_cast<uint32_t>((searched - found.start) % found.period);
  if (g.options.verbose) {
    log_line(
        "memoplan: thread %u: detected a pass of %llu allocations (records %llu-%llu of %llu, "
        "%llu of the %llu searched made once%s%s)",
        t.index, static_cast<unsigned long long>(found.period),
        static_cast<unsigned long long>(pass[0]),
        static_cast<unsigned long long>(pass[found.period]),
        static_cast<unsigned long long>(t.profile->log.count()),
        static_cast<unsigned long long>(n - recurring), static_cast<unsigned long long>(n),
        t.required_key ? ", containing the missed request" : "",
        sizes ? "; sizes vary: keyed by call site alone" : "");
  }
  const bool planned = finish_profile(t, pass[0], found.period, cut_tick, cursor, pass, sizes);
  fallback::free(sizes);
  fallback::free(columns);
  if (!planned) {
    give_up_profiling(t, "the detected pass could not be planned");
  }
}

}  // namespace memoplan::shim
