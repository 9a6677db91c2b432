// Where profiled allocations live while they are recorded: a vm::SlotRegion of 2^16 slots, one
// block a slot, so the slot index of any pointer into a block (a view's, an interior one) is the
// block's tag and leads to its record with a subtraction and a shift, from any thread.
// Pointers stay canonical (no tag bits in 48-63) and 64-byte aligned.
//
// Each slot remembers who recorded its block (an owner word and a record index) and how many
// bytes it has mapped. Freed slots may keep their pages for the next block of the same size class
// (`retain_bytes` in all), which saves two system calls, a TLB shootdown and the page faults of
// fresh pages per profiled allocation; trim() gives them back. Sizes are mapped rounded up to a
// class (exact up to 8 pages, then 4 classes per doubling: at most 25% over). A kept slot serves
// its own class and the next four, its pages past the block's class unmapped (kKeepTail: left
// for a larger block later), since a block that lives on would hold them: gpt_decoder frozen's
// weights, loaded into the slots of the load's temporaries, peaked 1,451 MiB, 1,392 cut (mimalloc
// 1,410). Where none of those is kept, another kept slot is fitted to
// the block (a larger one's pages past it unmapped, a smaller one's mapped on), and pages mapped
// anew past the region's peak of mapped bytes give back as many kept bytes: the peak grows only
// while nothing is kept, so it is the live blocks' pages, and below it kept pages stay for the
// next pass. Peak RSS under the shim, before -> after: python3's benchmark (run_shim_programs.py)
// 92.4 -> 89.1 MiB, mimalloc alone 83.5; eager resnet18, 40 passes, 336.5 -> 319.6, mimalloc 318.1.
// Below the peak too, a slot kept kRefitAfterNs ago or more is fitted before fresh pages are
// mapped: its size did not come back. A model's load sets the peak and frees its temporaries
// last (bert_encoder eager: 27 MiB of the layer its encoder copies), and its passes make other
// sizes; they had mapped fresh pages beside those. Peak RSS 697-702 -> 695-696 MiB (glibc
// 688-690), resnet18 traced 354 -> 342-344 (glibc 335-353); bench/large_blocks, whose sizes come
// back within microseconds, as fast (refitting every slot at once made it 2x slower).
// A small block never pins a large block's pages. Kept slots sit on one lock-free stack per class
// (LIFO: the most recently used pages first). Lock-free; never calls malloc (the shim uses it).
//
// Blocks of 64 KiB or less take small slots: the region's first 16 slots (where they are 4 MiB or
// more) are cut into up to 2^16 slots of 64 KiB, tagged after the large ones. Small blocks then sit
// 64 KiB apart, 32 to a page-table page, instead of one page-table page (and a page-walk of its
// own) each: sqlite3, which profiles thousands of 4 KiB pages, held 15.7 MiB of page tables with
// 256 MiB slots for all. The whole range stays one range check. share_small_slots() packs blocks
// of 32 KiB or less further, several to a small slot (shared_slots.h; the shim's choice).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memoplan/record/shared_slots.h"
#include "memoplan/vm/slot_region.h"

namespace memoplan::record {

class TagRegion {
 public:
  static constexpr uint32_t kSlots = 1u << 16;        // large slots
  static constexpr unsigned kSmallShift = 16;         // small slots: 64 KiB
  static constexpr uint32_t kSmallSetAside = 16;      // large slots cut into small ones
  static constexpr unsigned kSmallFromShift = 22;     // only when large slots are 4 MiB or more
  static constexpr uint64_t kRefitAfterNs = 1000000;  // a kept slot's size has not come back

  // Reserves the region with the largest slot size from 2^largest_shift down to 2^smallest_shift
  // (step 2^step) that the address space allows. False (errno set) when none.
  bool reserve(unsigned largest_shift, unsigned smallest_shift, unsigned step);
  // The same in [base, base + bytes(shift)), reserved by the caller (PROT_NONE, aligned to
  // 2^shift) and left mapped by release_all: the shim keeps its tags, slabs and bootstrap pool in
  // one range (interpose/unplanned.h).
  bool adopt(uintptr_t base, unsigned shift);
  static constexpr uint64_t bytes(unsigned shift) { return uint64_t{kSlots} << shift; }
  bool reserved() const { return slots_.reserved(); }
  bool contains(const void* p) const { return slots_.contains(p); }
  const vm::SlotRegion& region() const { return slots_; }
  uint64_t slot_bytes() const { return slots_.slot_bytes(); }   // the largest block
  uint32_t small_slots() const { return small_.slot_count(); }  // 0: every block takes a large one
  // From here on blocks of 32 KiB or less share small slots (SharedSlots): packed; a freed
  // block's pages serve its slot's next block, or go back once the slot is full. False where
  // there are no small slots.
  bool share_small_slots();
  uint32_t slots_in_use() const {
    return slots_.slots_in_use() - (small_.reserved() ? kSmallSetAside : 0) + small_.slots_in_use();
  }

