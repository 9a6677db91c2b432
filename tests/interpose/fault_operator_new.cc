// In the preloaded library the planner's own containers come back through the shim's operator new
// to the fallback allocator, so an exhausted fallback makes the planner throw std::bad_alloc in the
// middle of a malloc call. The fault tests' executable reproduces that: while the engine works for
// itself (its reentry guard is up), operator new fails wherever fallback allocations are set to
// fail. Everywhere else it is malloc and free, with no failures.
#include <cstdlib>
#include <new>

#include "fault_injection.h"
#include "state.h"

namespace {

void* allocate(std::size_t size) {
  if (memoplan::shim::ReentryGuard::active() &&
      memoplan::shim::fault::should_fail(memoplan::shim::fault::Site::kFallbackAlloc)) {
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
