#include "bootstrap.h"

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace memoplan::shim::bootstrap {

alignas(64) char pool[kPoolBytes];

namespace {

constexpr size_t kHeader = 16;  // the block's size, kept just before it
std::atomic<size_t> used{0};

}  // namespace

void* allocate(size_t size, size_t alignment) {
  if (alignment < kHeader) alignment = kHeader;
  if (size > kPoolBytes || alignment > kPoolBytes) {
    errno = ENOMEM;
    return nullptr;
  }
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
  *reinterpret_cast<size_t*>(pool + block - kHeader) = size;
  return pool + block;
}

size_t usable_size(const void* p) {
  return *reinterpret_cast<const size_t*>(static_cast<const char*>(p) - kHeader);
}

}  // namespace memoplan::shim::bootstrap
