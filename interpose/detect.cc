// Pass detection (detection.h): the newest profile records searched for a period (period.h) now
// and then; through irregular work between passes, or by call site alone when sizes vary; the
// found pass planned (finish_profile). Also what replay asks when its plan may not describe the
// pass: detect_again, and the irregular keys' per-pass counts.
#include "detection.h"
#include "engine.h"
#include "fallback.h"
#include "lifecycle.h"
#include "period.h"
#include "size_free_search.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// A period is taken for the pass only once it has held for this many allocations (and for three
// passes): a pass of identical layers is periodic with the layer until the pass ends, and 256
// allocations is longer than the layer runs of the transformers measured (docs/SHIM.md, "Pass
// detection": whole passes of 54 and about 112 requests);
// deeper stacks are caught by re-detection. A
// program whose pass is shorter profiles a few more passes (profiling costs little: see
// TagRegion's retained pages in engine.cc).
constexpr uint64_t kMinPeriodicRun = 256;

// Whether any of the dropped keys' counts per stretch between the anchor's last intervals + 1
// occurrences (in keys[0, n)) repeat as a pass's head or tail does under a layer's anchor
// (counts_repeat, over at most IrregularWork::kHistory stretches).
bool dropped_keys_repeat(const uint64_t* keys, uint64_t n, uint64_t anchor, uint64_t intervals,
                         const uint64_t* dropped, int dropped_count) {
  constexpr uint64_t kMaxStretches = IrregularWork::kHistory;
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
// search's records, *searched of them, and the dropped keys go to t.irregular.keys.
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
                      table_slots, t.irregular.keys, IrregularWork::kKeys, dropped);
    if (*m == 0 || *dropped == 0 || *dropped >= IrregularWork::kKeys) return {};
    // The keys a pass makes once (its head and tail) look irregular under a layer's anchor, and
    // their counts per stretch repeat with the number of layers; a truly irregular key's do not
    // repeat at any scale. (The JIT's first passes can hide that repetition: the replay checks it
    // again on the plan's passes, note_irregular_pass.)
    if (dropped_keys_repeat(saved, recurring, anchors[a], intervals, t.irregular.keys, *dropped)) {
      return {};
    }
    PeriodResult result = find_period(keys, begins, ends, *m, query, scratch);
    bool required_dropped = false;
    for (int d = 0; d < *dropped && query.required_key; ++d) {
      required_dropped |= t.irregular.keys[d] == query.required_key;
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
  t.irregular.count = dropped;
  t.irregular.passes = 0;
  for (auto& history : t.irregular.history) {
    for (uint8_t& count : history) count = 0;
  }
  return found;
}

// Whether the thread is building a structure rather than repeating a pass (Detection's comment):
// many profiled blocks made since profiling started are still alive, half the records or more.
bool accumulates(const ThreadState& t) {
  const uint64_t live = t.profiling.profile->live_blocks();
  const uint64_t grown = live > t.detection.live_at_start ? live - t.detection.live_at_start : 0;
  const uint64_t records = t.profiling.profile->log.count() - t.detection.first_record;
  return grown >= Detection::kPauseLiveBlocks && 2 * grown >= records;
}

// Whether a third or more of the pass's blocks outlive it (alive at its end, freed by another
// thread, or still alive): a structure being built, not a pass of temporaries. A pass's outputs
// escape too, but they are a few of its blocks (one of a model's hundreds).
bool mostly_outlives(const record::RecordLog& log, const uint64_t* pass, uint64_t period,
                     uint64_t cut_tick) {
  uint64_t outliving = 0;
  for (uint64_t i = 0; i < period; ++i) {
    outliving += log.at(pass[i]).end.load(std::memory_order_relaxed) > cut_tick;
  }
  return 3 * outliving >= period && outliving > 1;
}

// Profiling (re)starts at the log's next record: detection as at a thread's start (its pause
// count kept), over the records from here on, with nothing known of irregular work.
void restart_detection(ThreadState& t) {
  const record::RecordLog& log = t.profiling.profile->log;
  const uint32_t pauses = t.detection.pauses;
  t.detection = Detection{};
  t.detection.pauses = pauses;
  t.detection.first_record = log.count();
  t.detection.next = log.count() + 64;
  t.detection.live_at_start = t.profiling.profile->live_blocks();
  t.irregular.count = 0;
  enter_profiling(t);
}

