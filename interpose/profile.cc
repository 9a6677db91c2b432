// Profiling: every tracked allocation gets its own slot of the tag region (record::TagRegion), so
// its free (from any thread, through any interior pointer) finds its record with a shift; records
// go to the thread's record::RecordLog. Costs two system calls per allocation, paid only in the
// passes being profiled. Finding the pass in the records is detect.cc's.
#include <cstring>

#include "detection.h"
#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "stats.h"

namespace memoplan::shim {

void give_up_profiling(ThreadState& t, const char* why) {
  t.phase = Phase::kDisabled;
  stats().plan_failures.fetch_add(1, std::memory_order_relaxed);
  log_line("memoplan: thread %u runs unplanned: %s", t.index, why);
  // Its records are of no use any more.
  stats().released_bytes.fetch_add(give_back_records(*t.profile), std::memory_order_relaxed);
}

namespace {

std::atomic<bool> budget_reported{false};

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

}  // namespace memoplan::shim
