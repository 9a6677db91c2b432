// The per-thread call-site cache: what the key of an allocation (its size and a hash of the return
// addresses above the allocator) costs after the first time a call path is seen. Owned by
// callsite.cc; the thread's ThreadState points to one (state.h), made at its first unwind: keys
// that do not unwind (callsite_depth 0 and 1) never need its 106 KiB.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memoplan::shim {

// Unwinding the stack costs more than the rest of a replay hit together. With callsite_depth >= 2
// the unwound hash is cached per thread under the call's return address and stack pointer (the
// tag). The tag alone does not name the path: two callers of one helper at the same depth reach
// it with both equal (an interpreter's frames, a tensor library's allocate()), and a tag-only
// cache gave whichever filled the entry last, so a path's key depended on what had evicted what:
// on the stack addresses, different in every process. So each entry also keeps where the deeper
// return addresses of its path lie, relative to the stack pointer, and their values: a hit reads
// them from the stack and compares, which confirms the whole path (the caller at the same stack
// pointer with the same return address has the same frame, so the next return address lies at
// the same place, and so on up). Paths that share a tag live side by side in the set's ways.
inline constexpr unsigned kCallsiteCheckedFrames = 7;  // callsite_depth up to 8 is cached
struct CallsiteCacheEntry {
  uint64_t tag = 0;
  uint64_t hash = 0;
  uint32_t checked = 0;                           // deeper return addresses kept below
  uint32_t offset[kCallsiteCheckedFrames] = {};   // each one's stack slot - stack pointer
  uint64_t address[kCallsiteCheckedFrames] = {};  // the return address found there
};
inline constexpr size_t kCallsiteCacheWays = 4;
inline constexpr size_t kCallsiteCacheEntries = 1024;  // 256 sets of 4 ways

// Unwinds give back the unwind tables they read (unwind_tables.h) in batches: giving them back
// after every unwind cost g++ 4% (its paths are many; each release is a loader walk and a
// madvise per library, and the next unwind maps the pages again).
inline constexpr uint32_t kUnwindsPerRelease = 16;
inline constexpr uint32_t kUnreleasedPlaces = 32;

struct CallsiteCache {
  CallsiteCacheEntry entries[kCallsiteCacheEntries];
  uint32_t victim = 0;  // the way a miss fills next, round robin
  // Since the tables were last given back: the unwinds, and a return address for each MiB of
  // code they passed through (a library is released if one of them lies in it).
  uint32_t unwinds_unreleased = 0;
  uint32_t places_unreleased = 0;
  uintptr_t unreleased[kUnreleasedPlaces] = {};
};

// Size and a hash of `depth` return addresses above the allocator; `portable` hashes each as
// (module name, offset), the same in every process. `return_address` (of the allocator's entry,
// engine_alloc) and `stack` (an address in its frame) identify the call path for `cache` (see
// CallsiteCacheEntry). `site` gets the same key without the size (the call site alone): what a
// thread whose pass varies in size (ReplayState::size_free) is replayed by.
// `cache` is made on the first unwind (from the fallback; without it each unwind goes uncached).
uint64_t cached_callsite_key(CallsiteCache*& cache, size_t size, unsigned depth, bool portable,
                             uintptr_t return_address, uintptr_t stack, uint64_t* site);
// At thread exit, before the registry lock (this takes the loader's): the unwind tables its
// unwinds read and did not give back yet go.
void give_back_unwind_tables(CallsiteCache* cache);
// At thread exit, and in a fork's child for the threads gone: the cache.
void release_callsite_cache(CallsiteCache*& cache);

// fork and the unwinder: libunwind and the loader keep locks of their own, which a thread that is
// unwinding at the fork would leave held in the child for good (the child then hangs at its first
// unwind). The fork's prepare handler waits until no thread is unwinding and holds new unwinds
// back until the fork is done, in the parent and in the child.
void unwind_gate_close_for_fork();
void unwind_gate_open_after_fork(bool in_child);

}  // namespace memoplan::shim
