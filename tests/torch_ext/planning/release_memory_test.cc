// release_free_memory(): what malloc keeps free goes back to the system (plan() calls it once a
// plan is made, so the warm-up and profiled passes' memory does not sit next to the slab).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "planning.h"
#include "resident.h"

namespace memoplan::torch_ext {
namespace {

using testing::resident;

TEST(ReleaseFreeMemory, FreeHeapPagesInTheMiddleGoBack) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator keeps freed memory in quarantine";
#endif
  // 64 KiB blocks (below glibc's mmap threshold: from the heap), then a small block after them so
  // the heap's top cannot shrink: freeing the blocks leaves 16 MiB free in the middle, resident.
  constexpr size_t kBlock = 64 * 1024;
  std::vector<char*> blocks;
  for (int i = 0; i < 256; ++i) {
    blocks.push_back(static_cast<char*>(std::malloc(kBlock)));
    std::memset(blocks.back(), 1, kBlock);
  }
  void* pin = std::malloc(64);
  char* middle = blocks[128] + kBlock / 2;
  for (char* b : blocks) std::free(b);
  ASSERT_TRUE(resident(middle)) << "freed heap memory is expected to stay resident";
  release_free_memory();
  EXPECT_FALSE(resident(middle));
  std::free(pin);
}

}  // namespace
}  // namespace memoplan::torch_ext
