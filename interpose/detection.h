// Pass detection (detect:true): how a thread without pass marks finds its pass in its profile
// records, searches again when a plan turns out not to describe the pass (re-detection), and keeps
// the keys a plan found through irregular work leaves out. The thread's Detection and
// IrregularWork are detect.cc's; replay asks it through the functions below.
#pragma once

#include <cstdint>

namespace memoplan::shim {

struct ThreadState;

// Where the thread stands in its search.
struct Detection {
  uint64_t next = 64;         // record count of the next period search
  uint64_t first_record = 0;  // searches records from here on
  uint64_t required_key = 0;  // re-detection: the pass must contain this key (0: none)
  uint64_t min_period = 1;    // re-detection: and be longer than the plan that missed it
  uint64_t budget = 0;        // re-detection: records to find the pass in, then relax / stop
  uint64_t budget_from = 0;   // re-detection: the record count the budget counts from
  bool relaxed = false;       // re-detection: already searching without required_key
  // Re-detection: where required_key was last seen among the records (scanned up to `scanned`).
  // A key the program stopped making (one of the JIT's first passes) is in no pass to be found:
  // unseen for half the budget, the search goes on without it, still longer than the old plan
  // and no whole number of its periods (`layer`: the old plan was one of the pass's layers).
  uint64_t required_seen = 0;
  uint64_t scanned = 0;
  uint64_t layer = 0;
  // The search through irregular work (eight anchors, each a pass over the history) runs again
  // only from this record count on: after one that found nothing, once the history is half as
  // long again. A program with no pass to find (sqlite3, a compiler) searched it at every search,
  // which cost it 16% (docs/results/SHIM.md); a pass with irregular work around it is found
  // within half a history more.
  uint64_t next_irregular = 0;
  // A thread building a structure (sqlite3's pages of an in-memory database, a parser's tree) has
  // no pass to plan: a slab cannot reuse memory that stays alive, and each profiled block that
  // stays costs a tag slot of its own (a mapping, page faults, a page-rounded block, and pages
  // spread 256 MiB apart that the program then walks: sqlite3 ran 13% slower). Profiling pauses
  // when a detected pass's blocks mostly outlive it, or when, since profiling (re)started,
  // kPauseLiveBlocks or more profiled blocks stayed alive and they are half the records or more
  // (a model's weights, made on the thread that runs it, are a few hundred; `import torch`
  // and torchvision on PyTorch 2.6 leave over a thousand blocks of 4 KiB or more alive). The thread
  // then runs unplanned for `paused_left` requests of min_size or more (4,096, doubling at each
  // pause up to 2^20, and from the second pause on at least four times the records of the attempt
  // that paused) and profiles afresh: a later phase (the inference loop after a load) is still
  // found, a pause later.
  static constexpr uint64_t kPauseLiveBlocks = 4096;
  uint64_t live_at_start = 0;  // the profile's live blocks when profiling (re)started
  uint64_t paused_left = 0;
  uint32_t pauses = 0;
};

// Keys the plan left out as irregular work between passes (keep_regular): their misses in replay
// are expected and do not start a re-detection while they stay irregular. Each key's misses are
// counted per replayed pass (a ring of the last kHistory); a key whose counts repeat
// (counts_repeat: a pass's head or tail under a plan of one layer, missed every L-th pass) is not
// irregular: the thread detects again, requiring it.
struct IrregularWork {
  static constexpr int kKeys = 16;
  static constexpr uint32_t kHistory = 64;
  int count = 0;  // nonzero: the plan came from the search through irregular work
  uint64_t keys[kKeys] = {};
  // Passes counted since the plan; the current one's counts are at passes % kHistory.
  uint32_t passes = 0;
  uint8_t history[kKeys][kHistory] = {};  // misses per pass, capped
};

// After each profiled allocation: searches the records for the pass now and then and, when one is
// found, plans it (finish_profile); gives up profiling when none can be found.
void profile_maybe_detect(ThreadState& t);

// Profiling pauses (Detection::paused_left; `why` for the verbose log): the thread runs unplanned,
// its records go back, and it profiles afresh after the pause.
void pause_profiling(ThreadState& t, const char* why);

// An unplanned thread's request of min_size or more while profiling is paused: counts it down and,
// at the end of the pause, starts profiling afresh (true: this request is the first profiled).
bool pause_counts_down(ThreadState& t);

// The plan of `slot_count` slots does not describe the pass: the thread profiles afresh, its next
// plan required to contain `key` and be longer.
void detect_again(ThreadState& t, uint64_t key, uint32_t slot_count);

// A request a plan found through irregular work did not know: true when it is irregular work
// (one of the plan's left-out keys, or a new one missed between passes: `between_passes`), counted
// for this pass; false when the re-check must look at it like any other.
bool irregular_miss(IrregularWork& w, uint64_t key, bool between_passes);

// At a pass end while the plan leaves keys out as irregular: starts the next pass's counts, and
// returns the index in w.keys of a key whose misses per pass repeat (it is regular at a larger
// scale: the thread must detect again, requiring it), or -1.
int irregular_pass_ended(IrregularWork& w);

}  // namespace memoplan::shim
