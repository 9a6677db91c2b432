// TagRegion's kPopulateRepeated (tag_region.h): a large profiled block's fresh pages made resident
// in one call where its size class is written whole, and the probes that learn which classes are.
#include <sys/mman.h>

#include <cerrno>

#include "memoplan/record/tag_region.h"

namespace memoplan::record {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

void TagRegion::populate_or_probe(Slot& s, int size_class, char* at, uint64_t bytes,
                                  uint64_t resident) {
  const uint64_t end = (bytes + kPage - 1) & ~(kPage - 1);  // the block's own pages only
  if (end <= resident || !populate_works_.load(std::memory_order_relaxed)) return;
  const uint64_t bit = uint64_t{1} << (size_class % 64);
  const bool whole = whole_[size_class / 64].load(std::memory_order_relaxed) & bit;
  const bool turn = takes_[size_class].fetch_add(1, std::memory_order_relaxed) % kProbeEvery == 0;
  if (!whole || (turn && resident == 0)) {
    // All its pages fresh: what its free finds resident it wrote.
    if (resident == 0) s.probe = static_cast<uint8_t>(size_class + 1);
    return;
  }
  // Fails with EINVAL where the kernel lacks it; ENOMEM and the like leave the pages to fault in
  // when written, as without it. errno is the caller's still.
  const int saved = errno;
  if (madvise(at + resident, end - resident, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
    populate_works_.store(false, std::memory_order_relaxed);
  }
  errno = saved;
}

void TagRegion::learn_whole(uint32_t index) {
  Slot& s = table_[index];
  const int size_class = s.probe - 1;
  s.probe = 0;
  char* at = region_of(index).slot_address(index_of(index));
  unsigned char in_core[256];
  const uint64_t pages = (s.bytes + kPage - 1) / kPage;
  bool whole = true;
  for (uint64_t done = 0; done < pages && whole;) {
    const uint64_t n = pages - done < sizeof in_core ? pages - done : sizeof in_core;
    if (mincore(at + done * kPage, n * kPage, in_core) != 0) return;
    for (uint64_t i = 0; i < n; ++i) whole = whole && (in_core[i] & 1);
    done += n;
  }
  const uint64_t bit = uint64_t{1} << (size_class % 64);
  if (whole) {
    whole_[size_class / 64].fetch_or(bit, std::memory_order_relaxed);
  } else {
    whole_[size_class / 64].fetch_and(~bit, std::memory_order_relaxed);
  }
}

}  // namespace memoplan::record
