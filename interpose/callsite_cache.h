// The per-thread call-site cache: what the key of an allocation (its size and a hash of the return
// addresses above the allocator) costs after the first time a call path is seen. Owned by
// callsite.cc; the thread's ThreadState holds one (state.h).
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

struct CallsiteCache {
  CallsiteCacheEntry entries[kCallsiteCacheEntries];
  uint32_t victim = 0;  // the way a miss fills next, round robin
};

// Size and a hash of `depth` return addresses above the allocator; `portable` hashes each as
// (module name, offset), the same in every process. `return_address` (of the allocator's entry,
// engine_alloc) and `stack` (an address in its frame) identify the call path for `cache` (see
// CallsiteCacheEntry). `site` gets the same key without the size (the call site alone): what a
// thread whose pass varies in size (ReplayState::size_free) is replayed by.
uint64_t cached_callsite_key(CallsiteCache& cache, size_t size, unsigned depth, bool portable,
                             uintptr_t return_address, uintptr_t stack, uint64_t* site);

// fork and the unwinder: libunwind and the loader keep locks of their own, which a thread that is
// unwinding at the fork would leave held in the child for good (the child then hangs at its first
// unwind). The fork's prepare handler waits until no thread is unwinding and holds new unwinds
// back until the fork is done, in the parent and in the child.
void unwind_gate_close_for_fork();
void unwind_gate_open_after_fork(bool in_child);

}  // namespace memoplan::shim
