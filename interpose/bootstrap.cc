#include "bootstrap.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace memoplan::shim::bootstrap {

alignas(64) char pool[kPoolBytes];
std::atomic<char*> span_pool{pool};  // constant-initialized

namespace {

constexpr size_t kHeader = 16;  // the block's size, kept just before it

// One pool's bump pointer.
struct Bump {
  std::atomic<size_t> used{0};

  void* allocate(char* base, size_t size, size_t alignment) {
    size_t start = used.load(std::memory_order_relaxed);
    size_t block, end;
    do {
      block = (start + kHeader + alignment - 1) & ~(alignment - 1);
      end = block + ((size + 15) & ~size_t{15});
      if (end > kPoolBytes) {
        errno = ENOMEM;
        return nullptr;
      }
    } while (!used.compare_exchange_weak(start, end, std::memory_order_relaxed));
    *reinterpret_cast<size_t*>(base + block - kHeader) = size;
    return base + block;
  }
};

Bump static_bump, span_bump;
std::atomic<bool> placed{false};
std::atomic<bool> initializer_known{false};
pthread_t initializer;

}  // namespace

void begin() {
  initializer = pthread_self();
  initializer_known.store(true, std::memory_order_release);
}

void place(char* at) {
  if (at) span_pool.store(at, std::memory_order_relaxed);
  placed.store(true, std::memory_order_release);
}

bool static_pool_used() {
  return span_pool.load(std::memory_order_relaxed) != pool &&
         static_bump.used.load(std::memory_order_relaxed) != 0;
}

void* allocate(size_t size, size_t alignment) {
  if (alignment < kHeader) alignment = kHeader;
  if (size > kPoolBytes || alignment > kPoolBytes) {
    errno = ENOMEM;
    return nullptr;
  }
  while (!placed.load(std::memory_order_acquire)) {
    if (initializer_known.load(std::memory_order_acquire) &&
        pthread_equal(initializer, pthread_self())) {
      return static_bump.allocate(pool, size, alignment);
    }
    sched_yield();  // initialization is reserving the span
  }
  char* base = span_pool.load(std::memory_order_relaxed);
  return (base == pool ? static_bump : span_bump).allocate(base, size, alignment);
}

size_t usable_size(const void* p) {
  return *reinterpret_cast<const size_t*>(static_cast<const char*>(p) - kHeader);
}

}  // namespace memoplan::shim::bootstrap
