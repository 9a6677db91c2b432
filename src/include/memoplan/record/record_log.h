// The records of a profiled stretch of allocations: for each one its key, size, alignment, thread,
// and lifetime on the log's own event clock (every allocation and every free is one tick). Both
// ways in record into it: the LD_PRELOAD shim (one log per thread, no lock) and the LibTorch
// extension's tagged allocator (one log per profiling session, under the allocator's lock).
// to_trace() (trace_of.h) turns a stretch of it into the planner's trace.
//
// Records live in fixed chunks that never move, so a free on another thread can close a record
// while the owner appends. Memory comes from the caller's MemorySource (the shim is the malloc and
// cannot use it); nothing here calls malloc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace memoplan::record {

inline constexpr uint64_t kLive = ~uint64_t{0};         // end of a record still alive
inline constexpr uint64_t kForeign = ~uint64_t{0} - 1;  // freed off the log's clock: never planned

struct Record {
  uint64_t key;    // what replay matches a request by (shim: call site and size; torch: op path)
  uint64_t site;   // the key without the size (shim: the call site alone); else = key
  uint64_t size;   // bytes requested
  uint64_t align;  // alignment requested
  uint64_t begin;  // tick of the allocation
  std::atomic<uint64_t> end;  // tick of the free, kLive or kForeign
  uint32_t thread;            // the recording side's thread index
};

// Memory for the log's chunks and their index, and where it goes back to. Its contents need not be
// zero: the log writes every record it appends and clears the index itself, so a chunk's pages are
// touched only as records fill them (a thread that profiles a few blocks and ends, as most
// processes' first threads do, faults in one page, not a chunk's 56).
struct MemorySource {
  void* (*allocate)(size_t bytes);
  void (*release)(void* p, size_t bytes);
};
// Anonymous mmap: what a malloc-free caller uses.
MemorySource mmap_memory();

class RecordLog {
 public:
  static constexpr uint64_t kPerChunk = 4096;
  static constexpr uint64_t kChunks = 1024;  // at most 4M records
  static constexpr uint64_t kNone = ~uint64_t{0};

  explicit RecordLog(MemorySource memory = mmap_memory()) : memory_(memory) {}
  ~RecordLog() { clear(); }
  RecordLog(const RecordLog&) = delete;
  RecordLog& operator=(const RecordLog&) = delete;

  enum class Full : uint8_t { kNo, kOutOfMemory, kCapacity };
  // Records an allocation at the next tick; its index, or kNone (and why through `full`).
  uint64_t append(uint64_t key, uint64_t size, uint64_t align, uint32_t thread, Full* full) {
    return append(key, key, size, align, thread, full);
  }
  uint64_t append(uint64_t key, uint64_t site, uint64_t size, uint64_t align, uint32_t thread,
                  Full* full);
  // The allocation `index` is freed now, on the log's clock (the owner, or under its lock).
  void close(uint64_t index) { at(index).end.store(tick_++, std::memory_order_relaxed); }
  // Freed where the log's clock does not run (another thread of the shim): never planned.
  void close_foreign(uint64_t index) { at(index).end.store(kForeign, std::memory_order_relaxed); }

  Record& at(uint64_t i) { return chunks_[i / kPerChunk][i % kPerChunk]; }
  const Record& at(uint64_t i) const { return chunks_[i / kPerChunk][i % kPerChunk]; }
  uint64_t count() const { return count_; }
  uint64_t tick() const { return tick_; }
  // Bytes the log holds now (chunks and their index).
  uint64_t footprint_bytes() const;

  // Gives every chunk back; the log starts empty. Precondition: no record is reachable any more
  // (nothing alive can close one).
  void clear();

 private:
  MemorySource memory_;
  Record** chunks_ = nullptr;  // kChunks pointers
  uint64_t count_ = 0;
  uint64_t tick_ = 0;
};

}  // namespace memoplan::record