  // At most this many slots in use at once (0: every slot). Each is a mapping of its own (about
  // two VMAs): a host near vm.max_map_count would see its own mmap calls fail.
  void set_live_limit(uint32_t slots) { live_limit_.store(slots, std::memory_order_relaxed); }
  uint32_t live_limit() const { return live_limit_.load(std::memory_order_relaxed); }

  // Freed slots keep up to this many bytes mapped in all, and only under the region's peak of
  // mapped bytes (0: every free unmaps, the default).
  void set_retain_bytes(uint64_t bytes) { retain_limit_.store(bytes, std::memory_order_relaxed); }

  enum class Miss : uint8_t { kNone, kTooLarge, kNoSlot, kOverLimit, kCommitFailed };
  // A block of `bytes` recorded by (owner, record); nullptr and why when there is none. `zero`:
  // the block must read as zeros (fresh pages are; a slot that kept its pages is cleared). The
  // block is aligned to its slot's size: `alignment` past a small slot's takes a large one.
  // `flags`, of Take:
  // - kKeepTail: a kept slot of a larger class keeps its pages past the block.
  // - kPopulateRepeated: a block of kPopulateFrom bytes or more, of a size class whose blocks
  //   were written whole, has its fresh pages up to its end made resident here in one call
  //   (MADV_POPULATE_WRITE), not a page fault each when first written. A profiled pass's large
  //   blocks are written whole, and the kept-page rules above give back pages its next blocks
  //   map again: a fault costs 10-20 times a populated page where faults are dear (a VM: 11-13
  //   us against 0.5-0.8). Learnt per class: a block whose pages were all fresh and that was not
  //   populated (the class's first, then one in kProbeEvery) is a probe; at its free, mincore
  //   says whether all its pages were written, and the class populates from then on or not.
  //   bench/large_blocks writes two bytes of each 5-25 MiB block: populated by a rule without
  //   probes, it peaked at 364 MiB against 12. Smaller blocks map lazily: CNN passes freed
  //   blocks of 32-340 KiB with part of their pages untouched, and populating their classes
  //   cost 0.3-0.5 MiB of peak RSS. Nothing where the kernel lacks it (before Linux 5.14).
  // - kKeepIfReturning: at its free the block keeps its pages only if its size class was asked
  //   for again since one of its blocks was freed (the class's first free unmaps; a take with the
  //   flag marks the classes whose kept slots could serve it). A pass's sizes come back within
  //   it or at the next; a model's load frees its temporaries once, in sizes its passes do not
  //   ask for, and kept, their pages stood beside the first pass's and what the fallback took
  //   meanwhile: bert_encoder eager under the shim peaked at 691.6 MiB, 689.7 with the flag
  //   (glibc 688.6; 3 runs each). The cost: the first pass's blocks of sizes made once a pass
  //   map afresh at the second (mobilenet_v2 eager, its first ten passes: 382-430 ms, 404-494
  //   with it, in three paired runs; steady passes and peaks of CNNs as before).
  enum Take : unsigned { kKeepTail = 1, kPopulateRepeated = 2, kKeepIfReturning = 4 };
  static constexpr uint64_t kPopulateFrom = 512 << 10;
  static constexpr uint32_t kProbeEvery = 8;
  void* take(uint64_t bytes, bool zero, uintptr_t owner, uint64_t record, Miss* why,
             uint64_t alignment = 64, unsigned flags = 0);

