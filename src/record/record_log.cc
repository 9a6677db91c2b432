#include "memoplan/record/record_log.h"

#include <sys/mman.h>

#include <cstring>

namespace memoplan::record {
namespace {

void* map_pages(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap(void* p, size_t bytes) { munmap(p, bytes); }

constexpr size_t kIndexBytes = RecordLog::kChunks * sizeof(Record*);
constexpr size_t kChunkBytes = RecordLog::kPerChunk * sizeof(Record);

}  // namespace

MemorySource mmap_memory() { return MemorySource{&map_pages, &unmap}; }

uint64_t RecordLog::append(uint64_t key, uint64_t site, uint64_t size, uint64_t align,
                           uint32_t thread, Full* full) {
  const uint64_t chunk = count_ / kPerChunk;
  if (chunk >= kChunks) {
    if (full) *full = Full::kCapacity;
    return kNone;
  }
  if (!chunks_) {
    chunks_ = static_cast<Record**>(memory_.allocate(kIndexBytes));
    if (chunks_) memset(chunks_, 0, kIndexBytes);
  }
  if (chunks_ && !chunks_[chunk])
    chunks_[chunk] = static_cast<Record*>(memory_.allocate(kChunkBytes));
  if (!chunks_ || !chunks_[chunk]) {
    if (full) *full = Full::kOutOfMemory;
    return kNone;
  }
  Record& r = at(count_);
  r.key = key;
  r.site = site;
  r.size = size;
  r.align = align;
  r.begin = tick_++;
  r.end.store(kLive, std::memory_order_relaxed);
  r.thread = thread;
  return count_++;
}

uint64_t RecordLog::footprint_bytes() const {
  if (!chunks_) return 0;
  uint64_t bytes = kIndexBytes;
  for (uint64_t c = 0; c < kChunks && chunks_[c]; ++c) bytes += kChunkBytes;
  return bytes;
}

void RecordLog::clear() {
  // Forget the records first, then give their memory back: a fork in the middle leaves the child
  // a log that owns less than it had (a leak), never one that gives a chunk back twice.
  Record** chunks = chunks_;
  chunks_ = nullptr;
  count_ = 0;
  tick_ = 0;
  if (!chunks) return;
  for (uint64_t c = 0; c < kChunks && chunks[c]; ++c) {
    Record* chunk = chunks[c];
    chunks[c] = nullptr;
    memory_.release(chunk, kChunkBytes);
  }
  memory_.release(chunks, kIndexBytes);
}

}  // namespace memoplan::record
