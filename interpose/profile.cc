// Profiling: every tracked allocation gets its own slot of the tag region (record::TagRegion), so
// its free (from any thread, through any interior pointer) finds its record with a shift; records
// go to the thread's record::RecordLog. Costs two system calls per allocation, paid only in the
// passes being profiled. The thread's Profiling (profiling.h) is this file's: its profile is made,
// emptied and dropped here. Finding the pass in the records is detect.cc's.
#include <cstring>
#include <new>

#include "detection.h"
#include "engine.h"
#include "fallback.h"
#include "fault_injection.h"
#include "lifecycle.h"
#include "profiling.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

std::atomic<bool> budget_reported{false};

// The recorder thread (or its exit): forgets the records and gives their memory back; returns the
// bytes. Waits for other threads' frees that are closing a record right now (a fork child first
// sets `closing` to 0 in the profiles of the threads it knows: their closers did not come along).
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

// Drops one reference; the last one frees the profile.
void release_profile(Profile* profile) {
  if (profile->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  profile->~Profile();  // gives the records back
  fallback::free(profile);
}

// The profile records' memory: the fallback allocator (the fault tests make it fail), not zeroed
// (record::MemorySource).
void* records_allocate(size_t bytes) { return fallback::malloc(bytes); }
void records_release(void* p, size_t) {
  fallback::free(p);
  fault::pause_at(fault::Point::kRecordsChunkFreed);  // the fault tests fork here
}

}  // namespace

bool create_profile(Profiling& p, const ThreadState& t) {
  void* memory = fallback::calloc(1, sizeof(Profile));
  if (!memory) return false;
  p.profile = new (memory) Profile(record::MemorySource{&records_allocate, &records_release});
  p.profile->recorder.store(&t, std::memory_order_relaxed);
  return true;
}

void retire_profile(Profiling& p) {
  if (!p.profile) return;
  release_records(p);
  p.profile->recorder.store(nullptr, std::memory_order_relaxed);
  release_profile(p.profile);
}

void profile_after_fork_in_child(Profiling& p) {
  if (p.profile) p.profile->closing.store(0, std::memory_order_relaxed);
}

void start_profiled_pass(Profiling& p) { p.pass_first_record = p.profile->log.count(); }

uint64_t release_records(Profiling& p) {
  const uint64_t bytes = give_back_records(*p.profile);
  stats().released_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return bytes;
}

void give_up_profiling(ThreadState& t, const char* why) {
  run_unplanned(t);
  stats().plan_failures.fetch_add(1, std::memory_order_relaxed);
  log_line("memoplan: thread %u runs unplanned: %s", t.index, why);
  release_records(t.profiling);  // of no use any more
  give_back_kept_pages();
}

uint64_t give_back_kept_pages() {
  record::TagRegion& tags = global().tags;
  const uint64_t kept = tags.retained_bytes();
  tags.trim();
  stats().released_bytes.fetch_add(kept, std::memory_order_relaxed);
  return kept;
}

void* profile_alloc(ThreadState& t, size_t size, size_t alignment, uint64_t key, uint64_t site,
                    bool zero) {
  Global& g = global();
  Profile* profile = t.profiling.profile;
  if (size > g.tags.slot_bytes()) {
    stats().untracked_large.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  record::TagRegion::Miss miss;
  // Without pass marks everything is profiled until a pass is found, a model's load too: a freed
  // block keeps its pages only for a size that came back (tag_region.h).
  const unsigned flags = record::TagRegion::kPopulateRepeated |
                         (t.explicit_passes ? 0u : unsigned{record::TagRegion::kKeepIfReturning});
  void* p = g.tags.take(size, zero, reinterpret_cast<uintptr_t>(profile),
                        profile->record_tag(profile->log.count()), &miss, alignment, flags);
  if (!p) {
    // Untracked: the fallback serves it, and the plan will not know it (a not_planned fallback).
    // No free slot: 65,536 large and 65,536 small slots hold tracked blocks.
    if (miss == record::TagRegion::Miss::kCommitFailed) {
      stats().tag_commit_failures.fetch_add(1, std::memory_order_relaxed);
    } else if (miss == record::TagRegion::Miss::kOverLimit) {
      stats().untracked_budget.fetch_add(1, std::memory_order_relaxed);
      if (!budget_reported.exchange(true, std::memory_order_relaxed)) {
        log_line(
            "memoplan: %u tag slots hold profiled blocks, the budget (vm.max_map_count / 8): "
            "more go untracked, unplanned",
            g.tags.live_limit());
      }
    }
    return nullptr;
  }
  record::RecordLog::Full full = record::RecordLog::Full::kNo;
  if (profile->log.append(key, site, size, alignment, t.index, &full) == record::RecordLog::kNone) {
    g.tags.give_back(p);
    if (full == record::RecordLog::Full::kOutOfMemory) {
      stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
      give_up_profiling(t, "out of memory for its profile records");
    } else {
      give_up_profiling(t, "the profile outgrew its record space");
    }
    return nullptr;
  }
  profile->refs.fetch_add(1, std::memory_order_relaxed);  // the block's: its free drops it
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
  // Its pages are kept for the freeing thread's next profiled block. A thread no longer profiling
  // has none coming: a block profiled before the plan and freed under it (gpt_decoder's 25.7 MiB
  // output, alive when the plan came) kept its pages beside the slab for good.
  g.tags.give_back(p, tls_state && tls_state->phase == Phase::kProfiling);
  start_reaper();            // which expires the kept pages (engine.h)
  release_profile(profile);  // the block's reference
}

size_t profile_usable_size(void* p) { return global().tags.owner_of(p).bytes; }

}  // namespace memoplan::shim
