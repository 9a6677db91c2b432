// Fault injection for the tests: makes the shim's own calls into the system fail on purpose, to
// show the engine copes — the caller gets NULL + ENOMEM only where its own request met a failing
// allocator, a slab that cannot be mapped leaves that thread unplanned, a tag region that cannot
// be reserved leaves the process unplanned, and the statistics say so.
//
// Compiled in only with MEMOPLAN_FAULT_INJECTION (the memoplan_shim_engine_faults library that the
// fault tests and the deviation fuzzer link). In the shipped library every check below is the
// constant `false` and vanishes from the code.
#pragma once

#include <cstdint>

namespace memoplan::shim::fault {

enum class Site : int {
  kFallbackAlloc,  // fallback::malloc/calloc/realloc/aligned return NULL with errno ENOMEM
  kTagRegion,      // reserving the tag region at initialization fails
  kTagCommit,      // committing a tag slot's pages (one profiled allocation) fails
  kSlabCommit,     // committing a thread's slab (or its block-size map) fails
  kCount,
};
const char* to_string(Site site);

// Places where a test can stop a thread half-way through a multi-step update, to fork while it is
// there (the child must cope with whatever the stopped thread left half-done).
enum class Point : int {
  kRecordsChunkFreed,  // a profile's records are being given back: one chunk is, the rest not yet
  kSlabReleased,       // a thread gave its empty slab back and has not forgotten it yet
  kCount,
};

// When a site fails: calls are numbered from 0; the first `skip` never fail, then every
// `every_nth`-th call fails and, independently, each call with probability per_million / 10^6
// (decided by a hash of `seed` and the call's number, so a run is reproducible for one thread and
// lock-free for many). At most `max_failures` failures are injected.
struct Rule {
  uint64_t every_nth = 0;
  uint32_t per_million = 0;
  uint64_t seed = 1;
  uint64_t skip = 0;
  uint64_t max_failures = ~uint64_t{0};
};

#ifdef MEMOPLAN_FAULT_INJECTION

inline constexpr bool kCompiledIn = true;
// Counts the call and says whether it must fail.
bool should_fail(Site site);
// Replaces the site's rule and restarts its call and failure counts.
void set_rule(Site site, const Rule& rule);
void clear_rules();
uint64_t calls(Site site);
uint64_t injected(Site site);
// Rules from MEMOPLAN_FAULTS, read by the engine's initialization (preloaded programs have no
// other way in): "site:key=value;key=value,site:..." with the sites fallback_alloc, tag_region,
// tag_commit, slab_commit and the keys every, ppm, seed, skip, max. No malloc.
void parse_rules(const char* text);
// The test's hook, called on whichever thread reaches a Point (nullptr: none).
void set_pause_hook(void (*hook)(Point));
void pause_at(Point point);

#else

inline constexpr bool kCompiledIn = false;
constexpr bool should_fail(Site) { return false; }
inline void parse_rules(const char*) {}
inline void pause_at(Point) {}

#endif

}  // namespace memoplan::shim::fault
