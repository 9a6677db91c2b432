// The profiling allocator: a c10::Allocator that gives every allocation of a recorded thread its
// own slot of a tag region (record::TagRegion, 2^16 slots, the runtime the shim records with too),
// so the slot index of any pointer into the block, a view's or an interior one, is its tag: a
// subtraction and a shift. Requests larger
// than a slot (or made when no slot is free) get 64-byte-aligned heap memory and are found through
// an ordered map instead; both kinds are recorded. Zero-byte requests get a null DataPtr, as c10's
// own allocator gives them, and are only counted.
//
// LibTorch constraints it meets (1.13 and 2.6): the DataPtr's context equals its data pointer and
// raw_deleter() is non-null (oneDNN allocates through raw_allocate and asserts both), pointers stay
// canonical (no tag bits in 48-63), data is 64-byte aligned (c10's alignment).
//
// One process-wide instance that is never destroyed: a block's deleter may run on any thread,
// long after its session ended, at exit included.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "memoplan/record/tag_region.h"
#include "memoplan/torch/allocator_base.h"
#include "record_table.h"

namespace memoplan::torch_ext {

class TaggedAllocator final : public AllocatorBase<TaggedAllocator> {
 public:
  static TaggedAllocator& instance();

  c10::DataPtr allocate_block(size_t bytes) const;
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

  // Reserves the tag region (first call only; the largest slot size the address space allows).
  void prepare();
  // A block no session records, in a tag slot of its own, whose pages go back to the OS at its
  // free: the warm-up passes of a module being planned (so what they allocated is not kept next to
  // the slab). An empty DataPtr when there is no region or slot (the caller asks another).
  c10::DataPtr allocate_exact(size_t bytes);
  // Whether p is in the tag region (a block of this allocator); for raw deleters that must route
  // a bare pointer (oneDNN frees through c10's raw_deleter). The region never moves once reserved.
  bool owns(const void* p) const { return region_.contains(p); }
  uint64_t slot_bytes() const;

  // Where requests go that no session records (set while the allocator is installed).
  void set_fallback(c10::Allocator* fallback) { fallback_.store(fallback); }

  // Starts recording the calling thread's (or, with all_threads, every thread's) allocations into
  // `table` under a new session id, which it returns; 0 when all_threads and another all-threads
  // session is live. detach() stops recording into that session: later frees of its blocks only
  // release memory.
  uint64_t attach(RecordTable* table, bool all_threads);
  void detach(uint64_t session);
  // Whether the calling thread records into a live session of its own now.
  bool thread_attached() const;

  // Runs `f(table)` for the live session under the allocator's lock (nullptr when not live).
  template <typename F>
  auto with_table(uint64_t session, F&& f) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return f(live_table(session));
  }
  // Row id in `session` of the live block holding p.
  std::optional<uint64_t> find(uint64_t session, const void* p) const;

  static uint64_t thread_number();  // process-wide, never reused
  // While set, the calling thread's requests go where no session records them (an all-threads
  // session included). Returns the previous setting.
  static bool set_thread_unrecorded(bool unrecorded);

 private:
  struct Block {           // an untagged block
    uint64_t session = 0;  // 0: no session records it
    uint64_t row = 0;
    size_t bytes = 0;
  };
  struct Session {
    uint64_t id;
    RecordTable* table;
  };

  TaggedAllocator() = default;
  c10::DataPtr make_block(size_t bytes);
  static void free_block(void* p);
  void release(void* p);
  RecordTable* live_table(uint64_t session) const;  // under mutex_
  uint64_t recording_session() const;               // under mutex_; 0 when none

  record::TagRegion region_;  // blocks' session and row are its slots' owner and record
  std::atomic<c10::Allocator*> fallback_{nullptr};
  std::atomic<bool> all_threads_{false};  // fast check for threads not attached themselves

  mutable std::mutex mutex_;  // everything below
  bool prepared_ = false;
  std::map<uintptr_t, Block> untagged_;
  std::vector<Session> sessions_;
  uint64_t all_threads_session_ = 0;
  uint64_t next_session_ = 1;
};

}  // namespace memoplan::torch_ext
