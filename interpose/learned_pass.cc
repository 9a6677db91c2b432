// Passes learned from threads that each ran one (learned_pass.h): exited threads' offers, the plan
// made when enough agree, and its adoption by the threads that follow.
#include "learned_pass.h"

#include <atomic>
#include <cerrno>
#include <new>

#include "detection.h"
#include "engine.h"
#include "lifecycle.h"
#include "memoplan/plan_stage/planned_pass.h"
#include "memoplan/record/trace_of.h"
#include "recheck.h"
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
// Every publication planned a pass and keeps it for good: a bound, whatever the threads do.
constexpr uint32_t kMaxPublications = 16;

// The passes threads start on, one per kind of thread (kKinds at most: a server's endpoints, its
// helper threads), each told by its first request. adopt_learned_pass reads them; offers_lock's
// holder writes them. A pass taken out stays allocated (Global::replay_pass).
std::atomic<const plan_stage::PlannedPass*> in_use[kKinds];

// Under offers_lock.
struct Learning {
  Offer offers[kOffers];
  uint64_t offers_made = 0;
  // Every pass published, in order: kept for good (a thread may be starting on one taken out)
  // and so still reachable.
  const plan_stage::PlannedPass* published[kMaxPublications] = {};
  uint32_t publications = 0;
  uint64_t fingerprint[kKinds] = {};  // in_use[i]'s
  // The threads that started on in_use[i] and exited, the last `streak` of them in a row each
  // with a request the pass does not know, the same key (streak_key) in all.
  uint64_t streak_key[kKinds] = {};
  uint32_t streak[kKinds] = {};
  // Passes taken out to be learned again (their fingerprints are not published again).
  uint64_t retired[kMaxRelearns] = {};
  uint32_t relearns = 0;
  // Learning one again: its place, the pass taken out (back in if no kThreadsThatAgree threads
  // agree within kRelearnOffers offers), offers left.
  int relearn_kind = -1;
  const plan_stage::PlannedPass* relearn_pass = nullptr;
  uint32_t relearn_offers_left = 0;
};
MEMOPLAN_CONSTINIT Learning learning;  // see state.h
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
  Learning& l = learning;
  ++l.offers_made;
  Offer* slot = nullptr;
  for (Offer& o : l.offers) {
    if (o.threads != 0 && o.fingerprint == fingerprint) {
      slot = &o;
      break;
    }
    if (!slot || o.last < slot->last) slot = &o;  // the empty or least recently offered
  }
  if (slot->fingerprint != fingerprint || slot->threads == 0) *slot = Offer{fingerprint, 0, 0};
  slot->last = l.offers_made;
  return ++slot->threads >= kThreadsThatAgree;
}

// A pass in use or taken out has this fingerprint: the offer teaches nothing new.
bool known(uint64_t fingerprint) {
  const Learning& l = learning;
  for (int i = 0; i < kKinds; ++i) {
    if (in_use[i].load(std::memory_order_relaxed) && l.fingerprint[i] == fingerprint) return true;
  }
  for (uint32_t i = 0; i < l.relearns; ++i) {
    if (l.retired[i] == fingerprint) return true;
  }
  return false;
}

// Where a newly agreed pass that starts with `first_key` goes: the place being learned again, or
// the pass in use for threads that start the same way (the newer pass replaces it: threads that
// did not start on it ran after its first threads, further into the program's warm-up), else an
// empty place (-1: none).
int place_for(uint64_t first_key) {
  const Learning& l = learning;
  if (l.relearn_kind >= 0 && l.relearn_pass->slots[0].key == first_key) return l.relearn_kind;
  int empty = -1;
  for (int i = 0; i < kKinds; ++i) {
    const plan_stage::PlannedPass* p = in_use[i].load(std::memory_order_relaxed);
    if (p && p->slots[0].key == first_key) return i;
    if (!p && i != l.relearn_kind && empty < 0) empty = i;
  }
  return empty;
}

void end_relearning(bool put_back) {
  Learning& l = learning;
  if (put_back) in_use[l.relearn_kind].store(l.relearn_pass, std::memory_order_release);
  l.relearn_kind = -1;
  l.relearn_pass = nullptr;
  l.relearn_offers_left = 0;
}

// Plans the thread's records as one pass and publishes it in place `kind`. Under the reentry
// guard: the planner's allocations go to the fallback.
void publish(const ThreadState& t, uint64_t count, uint64_t fingerprint, int kind) {
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
  const plan_stage::PlannedPass* published = publish_shared_pass(std::move(*pass), &why);
  if (!published) {
    if (g.options.verbose)
      log_line("memoplan: the pass learned from exited threads: %s", why.c_str());
    return;
  }
  Learning& l = learning;
  l.published[l.publications++] = published;
  const bool again = kind == l.relearn_kind;
  if (again) end_relearning(/*put_back=*/false);
  l.fingerprint[kind] = fingerprint;
  l.streak[kind] = 0;
  l.streak_key[kind] = 0;
  for (Offer& o : l.offers) {
    if (o.fingerprint == fingerprint) o = Offer{};
  }
  in_use[kind].store(published, std::memory_order_release);
  if (g.options.verbose) {
    log_line(
        "memoplan: learned a pass of %llu allocations%s from %u threads that ran it once each "
        "(slab %llu bytes); threads starting it replay it",
        static_cast<unsigned long long>(count), again ? " again" : "", kThreadsThatAgree,
        static_cast<unsigned long long>(slab_bytes));
  }
  stats().learned_passes.fetch_add(1, std::memory_order_relaxed);
}

