// A small static pool that serves allocations made before the fallback allocator is resolved:
// dlsym and dlopen allocate while we look the real malloc up, and other libraries' constructors
// may run before ours. Never freed (it is tiny); heaptrack and jemalloc do the same.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memoplan::shim::bootstrap {

inline constexpr size_t kPoolBytes = 1 << 20;
// Hidden: free's range check reads its address directly, not through the GOT.
extern char pool[kPoolBytes] __attribute__((visibility("hidden")));

void* allocate(size_t size, size_t alignment);  // nullptr + ENOMEM when exhausted
// Inline: every free asks, before anything else.
inline bool owns(const void* p) {
  return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(pool) < kPoolBytes;
}
size_t usable_size(const void* p);

}  // namespace memoplan::shim::bootstrap
