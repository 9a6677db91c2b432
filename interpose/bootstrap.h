// A small static pool that serves allocations made before the fallback allocator is resolved:
// dlsym and dlopen allocate while we look the real malloc up, and other libraries' constructors
// may run before ours. Never freed (it is tiny); heaptrack and jemalloc do the same.
#pragma once

#include <cstddef>

namespace memoplan::shim::bootstrap {

void* allocate(size_t size, size_t alignment);  // nullptr + ENOMEM when exhausted
bool owns(const void* p);
size_t usable_size(const void* p);

}  // namespace memoplan::shim::bootstrap
