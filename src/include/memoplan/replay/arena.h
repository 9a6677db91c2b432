// The arena: one thread's slab for one plan. A planned block lives at base + its offset, handed out
// only when it overlaps no block alive in the arena (the live-range guard), so a program that
// deviates from its plan gets fallback memory, never memory still in use. Both ways in replay
// through it: the shim (one arena per inference thread) and the LibTorch extension (one per thread
// and plan).
//
// Arenas live in one ArenaRegion: a reserved vm::SlotRegion (one slot per arena, so "is this an
// arena block, and whose" is a range check and a shift) and a table of Arena objects by slot that
// is mapped once and never freed, so a free on another thread can always reach the arena state
// even while its owner exits.
//
// Threads. The owner places and frees its blocks without a lock. Another thread's free pushes the
// block on the arena's lock-free stack, which the owner drains at its next placement. When the
// owner exits (retire()) with blocks still alive, the arena goes back with the free of its last
// block, on whichever thread: the pusher's push and its reading of `exited`, and the owner's
// setting of `exited` and its last drain, are sequentially consistent, so one of them always sees
// the other; the arena's small spin lock orders the release. Never calls malloc.
//
// Idle arenas. An inference thread that stops getting requests keeps its slab's pages resident.
// ArenaRegion::discard_idle (run now and then by one thread: the shim's reaper) gives back the
// pages of an arena with no block alive and no placement for a while. The owner pays nothing for
// this but two counter stores and one more load per placement: it announces each placement (the
// count goes odd) before it looks at `reaping_` and closes it (even) once the block is in the
// live set; the reaper leaves an arena alone while the count is odd, claims the arena before it
// looks at the count again, and an asymmetric barrier (membarrier) between the reaper's two steps
// makes sure one of them sees the other. (With one announcement only, a placement announced
// before the reaper's sample and not yet in the live set let the reaper zero a block the owner
// was about to write: `ReaperNeverDiscardsUnderALiveBlock` caught it once under ASan.) A claimed
// arena's owner waits out the madvise at its next placement (rare: the arena was idle) and finds
// its pages as fresh zeros; the owner's own slow paths that give the arena or its pages back claim
// it from the reaper first.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memoplan/replay/counters.h"
#include "memoplan/replay/live_ranges.h"
#include "memoplan/vm/slot_region.h"

namespace memoplan::replay {

class ArenaRegion;

class Arena {
 public:
  // Owner only, every replayed request: the block [offset, offset + size), or nullptr and why
  // (kOverlap: memory still in use; kGuardFull: too many live blocks to track).
  __attribute__((always_inline)) void* place(uint64_t offset, uint64_t size, Fallback* why) {
    return announced([&] { return place_announced(offset, size, why); });
  }

  // Owner only: the block [offset, offset + size) laid over live blocks the plan shares it with
  // (its op's dying input, a concat's inputs), each of which must lie inside one of `allowed`
  // (sorted, disjoint: the places the caller checked those blocks are at); nullptr and why
  // otherwise. See LiveRanges, "Shared ranges".
  void* place_shared(uint64_t offset, uint64_t size, const ByteRange* allowed,
                     uint32_t allowed_count, Fallback* why);
  // Owner only: applies the frees other threads made.
  void drain_remote_frees();
  // Owner only, with no block alive: gives the pages back to the OS (MADV_DONTNEED; the arena stays
  // mapped and reads as zeros). Returns the bytes given back (0 when a block is alive).
  uint64_t discard_pages();
  // Owner only: a block placed at offset `from` or above, of `min_bytes` or more, gives its whole
  // pages back (MADV_DONTNEED) when freed, and the next block there faults them in afresh. The
  // shim's large escaping blocks (escaping.h): a pass's output stays alive into the next pass,
  // so its two places would otherwise both stay resident, where a general allocator (mimalloc's
  // segment of its own, glibc's mmap) holds the freed one's pages no longer. Default: none.
  void discard_when_freed(uint64_t from, uint64_t min_bytes) {
    discard_from_ = from;
    discard_min_bytes_ = min_bytes;
  }