// Re-detection's stages (detect_again): the pass must contain the missed key and be longer than
// the old plan, within a budget of records. Where the key stopped coming (unseen for half the
// budget: a request of the JIT's first passes, say), the pass is searched without it, still
// longer than the old plan and no multiple of it: gpt_decoder's plan of one 45-request layer
// missed such a key, and a search for any pass found a period of 18 inside the layer, then
// re-detected again, 12 passes of profiling where 4 do. Where the key still comes when the
// budget ends, the pass is shorter than thought: any period will do. A relaxed search that finds
// nothing within its own budget pauses profiling (pause_profiling): the plan may have been a
// start-up loop (LibTorch 1.13 loading a frozen bert_encoder: its type parser's 14 requests, 2,474
// times), whose rest the search excluded, and the passes come after it. False: no search now.
bool budget_left(ThreadState& t) {
  Detection& d = t.detection;
  const record::RecordLog& log = t.profiling.profile->log;
  const uint64_t count = log.count();
  if (d.required_key) {
    for (uint64_t i = d.scanned; i < count; ++i) {
      if (log.at(i).key == d.required_key) d.required_seen = i;
    }
    d.scanned = count;
    if (2 * (count - d.required_seen) > d.budget) {
      d.required_key = 0;
      d.relaxed = true;
      d.layer = d.min_period - 1;
      d.budget_from = count;
      return true;
    }
  }
  if (count - d.budget_from <= d.budget) return true;
  if (d.relaxed) {
    pause_profiling(t, "re-detection found no repeating pass");
  } else {
    d.required_key = 0;
    d.relaxed = true;
    d.min_period = 1;
    d.first_record = count;
    d.budget_from = count;
  }
  return false;
}

}  // namespace

// See Detection::paused_left: the thread runs unplanned, its records go back, and it profiles
// afresh after the pause (pause_counts_down).
void pause_profiling(ThreadState& t, const char* why) {
  Detection& d = t.detection;
  // From the second pause on, at least four times the attempt's records: profiling takes at most
  // a fifth of the requests. The first pause is the base alone: its attempt is mostly a start-up
  // (a model's load: gpt_decoder's 8,496 records paused it for 143 passes, longer than most
  // benchmarks run), and the passes after it are found in the next attempt.
  const uint64_t count = t.profiling.profile->log.count();  // 0 once a plan dropped the records
  const uint64_t attempt = count > d.first_record && d.pauses > 0 ? count - d.first_record : 0;
  const uint64_t doubled = uint64_t{4096} << (d.pauses < 8 ? d.pauses : 8);
  d.paused_left = doubled > 4 * attempt ? doubled : 4 * attempt;
  ++d.pauses;
  stats().profiling_pauses.fetch_add(1, std::memory_order_relaxed);
  if (global().options.verbose) {
    log_line("memoplan: thread %u: %s: profiling paused for %llu requests", t.index, why,
             static_cast<unsigned long long>(d.paused_left));
  }
  run_unplanned(t);
  release_records(t.profiling);
  give_back_kept_pages();
}

bool pause_counts_down(ThreadState& t) {
  Detection& d = t.detection;
  if (d.paused_left == 0 || --d.paused_left != 0) return false;
  // Pass marks that came meanwhile replace detection; they do not restart a thread that stopped.
  if (t.explicit_passes) return false;
  restart_detection(t);
  return true;
}

