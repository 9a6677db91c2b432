// Plans that outlive the threads that learned them (mode:auto with detection). A server that runs
// every request on a thread of its own (Python's ThreadingHTTPServer, thread-per-connection C++
// servers) makes each pass on a thread that exits before detection has seen the three passes it
// needs, so no thread ever plans. Instead, each such thread's whole profile is one pass: at its
// exit, a thread still profiling, with every record since its start, offers that sequence of
// requests (call sites and sizes, in order); when kThreadsThatAgree threads in a row offered the
// same one, it is planned once and published process-wide (kept for good, as mode:replay's loaded
// pass is). From then on a thread that is profiling starts replaying it, from a slab of its own,
// at the learned pass's first request (its matcher recovers from a wrong start as for any plan);
// its passes count as steady state from the first. The statistics' "passes learned from exited
// threads" counts every publication, those of kinds below and of passes learned again included.
#pragma once

#include <cstdint>

namespace memoplan::shim {

struct ThreadState;

inline constexpr uint32_t kThreadsThatAgree = 3;
// Passes in use at once, one per kind of thread, told apart by their first request: threads that
// start on none of them offer theirs (a second endpoint, a helper thread that runs one pass).
inline constexpr int kKinds = 4;
// A pass that threads starting on it keep missing a request of (kThreadsThatAgree in a row, the
// same request) is taken out and learned again from the threads that follow: the first threads of
// an interpreter (CPython 3.11 specializes its bytecode as it warms up) reach a request by another
// call path than later ones. At most kMaxRelearns times; when no kThreadsThatAgree threads agree
// within kRelearnOffers offers, the pass is used again.
inline constexpr uint32_t kMaxRelearns = 3;
inline constexpr uint32_t kRelearnOffers = 16;

// At thread exit, outside the registry lock, under the reentry guard (threads.cc).
void offer_exited_thread_pass(ThreadState& t);

// A thread that started on a learned pass hit less than half of its first pass's requests (its
// first request only looked like the pass's: a buffer every thread makes, on a thread that runs
// something else): it profiles afresh, as from its start, and never starts on a learned pass
// again. From the re-check (recheck.cc), its steady-state counts retracted.
void leave_learned_pass(ThreadState& t);

// A tracked request (its `key`) of a thread that is profiling, once Global::replay_pass_state is
// 1: under mode:auto, at the learned pass's first request the thread starts replaying it (or runs
// unplanned when it cannot: no slab left).
void adopt_learned_pass(ThreadState& t, uint64_t key);

}  // namespace memoplan::shim