 private:
  // Runs a placement announced: the count goes odd, then the reaper is looked for; even again
  // once the block is in the live set (see "Idle arenas" above).
  template <typename Place>
  __attribute__((always_inline)) void* announced(Place&& place) {
    const uint64_t count = placements_.load(std::memory_order_relaxed) + 1;
    placements_.store(count, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (__builtin_expect(reaping_.load(std::memory_order_relaxed) != kNoReaper, 0)) {
      wait_for_reaper();
    }
    void* block = place();
    placements_.store(count + 1, std::memory_order_release);
    return block;
  }

  __attribute__((always_inline)) void* place_announced(uint64_t offset, uint64_t size,
                                                       Fallback* why) {
    if (remote_frees_.load(std::memory_order_relaxed)) drain_remote_frees();
    const uint64_t hi = offset + (size ? size : 1);
    if (live_.overlaps(offset, hi)) {
      *why = Fallback::kOverlap;
      return nullptr;
    }
    if (!live_.insert(offset, hi)) {
      *why = Fallback::kGuardFull;
      return nullptr;
    }
    if (sizes_) sizes_[offset >> 6].store(size, std::memory_order_relaxed);
    live_bytes_ += size;
    if (live_bytes_ > peak_live_bytes_.load(std::memory_order_relaxed)) {
      peak_live_bytes_.store(live_bytes_, std::memory_order_relaxed);
    }
    return base_ + offset;
  }

 public:
  // Owner only: gives the arena back if none of its blocks is alive (true then), e.g. to switch
  // plans. The Arena must not be used after it returned true.
  bool release_if_empty();
  // The owner is done with it (thread exit, or a thread a fork left behind): back now if empty,
  // else with its last block's free. The Arena must not be used by the caller afterwards. Called
  // by the owner itself, or once the owner's token can no longer be taken by another thread (a
  // thread's token must not match a retired arena's until retire() has forgotten it).
  void retire();
  char* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t live_bytes() const { return live_bytes_; }  // owner only
  uint32_t live_blocks() const { return live_.count(); }
  uint64_t peak_live_bytes() const { return peak_live_bytes_.load(std::memory_order_relaxed); }

 private:
  friend class ArenaRegion;
  // A block that is not alive here (a double free, an interior pointer, a block of an arena given
  // back) goes to the region's invalid-free handler: the guard would otherwise forget the range of
  // whichever block lives there now and hand its memory out again.
  void free_local(void* p) {
    const uint64_t offset = static_cast<uint64_t>(static_cast<char*>(p) - base_);
    const uint64_t length = live_.release(offset);
    if (__builtin_expect(length == 0, 0)) return invalid_free(p);
    if (length == LiveRanges::kStillHeld) return;
    live_bytes_ -= length;
    if (__builtin_expect(offset >= discard_from_, 0)) discard_freed(offset, length);
  }
  void invalid_free(void* p);
  void discard_freed(uint64_t offset, uint64_t length);  // discard_when_freed's rule
  // The reaper's claim on the arena (reaping_): none, discarding now, pages discarded (the owner
  // clears it at its next placement), or closed (the owner gives the arena or its pages back).
  static constexpr uint8_t kNoReaper = 0, kReaping = 1, kDiscarded = 2, kClosed = 3;
  void wait_for_reaper();  // owner, placing: waits out a discard, then clears the claim
  void close_to_reaper();  // owner, before giving pages or the arena back
  void open_to_reaper() { reaping_.store(kNoReaper, std::memory_order_release); }
  // In a forked child, for an arena whose owner did not come along: retire() that trusts the
  // bookkeeping less. The owner may have been in the middle of an update at the fork (a live
  // range half shifted, a drained remote free not yet applied), so a free that matches no live
  // block here is ignored instead of reported. Such an update can only leave the arena holding
  // more than it should (it is then never given back): never an early release.
  void retire_after_fork() {
    lenient_ = true;
    retire();
  }
  void release();  // under lock_ or by the owner: parks it (Config::parked) or unmaps it
  void unmap();    // unmaps and frees the slot

  ArenaRegion* region_ = nullptr;
  uint32_t index_ = 0;
  char* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::atomic<const void*> owner_{nullptr};  // the owning thread's token; null once retired
  LiveRanges live_;
  ByteRange* live_storage_ = nullptr;
  size_t live_storage_bytes_ = 0;
  std::atomic<uint64_t>* sizes_ = nullptr;  // block size by 64-byte offset (track_sizes only)
  size_t sizes_bytes_ = 0;
  uint64_t live_bytes_ = 0;
  uint64_t discard_from_ = ~uint64_t{0};  // discard_when_freed's
  uint64_t discard_min_bytes_ = 0;
  std::atomic<uint64_t> peak_live_bytes_{0};
  std::atomic<void*> remote_frees_{nullptr};  // intrusive stack through the freed blocks
  std::atomic<uint64_t> placements_{0};  // owner-written, odd while placing; read by the reaper
  std::atomic<uint8_t> reaping_{kNoReaper};
  std::atomic<uint32_t> incarnation_{0};  // bumped by create(): the reaper's samples go stale
  std::atomic<bool> exited_{false};
  bool lenient_ = false;                      // retired in a fork child: see retire_after_fork
  std::atomic_flag lock_ = ATOMIC_FLAG_INIT;  // orders a retired arena's release
};

class ArenaRegion {
 public:
  struct Config {
    unsigned largest_shift = 32;  // arena size 2^shift, tried from largest to smallest
    unsigned smallest_shift = 24;
    unsigned shift_step = 2;
    uint32_t arenas = 1024;             // alive at once; rounded up to a power of two
    uint32_t guard_capacity = 1 << 14;  // live blocks per arena
    bool track_sizes = false;           // usable_size() of any block (malloc_usable_size, realloc)
    // madvise(MADV_HUGEPAGE) on arenas of 2 MiB or more: a slab is reused pass after pass, all of
    // it, so 2 MiB pages cost no memory and save TLB misses and the first pass's page faults
    // (where the kernel's transparent_hugepage setting is "madvise" or "always"; "never" ignores
    // it). Arenas are aligned to their slot, so their huge pages are whole.
    bool huge_pages = false;
    // Arenas given back (an owner's exit, its last block's free) kept mapped, at most this many
    // (up to kMaxParked), for the next create() of the same size: a server that runs each request
    // on a new thread then finds its slab's pages there instead of faulting them in again.
    // discard_idle releases those kept for idle_ns, release_parked all of them. 0: none kept.
    uint32_t parked = 0;
    // Nonzero: the arenas (2^largest_shift each) lie in [within, within + bytes(config)), which
    // the caller reserved (PROT_NONE, aligned to an arena) and keeps mapped; the shim's slabs share
    // one range with its tags (interpose/unplanned.h).
    uintptr_t within = 0;
  };
  static constexpr uint32_t kMaxParked = 64;
  static uint32_t arena_count(const Config& config);  // arenas rounded up to a power of two
  static uint64_t bytes(const Config& config) {
    return uint64_t{arena_count(config)} << config.largest_shift;
  }
  // Reserves the address space (or takes config.within's). False (errno set) when it cannot be
  // had.
  bool reserve(const Config& config);
  bool reserved() const { return slots_.reserved(); }
  bool contains(const void* p) const { return slots_.contains(p); }
  const vm::SlotRegion& region() const { return slots_; }
  uint64_t arena_bytes() const { return slots_.slot_bytes(); }  // the largest arena
  // Arenas owned or holding live blocks (parked ones not counted), and parked ones.
  uint32_t arenas_in_use() const { return slots_.slots_in_use() - arenas_parked(); }
  uint32_t arenas_parked() const { return parked_published_.load(std::memory_order_relaxed); }
  uint32_t arena_count() const { return slots_.slot_count(); }