void profile_maybe_detect(ThreadState& t) {
  Global& g = global();
  const record::RecordLog& log = t.profiling.profile->log;
  if (t.explicit_passes || !g.options.detect || log.count() < t.detection.next) return;
  const uint64_t span = 3 * g.options.max_period;
  // Search often while the history is short, at most every 2,048 allocations once it is long. A
  // search costs a few operations per record searched; every sixteenth of the history keeps that
  // near ten per allocation, and a program that made thousands of requests at start-up (a model's
  // weights) still has its pass searched for within a pass or two of the third.
  uint64_t interval = log.count() / 16;
  interval = interval < 64 ? 64 : interval > 2048 ? 2048 : interval;
  t.detection.next = log.count() + interval;
  const uint64_t records = log.count();
  if (records > 8 * g.options.max_period ||
      records + record::RecordLog::kPerChunk >=
          record::RecordLog::kPerChunk * record::RecordLog::kChunks) {
    give_up_profiling(t,
                      "no repeating pass found (raise max_period, or mark passes with "
                      "memoplan_pass_begin/end)");
    return;
  }
  if (accumulates(t)) {
    pause_profiling(t, "most of the blocks it profiled stay alive (a structure being built)");
    return;
  }
  if (t.detection.required_key || t.detection.relaxed) {
    if (!budget_left(t)) return;
  }
  const uint64_t history = log.count() - t.detection.first_record;
  // Copy the newest records into columns for the search: keys, begins, ends, the search's scratch
  // (2n), the kept records' indices (n) and the key-count table (two values a slot).
  const uint64_t n = history < span ? history : span;
  const uint64_t first = log.count() - n;
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
    const record::Record& r = log.at(first + i);
    keys[i] = r.key;
    begins[i] = r.begin;
    const uint64_t end = r.end.load(std::memory_order_relaxed);
    ends[i] = end == record::kForeign ? record::kLive : end;
  }
  uint64_t recurring = keep_recurring(keys, begins, ends, n, kept, table, table_slots);
  PeriodQuery query;
  query.max_period = g.options.max_period;
  query.required_key = t.detection.required_key;
  query.min_period = t.detection.min_period;
  query.min_run = kMinPeriodicRun;
  query.not_multiple_of = t.detection.layer;
  PeriodResult found = find_period(keys, begins, ends, recurring, query, scratch);
  uint64_t searched = recurring;
  t.irregular.count = 0;
  if (!found.found && log.count() >= t.detection.next_irregular) {
    found = search_through_irregular_work(t, columns, n, recurring, query, &searched);
    if (!found.found) t.detection.next_irregular = log.count() + history / 2;
  }
  uint64_t* sizes = nullptr;  // a pass whose sizes vary: each slot's largest
  if (!found.found && !t.detection.required_key) {
    sizes = search_size_free(t, first, n, columns, table, table_slots, query, &recurring, &found);
    searched = recurring;
  }
  // Re-detection: the old slab goes once its last block is freed; until then, keep profiling.
  if (!found.found || !retire_replay(t)) {
    fallback::free(sizes);
    fallback::free(columns);
    return;
  }
  enter_profiling(t);
  stats().passes.fetch_add(3, std::memory_order_relaxed);  // the three passes the search saw
  // The pass: the recurring records [found.start, found.start + period), as log indices.
  uint64_t* pass = kept + found.start;
  for (uint64_t i = 0; i <= found.period; ++i) pass[i] += first;
  const uint64_t cut_tick = log.at(pass[found.period]).begin;
  if (!sizes && mostly_outlives(log, pass, found.period, cut_tick)) {
    fallback::free(columns);
    pause_profiling(
        t, "the pass it found has blocks that mostly outlive it (a structure being built)");
    return;
  }
  const uint32_t cursor = static_cast<uint32_t>((searched - found.start) % found.period);
  if (g.options.verbose) {
    log_line(
        "memoplan: thread %u: detected a pass of %llu allocations (records %llu-%llu of %llu, "
        "%llu of the %llu searched made once%s%s)",
        t.index, static_cast<unsigned long long>(found.period),
        static_cast<unsigned long long>(pass[0]),
        static_cast<unsigned long long>(pass[found.period]),
        static_cast<unsigned long long>(log.count()),
        static_cast<unsigned long long>(n - recurring), static_cast<unsigned long long>(n),
        t.detection.required_key ? ", containing the missed request" : "",
        sizes ? "; sizes vary: keyed by call site alone" : "");
  }
  const bool planned = finish_profile(t, pass[0], found.period, cut_tick, cursor, pass, sizes);
  fallback::free(sizes);
  fallback::free(columns);
  if (!planned) {
    give_up_profiling(t, "the detected pass could not be planned");
  }
}

void detect_again(ThreadState& t, uint64_t key, uint32_t slot_count) {
  restart_detection(t);
  t.detection.required_key = key;
  t.detection.min_period = uint64_t{slot_count} + 1;
  t.detection.budget = slot_count * 16 > 4096 ? slot_count * 16 : 4096;
  t.detection.budget_from = t.detection.first_record;
  t.detection.required_seen = t.detection.first_record;
  t.detection.scanned = t.detection.first_record;
}

// A key the search did not see (a response's rarest size) joins the left-out keys when it is
// missed between passes; in a pass, a miss is checked like any other.
bool irregular_miss(IrregularWork& w, uint64_t key, bool between_passes) {
  int i = 0;
  while (i < w.count && w.keys[i] != key) ++i;
  if (i == w.count) {
    if (i == 0 || i == IrregularWork::kKeys || !between_passes) return false;
    w.keys[w.count++] = key;
  }
  uint8_t& count = w.history[i][w.passes % IrregularWork::kHistory];
  if (count != 255) ++count;
  return true;
}

// Every 16 passes from the 32nd on, over the last 32-64 passes, a key whose misses per pass repeat
// (counts_repeat) is regular at a larger scale than the plan's pass (the plan is one layer of the
// pass, and the key belongs to its head or tail; or a key that varied in the first passes, as the
// JIT's do, and no longer does).
int irregular_pass_ended(IrregularWork& w) {
  constexpr uint32_t kHistory = IrregularWork::kHistory;
  const uint32_t passes = ++w.passes;
  for (int i = 0; i < w.count; ++i) w.history[i][passes % kHistory] = 0;
  if (passes < kHistory / 2 || passes % 16 != 0) return -1;
  const uint32_t counted = passes < kHistory ? passes : kHistory;
  uint8_t counts[kHistory];
  for (int i = 0; i < w.count; ++i) {
    for (uint32_t j = 0; j < counted; ++j)
      counts[j] = w.history[i][(passes - counted + j) % kHistory];
    if (counts_repeat(counts, counted)) return i;
  }
  return -1;
}

}  // namespace memoplan::shim
