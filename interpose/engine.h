// The shim's allocation entry points, called by the exported malloc family (exports.cc). Each
// decides: pass-through, profile, or replay. Profiling and replay details live in their own files
// (profiling.h, replay_state.h); the pass marks move the thread's lifecycle (lifecycle.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "memoplan/planner/trace.h"
#include "state.h"

namespace memoplan::plan_stage {
struct CompileOptions;  // memoplan/plan_stage/planned_pass.h
}  // namespace memoplan::plan_stage

namespace memoplan::shim {

// The exported functions call these for what the direct path (unplanned.h) does not take: requests
// the shim may plan, the shim's own blocks, everything before initialization and under
// fallback:jemalloc.
void* engine_alloc(size_t size, size_t alignment, bool zero);
void engine_free(void* p);
void* engine_realloc(void* p, size_t size);
size_t engine_usable_size(void* p);
void engine_pass_begin();
// Initializes the engine, reads mode:replay's files and starts the statistics writer
// (stats_file, stats_interval_ms): the preloaded library's constructor.
void engine_load_files();
// memoplan_stats_json: stats_json once the engine is initialized (-1 and an empty buf before).
int engine_stats_json(char* buf, size_t len);
void engine_pass_end();
// malloc_trim: gives back what the calling thread holds idle (its arena's pages when none of its
// blocks is alive, its profile records when it no longer profiles) and trims the fallback.
// Returns 1 when memory went back to the OS, as glibc's does.
int engine_trim(size_t pad);

// plan_builder.cc. finish_profile: records [first, first + count) as a trace (lifetimes ending
// after `cut_tick` escape); mode:profile writes it, the other modes plan it (plan_stage::compile)
// and switch the thread to replay at pass position `cursor`.
// `records`, when not null, lists the `count` record indices of the pass instead (a detected pass
// without its one-off requests).
// `sizes`, when not null (with `records`): the pass varies in size from pass to pass; its slots
// are keyed by call site alone and sized sizes[i] (the largest seen), and the thread replans it
// when a request outgrows its slot (replan_size_free).
bool finish_profile(ThreadState& t, uint64_t first, uint64_t count, uint64_t cut_tick,
                    uint32_t cursor, const uint64_t* records = nullptr,
                    const uint64_t* sizes = nullptr);
// A size-free plan whose pass had a request larger than its slot: planned again with the larger
// sizes (lifetimes as profiled), in a new arena; the old one is retired. Called by replay.cc at
// the pass end, replan_pending cleared.
void replan_size_free(ThreadState& t);

// pass_files.cc: mode:profile's trace files and mode:replay's loaded pass.
void write_pass_trace(const ThreadState& t, const Trace& trace);
// Reads trace (and plan) files into Global::replay_pass; on any problem says why and leaves the
// process unplanned. Called once, from the library's constructor (the C++ runtime is up by then).
void load_replay_pass();
// mode:replay: gives the thread the loaded pass (false while it is not loaded or unusable).
bool start_loaded_replay(ThreadState& t, ReplayStart start = {});
// The pass every thread may start (mode:replay's loaded one, mode:auto's learned ones): planned
// with these options (slots in allocation order, the escaping blocks' places laid out once for
// all threads), then published as Global::replay_pass (the newest learned one) and returned, kept
// for good. Publishing refuses (nullptr, nothing published, `why` set) a pass whose slab is over
// slab_max.
void set_shared_pass_options(plan_stage::CompileOptions& options);
const plan_stage::PlannedPass* publish_shared_pass(plan_stage::PlannedPass&& pass,
                                                   std::string* why);

// reaper.cc: the idle-slab reaper thread (option idle_release). start_reaper is cheap once it
// runs: called with every plan, at pass ends (a fork child's reaper did not come along) and when a
// block is freed into a tag slot.
void start_reaper();
// Freed tag slots of 16 MiB or more (mimalloc 2 unmaps a block over 16 MiB at free) keep their
// pages 10 ms at most (record::TagRegion::set_kept_expiry; the reaper looks every 10 ms): long
// enough for a program that frees and makes large blocks back to back (bench/large_blocks), not
// for a pass's output kept between passes beside what other threads fault in. gpt_decoder, two
// inference threads: peak RSS 920-930 MiB with no expiry, mimalloc 888-906 (docs/results/SHIM.md).
constexpr uint64_t kKeptLargeBytes = uint64_t{16} << 20;
constexpr uint64_t kKeptLargeNs = 10000000;
// The others 1 s at most (the reaper looks every 250 ms): a load's temporaries kept for a
// server's first request go back (bert_encoder eager: VmRSS 709 MiB after its load, 681 1.5 s
// later; glibc 677, mimalloc 702), while a program's sizes that come back within a second keep
// their pages: at 100 ms python3's json rounds (350 ms each) faulted 83k pages, 69k at 1 s,
// mimalloc alone 55k (run_shim_programs.py's PYTHON_WORK under perf stat).
constexpr uint64_t kKeptNs = 1000000000;
void reaper_after_fork_in_child();
// False only while the reaper thread is being started: its start-up runs in the C library (and
// under a sanitizer, in the sanitizer's allocator, which keeps its locks across a fork in GCC 12's
// runtime), so the fork tests wait for this before they fork.
bool reaper_settled();
// A detached background thread running `main`, named `name`, with every signal blocked (the
// program's signals never land on it) and a 64 KiB stack where the program's static TLS fits in
// one. Returns 0 or pthread_create's error.
int spawn_background_thread(void* (*main)(void*), const char* name);

}  // namespace memoplan::shim