  enum class Failure : uint8_t { kNone, kTooLarge, kNoArena, kMapFailed };
  // An arena of `bytes` owned by the thread whose token is `owner`; nullptr and why when the
  // region is full or its memory cannot be mapped (a map failure is counted).
  Arena* create(uint64_t bytes, const void* owner, Failure* why);
  // The arena holding p. Precondition: contains(p).
  Arena& arena_of(const void* p) { return arenas_[slots_.slot_of(p)]; }
  // Frees an arena block from any thread; `caller` is the calling thread's token. The owner's own
  // block is one erase here; another thread's goes through free_remote.
  void free(void* p, const void* caller) {
    Arena& a = arena_of(p);
    if (caller && a.owner_.load(std::memory_order_relaxed) == caller) return a.free_local(p);
    free_remote(a, p);
  }
  // The size the block at p was placed with (track_sizes only).
  uint64_t usable_size(const void* p) const;

  // Where the region counts remote frees, late releases and map failures (may stay null).
  void set_counters(SharedCounters* counters) { counters_ = counters; }
  // For the fault tests: called before each mapping an arena makes; true makes it fail.
  void set_map_fault(bool (*should_fail)()) { map_fault_ = should_fail; }
  // In a forked child, where only the thread whose token is `survivor` came along: every arena
  // lock goes free (its holder did not come along), and every arena another thread still owned
  // is retired as its owner's exit would (given back now if empty, else with its last block's
  // free). Reads only this region's table, never the other threads' own state, which the fork
  // may have caught half-way through an update (an arena given back but not yet forgotten, one
  // made but not yet recorded): an arena they no longer own is theirs no more.
  void after_fork_in_child(const void* survivor);
  // Unmaps everything, the Arena table included; for tests, once no block can be freed any more.
  void release_all();