  struct Owner {
    uintptr_t owner;
    uint64_t record;
    uint64_t bytes;
  };
  // Who recorded the live block holding p. Precondition: contains(p) and the block is alive.
  Owner owner_of(const void* p) const {
    const uint32_t tag = tag_of(p);
    const int64_t shared = shared_slot(tag);
    if (shared >= 0) {
      const SharedSlots::Entry& e = shared_.entry(static_cast<uint32_t>(shared), p);
      return Owner{e.owner, e.record, e.bytes};
    }
    const Slot& s = table_[tag];
    return Owner{s.owner, s.record, s.bytes};
  }
  // The live block holding p (by its holder) grows or shrinks to `bytes` in place: its slot's
  // pages are mapped up to the size class of `bytes` (none are unmapped). False, the block
  // unchanged, past the slot's size or when the pages cannot be mapped.
  bool resize(const void* p, uint64_t bytes);
  // Frees the block holding p (from any thread): its pages are kept (within retain_bytes) or
  // unmapped; `keep` false: unmapped (no block of the caller's is coming to reuse them). A block
  // packed in a shared small slot follows that slot's rule either way (shared_slots.h).
  void give_back(const void* p, bool keep = true);
  // Unmaps the pages every free slot kept; trim_to: of kept slots, the largest first, until at
  // most `bytes` stay kept.
  void trim();
  void trim_to(uint64_t bytes);
  uint64_t retained_bytes() const { return retained_.load(std::memory_order_relaxed); }
  // Requests that found their class held by expire_kept and waited kHoldWaits yields for it in
  // vain (they mapped fresh pages instead).
  uint64_t waits_run_out() const { return waits_run_out_.load(std::memory_order_relaxed); }

  // Kept slots of `min_bytes` or more keep their pages for `after_ns` at most (0: no limit; a
  // later call for larger sizes overrides it there). Pages kept longer wait for no block of
  // their own pass: a model's load frees its temporaries into the kept slots, and they sat beside
  // the first passes' pages; a large block's pages help only a program that frees and makes such
  // blocks back to back (mimalloc 2 unmaps a block over 16 MiB at free). expire_kept(now_ns,
  // min_bytes), called now and then by someone (the shim's reaper), unmaps the kept slots of
  // `min_bytes` or more kept longer; returns their bytes. It holds a class's slots only where
  // one is due, for a walk without system calls: a request of that class meanwhile waits for the
  // recent ones rather than map fresh pages.
  void set_kept_expiry(uint64_t min_bytes, uint64_t after_ns);
  uint64_t expire_kept(uint64_t now_ns, uint64_t min_bytes = 0);
  // Whether a free slot of `min_bytes` or more keeps its pages now.
  bool keeps(uint64_t min_bytes) const;

  // For the fault tests: called before each slot's pages are mapped; true makes it fail.
  void set_commit_fault(bool (*should_fail)()) { commit_fault_ = should_fail; }
  // For the tests: takes (false: another holds it) or releases expire_kept's hold on the size
  // class of blocks of `bytes`.
  bool hold_class_for_tests(uint64_t bytes, bool hold);

  void release_all();  // for tests

 private:
  bool set_up();  // after slots_ are reserved: the table and the small slots (false: released)

