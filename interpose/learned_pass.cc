// Passes learned from threads that each ran one (learned_pass.h): exited threads' offers, the plan
// made when enough agree, and its adoption by the threads that follow.
#include "learned_pass.h"

#include <atomic>
#include <new>

#include "engine.h"
#include "lifecycle.h"
#include "memoplan/plan_stage/planned_pass.h"
#include "memoplan/record/trace_of.h"
#include "stats.h"

namespace memoplan::shim {
namespace {

// The sequences recent exited threads offered, by fingerprint, and how many offered each: other
// threads exiting in between (a logger, a pool's helpers) do not reset the count of the pass.
struct Offer {
  uint64_t fingerprint = 0;
  uint32_t threads = 0;
  uint64_t last = 0;  // the offer number it was last seen at (the oldest goes first)
};
constexpr int kOffers = 8;
Offer offers[kOffers];
uint64_t offers_made = 0;
// Try-lock only: an exiting thread that finds it held offers nothing (a fork child may inherit it
// held; no thread ever waits on it).
std::atomic_flag offers_lock = ATOMIC_FLAG_INIT;

uint64_t fingerprint_of(const record::RecordLog& log, uint64_t count) {
  uint64_t h = count * 0x9e3779b97f4a7c15ull;
  for (uint64_t i = 0; i < count; ++i) {
    h = (h ^ log.at(i).key) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

// Counts the offer; true when it is the kThreadsThatAgree-th of its sequence.
bool count_offer(uint64_t fingerprint) {
  ++offers_made;
  Offer* slot = nullptr;
  for (Offer& o : offers) {
    if (o.threads != 0 && o.fingerprint == fingerprint) {
      slot = &o;
      break;
    }
    if (!slot || o.last < slot->last) slot = &o;  // the empty or least recently offered
  }
  if (slot->fingerprint != fingerprint || slot->threads == 0) *slot = Offer{fingerprint, 0, 0};
  slot->last = offers_made;
  return ++slot->threads >= kThreadsThatAgree;
}

// Plans the thread's records as one pass and publishes it. Under the reentry guard: the planner's
// allocations go to the fallback.
void publish(const ThreadState& t, uint64_t count) {
  Global& g = global();
  const record::RecordLog& log = t.profiling.profile->log;
  plan_stage::CompileOptions options;
  set_shared_pass_options(options);
  Result<plan_stage::PlannedPass> pass =
      plan_stage::compile(record::trace_of(log, 0, count, log.tick()), options);
  if (!pass) {
    log_line("memoplan: planning the pass learned from exited threads failed: %s",
             pass.error().c_str());
    return;
  }
  const uint64_t slab_bytes = pass->slab_bytes;
  std::string why;
  if (!publish_shared_pass(std::move(*pass), &why)) {
    if (g.options.verbose)
      log_line("memoplan: the pass learned from exited threads: %s", why.c_str());
    return;
  }
  if (g.options.verbose) {
    log_line(
        "memoplan: learned a pass of %llu allocations from %u threads that ran it once each "
        "(slab %llu bytes); threads starting it replay it",
        static_cast<unsigned long long>(count), kThreadsThatAgree,
        static_cast<unsigned long long>(slab_bytes));
  }
  stats().learned_passes.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void offer_exited_thread_pass(ThreadState& t) {
  Global& g = global();
  if (g.options.mode != Mode::kAuto || !g.options.detect || g.mode_off || t.explicit_passes ||
      t.phase != Phase::kProfiling || !t.profiling.profile) {
    return;
  }
  // Only a thread that has profiled from its start and never planned: its records are its life.
  if (t.replay.slots || t.detection.first_record != 0 || t.detection.required_key != 0) return;
  const uint64_t count = t.profiling.profile->log.count();
  if (count == 0 || count > g.options.max_period ||
      g.replay_pass_state.load(std::memory_order_acquire) != 0) {
    return;
  }
  const uint64_t fingerprint = fingerprint_of(t.profiling.profile->log, count);
  if (offers_lock.test_and_set(std::memory_order_acquire)) return;
  try {
    if (count_offer(fingerprint) && g.replay_pass_state.load(std::memory_order_relaxed) == 0) {
      publish(t, count);
    }
  } catch (...) {  // std::bad_alloc from the planner: nothing is published
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
  }
  offers_lock.clear(std::memory_order_release);
}

void adopt_learned_pass(ThreadState& t, uint64_t key) {
  const Global& g = global();
  if (g.options.mode != Mode::kAuto || t.explicit_passes || key != g.replay_pass->slots[0].key) {
    return;
  }
  if (g.slabs.arenas_in_use() >= g.slabs.arena_count() && g.slabs.arenas_parked() == 0) {
    // Every slab taken (more threads at once than `threads`): unplanned, counted with the threads
    // that plan nothing; not logged, as a line per thread would flood a busy server's log.
    run_unplanned(t);
    return;
  }
  ReplayStart start;
  start.steady_from_start = true;
  if (start_loaded_replay(t, start)) {
    stats().learned_pass_threads.fetch_add(1, std::memory_order_relaxed);
  } else {
    run_unplanned(t);
  }
}

}  // namespace memoplan::shim