  // Gives back (MADV_DONTNEED) the pages of every owned arena that had no block alive and made no
  // placement between two calls at least `idle_ns` apart by `now_ns`; returns the arena bytes
  // given back. One caller at a time (the shim's reaper thread); the owners never wait for it
  // except when they place into an arena it is discarding right now. False from
  // idle_discard_supported() when the kernel has no membarrier: then this does nothing.
  uint64_t discard_idle(uint64_t now_ns, uint64_t idle_ns);
  static bool idle_discard_supported();
  // Releases every parked arena (Config::parked; malloc_trim); returns their bytes.
  uint64_t release_parked();
  // Called with a pointer freed into an arena where no block starts (a double free or an invalid
  // pointer). The default writes one line to stderr and aborts, as glibc does: going on would let
  // the guard hand out the memory of the block that lives there now.
  void set_invalid_free_handler(void (*handler)(void* p)) { invalid_free_ = handler; }

 private:
  friend class Arena;
  void free_remote(Arena& a, void* p);
  // Arenas given back but kept (Config::parked): park() takes one (false: full, or none kept),
  // take_parked() hands one of `bytes` out again, release_parked_if() releases those `pred` picks.
  // Under parked_lock_, which no thread holds while it waits for anything else.
  bool park(Arena& a);
  Arena* take_parked(uint64_t bytes);
  template <typename Pred>
  uint64_t release_parked_if(Pred pred);
  Arena* start(Arena& a, const void* owner);  // create()'s last step, for a new or parked arena
  void count(std::atomic<uint64_t> SharedCounters::*counter, uint64_t n = 1) {
    if (counters_) SharedCounters::bump(counters_->*counter, n);
  }

  vm::SlotRegion slots_;
  Arena* arenas_ = nullptr;  // by slot; mapped once, never freed
  size_t arenas_bytes_ = 0;
  // discard_idle's view of each arena at its last call: placements, since when, which incarnation.
  struct IdleSample {
    uint64_t placements;
    uint64_t since_ns;
    uint32_t incarnation;
    bool known;
  };
  IdleSample* idle_samples_ = nullptr;  // by slot; mapped at the first discard_idle
  size_t idle_samples_bytes_ = 0;
  Config config_;
  struct Parked {
    uint32_t index = 0;
    uint64_t since_ns = 0;  // CLOCK_MONOTONIC
  };
  // Initialized like every member: the shim's Global must be constant-initialized (malloc runs
  // before any constructor of the library does).
  Parked parked_[kMaxParked] = {};
  uint32_t parked_count_ = 0;
  std::atomic<uint32_t> parked_published_{0};  // parked_count_ for readers without the lock
  std::atomic_flag parked_lock_ = ATOMIC_FLAG_INIT;
  SharedCounters* counters_ = nullptr;
  bool (*map_fault_)() = nullptr;
  void (*invalid_free_)(void* p) = nullptr;
};

}  // namespace memoplan::replay