// While a pass is learned again no thread starts on it: the slabs its threads left parked would
// sit resident beside the pages the threads profiling now take, so they go back (at the start,
// and at each thread exit until it is learned: the threads still on it park theirs).
void release_parked_slabs() {
  const int saved = errno;
  global().slabs.release_parked();
  errno = saved;
}

// A request key the thread's plan did not know, if any (recheck.h keeps the first few of a
// window, and of the last window that missed any).
uint64_t a_missed_key(const ReplayRecheck& r) {
  if (r.missed_count > 0) return r.missed[0];
  return r.previous_count > 0 ? r.previous[0] : 0;
}

// A thread that started on in_use[kind] exits: when kThreadsThatAgree of them in a row each made
// the same request the pass does not know (an interpreter that takes another path to it once it
// has warmed up: CPython 3.11's specialization), the pass is taken out and learned again from the
// threads that follow.
void note_thread_on_the_pass(const ThreadState& t, int kind) {
  Learning& l = learning;
  const uint64_t key = t.phase == Phase::kReplaying ? a_missed_key(t.recheck) : 0;
  if (key == 0 || key != l.streak_key[kind]) {
    l.streak_key[kind] = key;
    l.streak[kind] = key != 0;
  } else {
    ++l.streak[kind];
  }
  if (l.streak[kind] < kThreadsThatAgree || l.relearns >= kMaxRelearns || l.relearn_kind >= 0) {
    return;
  }
  l.streak[kind] = 0;
  l.streak_key[kind] = 0;
  l.retired[l.relearns++] = l.fingerprint[kind];
  l.relearn_kind = kind;
  l.relearn_pass = in_use[kind].load(std::memory_order_relaxed);
  l.relearn_offers_left = kRelearnOffers;
  in_use[kind].store(nullptr, std::memory_order_release);
  release_parked_slabs();
  if (global().options.verbose) {
    log_line(
        "memoplan: %u threads in a row that started on a learned pass made a request it does "
        "not know: learning it again",
        kThreadsThatAgree);
  }
}

void offer_locked(ThreadState& t) {
  Global& g = global();
  Learning& l = learning;
  if (l.relearn_kind >= 0) release_parked_slabs();
  if (t.learned_pass) {
    if (t.left_learned_pass) return;  // it was not the pass's: it says nothing of it
    for (int i = 0; i < kKinds; ++i) {
      if (in_use[i].load(std::memory_order_relaxed) == t.learned_pass) {
        note_thread_on_the_pass(t, i);
      }
    }
    return;
  }
  // Only a thread that has profiled from its start and never planned: its records are its life.
  if (t.phase != Phase::kProfiling || !t.profiling.profile || t.replay.slots ||
      t.detection.first_record != 0 || t.detection.required_key != 0 ||
      g.replay_pass_state.load(std::memory_order_acquire) == 2) {
    return;
  }
  const uint64_t count = t.profiling.profile->log.count();
  if (count == 0 || count > g.options.max_period) return;
  const uint64_t fingerprint = fingerprint_of(t.profiling.profile->log, count);
  if (known(fingerprint)) return;
  const bool agreed = count_offer(fingerprint);
  const int kind = place_for(t.profiling.profile->log.at(0).key);
  if (agreed && kind >= 0 && l.publications < kMaxPublications) {
    publish(t, count, fingerprint, kind);
  } else if (l.relearn_kind >= 0 && --l.relearn_offers_left == 0) {
    end_relearning(/*put_back=*/true);  // nothing agreed: the pass taken out is used again
    if (g.options.verbose) {
      log_line("memoplan: learning a pass again found no %u threads that agree: it stays",
               kThreadsThatAgree);
    }
  }
}

}  // namespace

void offer_exited_thread_pass(ThreadState& t) {
  Global& g = global();
  if (g.options.mode != Mode::kAuto || !g.options.detect || g.mode_off || t.explicit_passes) {
    return;
  }
  if (offers_lock.test_and_set(std::memory_order_acquire)) return;
  try {
    offer_locked(t);
  } catch (...) {  // std::bad_alloc from the planner: nothing is published
    stats().bookkeeping_failures.fetch_add(1, std::memory_order_relaxed);
  }
  offers_lock.clear(std::memory_order_release);
}

void leave_learned_pass(ThreadState& t) {
  t.left_learned_pass = true;
  if (global().options.verbose) {
    log_line(
        "memoplan: thread %u: missed most of the learned pass it started on (it runs something "
        "else): detecting its own",
        t.index);
  }
  detect_again(t, 0, 0);
}

void adopt_learned_pass(ThreadState& t, uint64_t key) {
  const Global& g = global();
  if (g.options.mode != Mode::kAuto || t.explicit_passes || t.left_learned_pass) return;
  const plan_stage::PlannedPass* pass = nullptr;
  for (int i = 0; i < kKinds && !pass; ++i) {
    const plan_stage::PlannedPass* p = in_use[i].load(std::memory_order_acquire);
    if (p && p->slots[0].key == key) pass = p;
  }
  if (!pass) return;
  if (g.slabs.arenas_in_use() >= g.slabs.arena_count() && g.slabs.arenas_parked() == 0) {
    // Every slab taken (more threads at once than `threads`): unplanned, counted with the threads
    // that plan nothing; not logged, as a line per thread would flood a busy server's log.
    run_unplanned(t);
    return;
  }
  ReplayStart start;
  start.steady_from_start = true;
  if (install_replay(t, *pass, start)) {
    t.learned_pass = pass;
    recheck_judge_adoption(t.recheck, static_cast<uint32_t>(pass->slots.size()));
    stats().learned_pass_threads.fetch_add(1, std::memory_order_relaxed);
  } else {
    run_unplanned(t);
  }
}

}  // namespace memoplan::shim