  struct Slot {  // written by the slot's holder only (between acquire and release)
    uintptr_t owner;
    uint64_t record;
    uint64_t bytes;
    uint64_t committed;             // bytes mapped read-write, possibly kept while the slot is free
    std::atomic<uint64_t> kept_at;  // CLOCK_MONOTONIC ns when it was last kept (read by others)
    uint8_t probe;  // kPopulateRepeated: a probe's size class + 1 (0: none), told at its free
    bool keep_if_returning;  // taken with kKeepIfReturning
  };
  // The table of slots and the kept stacks' links: one mapping, made at reserve().
  static constexpr size_t kTableBytes = (sizeof(Slot) + sizeof(uint32_t)) * 2 * size_t{kSlots};
  static constexpr int kClasses = 96;
  // Tags: large slot i is i, small slot i is kSlots + i (table_ and next_ have both).
  uint32_t tag_of(const void* p) const {
    return small_.contains(p) ? kSlots + small_.slot_of(p) : slots_.slot_of(p);
  }
  const vm::SlotRegion& region_of(uint32_t tag) const { return tag < kSlots ? slots_ : small_; }
  vm::SlotRegion& region_of(uint32_t tag) { return tag < kSlots ? slots_ : small_; }
  static uint32_t index_of(uint32_t tag) { return tag < kSlots ? tag : tag - kSlots; }
  bool acquire(uint64_t mapped, bool small, uint32_t& tag);
  // The small slot of a shared block's tag, else -1.
  int64_t shared_slot(uint32_t tag) const {
    return tag >= kSlots && shared_.ready() && shared_.shared(tag - kSlots) ? int64_t{tag} - kSlots
                                                                            : -1;
  }
  void release(uint32_t tag);
  // A free slot's pages go back to the kernel and the slot to the free ones.
  void unmap(uint32_t tag);
  // Kept slots of one class: a Treiber stack of slot indices (next_ links them); the head packs
  // the top slot + 1 (0: empty) in the low 32 bits and a change count above it (no ABA).
  // pop_kept waits for a class that expire_kept holds (a bounded while: kHoldWaits yields).
  bool pop_kept(int size_class, uint32_t& slot);
  void push_kept(int size_class, uint32_t slot) { push_kept(size_class, slot, slot); }
  // A chain linked by next_ from top to bottom, pushed in one exchange.
  void push_kept(int size_class, uint32_t top, uint32_t bottom);
  // Empties the class's stack in one exchange; returns its former top + 1 (0: none), the rest
  // linked below it.
  uint32_t take_all_kept(int size_class);
  static constexpr int kHoldWaits = 64;
  // expire_kept's hold on a class: one holder at a time (false: another call holds it); its count
  // is odd while held.
  bool try_hold(int size_class);
  void release_hold(int size_class);
  // Whether the kept slot `index` was kept after_ns ago or more.
  bool kept_past(uint32_t index, uint64_t now_ns, uint64_t after_ns) const;
  // Whether the class seems to keep such a slot (no hold when none: a class in use keeps only
  // recent ones); a walk past kLookSteps slots answers yes.
  bool any_kept_past(int size_class, uint64_t now_ns, uint64_t after_ns) const;
  static constexpr int kLookSteps = 1024;
  // The pages of a slot taken off the kept stacks past `mapped` bytes go back.
  void cut(uint32_t index, uint64_t mapped);
  // No kept slot of a block's classes: one of another class, kept at before_ns or earlier, is
  // fitted to it (`mapped` bytes), a larger one's pages past the block unmapped, else a smaller
  // one's mapped on to it (`fresh`: those bytes). False when no kept slot can take it.
  bool reshape_kept(int size_class, uint64_t mapped, uint64_t before_ns, uint32_t& index,
                    uint64_t& fresh);
  // pop_kept of a slot kept at before_ns or earlier (false: none, or the class's top is newer).
  bool pop_kept_before(int size_class, uint64_t before_ns, uint32_t& slot);
  // kKeepIfReturning: a take of classes [first, last) marks those a block was freed of as
  // returning. At a free of a block of `size_class`: whether it may keep its pages (its class is
  // returning); where not, records the free, so that the class's next take marks it returning.
  void mark_returning(int first, int last);
  bool note_free_keeps(int size_class);
  // Unmaps kept slots of `bytes` in all, or all there are.
  void trim_by(uint64_t bytes);
  // `bytes` of pages mapped anew for a block: as many kept bytes go back as the region's mapped
  // bytes would pass their peak by, so the peak grows only while nothing is kept.
  void mapped_fresh(uint64_t bytes);
  // kPopulateRepeated for the block of `bytes` at `at` in s, its first `resident` bytes mapped
  // already: populated past them, or made a probe (s.probe), or left as it is.
  void populate_or_probe(Slot& s, int size_class, char* at, uint64_t bytes, uint64_t resident);
  // At the free of the probe in slot `index`: whether its class's blocks are written whole (all
  // its pages resident).
  void learn_whole(uint32_t index);

  vm::SlotRegion slots_;
  vm::SlotRegion small_;                   // inside slots_' first kSmallSetAside slots
  SharedSlots shared_;                     // small_'s slots that blocks of 32 KiB or less share
  Slot* table_ = nullptr;                  // 2 * kSlots entries, mapped at reserve()
  std::atomic<uint32_t>* next_ = nullptr;  // 2 * kSlots entries, in the same mapping
  std::atomic<uint64_t> kept_[kClasses] = {};
  std::atomic<uint64_t> retain_limit_{0};
  std::atomic<uint64_t> retained_{0};
  std::atomic<uint64_t> mapped_{0};       // pages mapped in slots of their own, live or kept
  std::atomic<uint64_t> peak_mapped_{0};  // the most mapped_ has been
  std::atomic<uint32_t> live_limit_{0};
  std::atomic<uint64_t> expiry_ns_[kClasses] = {};  // per class: kept this long at most (0: ever)
  std::atomic<uint32_t> holds_[kClasses] = {};  // per class: expire_kept's holds, odd while held
  std::atomic<uint64_t> waits_run_out_{0};
  std::atomic<uint64_t> whole_[(kClasses + 63) / 64] = {};  // classes written whole, a bit each
  std::atomic<uint32_t> takes_[kClasses] = {};  // per class: blocks that might be populated
  std::atomic<uint64_t> freed_[(kClasses + 63) / 64] = {};      // classes a block was freed of
  std::atomic<uint64_t> returning_[(kClasses + 63) / 64] = {};  // and asked for since
  std::atomic<bool> populate_works_{true};  // false once the kernel refused (EINVAL)
  bool (*commit_fault_)() = nullptr;
};

}  // namespace memoplan::record
