// The arena's slow paths: making and releasing arenas, remote frees, retirement.
#include "memoplan/replay/arena.h"

#include <linux/membarrier.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "memoplan/vm/monotonic.h"

namespace memoplan::replay {
namespace {

constexpr size_t kPage = 4096;
constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;
size_t round_to_pages(size_t bytes) { return (bytes + kPage - 1) & ~(kPage - 1); }

void* map(size_t bytes, bool (*fault)()) {
  if (fault && fault()) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

class SpinLock {
 public:
  explicit SpinLock(std::atomic_flag& flag) : flag_(flag) {
    while (flag_.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinLock() { flag_.clear(std::memory_order_release); }
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

 private:
  std::atomic_flag& flag_;
};

}  // namespace

bool ArenaRegion::reserve(const Config& config) {
  if (reserved()) return true;
  const uint32_t count = arena_count(config);
  const size_t table_bytes = round_to_pages(sizeof(Arena) * count);
  void* table = map(table_bytes, nullptr);
  if (!table) return false;
  if (config.within) {
    slots_.adopt(config.within, config.largest_shift, count);
  } else {
    for (unsigned shift = config.largest_shift;
         shift >= config.smallest_shift && !slots_.reserved() && shift >= config.shift_step;
         shift -= config.shift_step) {
      slots_.reserve(shift, count);
    }
  }
  if (!slots_.reserved()) {
    const int saved = errno;
    munmap(table, table_bytes);
    errno = saved;
    return false;
  }
  arenas_ = static_cast<Arena*>(table);
  for (uint32_t i = 0; i < count; ++i) new (&arenas_[i]) Arena();
  arenas_bytes_ = table_bytes;
  config_ = config;
  return true;
}

uint32_t ArenaRegion::arena_count(const Config& config) {
  uint32_t count = 1;
  while (count < config.arenas) count *= 2;
  return count;
}

Arena* ArenaRegion::create(uint64_t bytes, const void* owner, Failure* why) {
  uint32_t index = 0;
  if (!reserved() || bytes > slots_.slot_bytes()) {
    *why = Failure::kTooLarge;
    return nullptr;
  }
  if (Arena* parked = take_parked(bytes)) {
    count(&SharedCounters::parked_slab_reuses);
    *why = Failure::kNone;
    return start(*parked, owner);
  }
  if (!slots_.acquire(index) &&
      !(release_parked_if([](const Parked&) { return true; }) && slots_.acquire(index))) {
    *why = Failure::kNoArena;
    return nullptr;
  }
  Arena& a = arenas_[index];
  const size_t live_bytes = round_to_pages(config_.guard_capacity * sizeof(ByteRange));
  const size_t sizes_bytes =
      config_.track_sizes ? round_to_pages((bytes / 64 + 1) * sizeof(uint64_t)) : 0;
  void* live = nullptr;
  void* sizes = nullptr;
  const bool mapped = !(map_fault_ && map_fault_()) && slots_.commit(index, bytes ? bytes : 1) &&
                      (!sizes_bytes || (sizes = map(sizes_bytes, map_fault_))) &&
                      (live = map(live_bytes, nullptr));
  if (!mapped) {
    if (sizes) munmap(sizes, sizes_bytes);
    slots_.decommit(index, bytes);  // a partial mapping (or none) back to PROT_NONE
    slots_.release(index);
    count(&SharedCounters::slab_map_failures);
    *why = Failure::kMapFailed;
    return nullptr;
  }
  if (config_.huge_pages && bytes >= kHugePageBytes) {
    // Advice only: where the kernel has no transparent huge pages it fails, and the pages stay
    // small. errno stays as it was (this runs inside the shim's malloc).
    const int saved = errno;
    madvise(slots_.slot_address(index), round_to_pages(bytes), MADV_HUGEPAGE);
    errno = saved;
  }
  a.region_ = this;
  a.index_ = index;
  a.base_ = slots_.slot_address(index);
  a.bytes_ = bytes;
  a.live_storage_ = static_cast<ByteRange*>(live);
  a.live_storage_bytes_ = live_bytes;
  a.sizes_ = static_cast<std::atomic<uint64_t>*>(sizes);
  a.sizes_bytes_ = sizes_bytes;
  *why = Failure::kNone;
  return start(a, owner);
}

Arena* ArenaRegion::start(Arena& a, const void* owner) {
  a.live_.init(a.live_storage_, config_.guard_capacity);
  a.live_bytes_ = 0;
  a.discard_from_ = ~uint64_t{0};
  a.discard_min_bytes_ = 0;
  a.peak_live_bytes_.store(0, std::memory_order_relaxed);
  a.remote_frees_.store(nullptr, std::memory_order_relaxed);
  a.exited_.store(false, std::memory_order_relaxed);
  a.reaping_.store(Arena::kNoReaper, std::memory_order_relaxed);
  a.incarnation_.fetch_add(1, std::memory_order_relaxed);
  a.owner_.store(owner, std::memory_order_release);
  return &a;
}

bool ArenaRegion::park(Arena& a) {
  if (config_.parked == 0) return false;
  SpinLock lock(parked_lock_);
  if (parked_count_ >= config_.parked || parked_count_ >= kMaxParked) return false;
  // As release() forgets the owner before giving the arena back; the pages, the live-range
  // storage and the sizes stay mapped.
  a.owner_.store(nullptr, std::memory_order_relaxed);
  a.exited_.store(false, std::memory_order_relaxed);
  a.lenient_ = false;
  parked_[parked_count_++] = Parked{a.index_, vm::monotonic_ns()};
  parked_published_.store(parked_count_, std::memory_order_relaxed);
  return true;
}

Arena* ArenaRegion::take_parked(uint64_t bytes) {
  if (config_.parked == 0) return nullptr;
  SpinLock lock(parked_lock_);
  for (uint32_t i = parked_count_; i-- > 0;) {  // the most recently parked first: warmest pages
    Arena& a = arenas_[parked_[i].index];
    if (a.bytes_ != bytes) continue;
    parked_[i] = parked_[--parked_count_];
    parked_published_.store(parked_count_, std::memory_order_relaxed);
    return &a;
  }
  return nullptr;
}

template <typename Pred>
uint64_t ArenaRegion::release_parked_if(Pred pred) {
  Arena* released[kMaxParked];
  uint32_t n = 0;
  {
    SpinLock lock(parked_lock_);
    for (uint32_t i = 0; i < parked_count_;) {
      if (pred(parked_[i])) {
        released[n++] = &arenas_[parked_[i].index];
        parked_[i] = parked_[--parked_count_];
      } else {
        ++i;
      }
    }
    parked_published_.store(parked_count_, std::memory_order_relaxed);
  }
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < n; ++i) {  // outside the lock: munmap takes the kernel's
    bytes += released[i]->bytes_;
    released[i]->unmap();
  }
  return bytes;
}

uint64_t ArenaRegion::release_parked() {
  const uint64_t bytes = release_parked_if([](const Parked&) { return true; });
  if (bytes) count(&SharedCounters::released_bytes, bytes);
  return bytes;
}

void ArenaRegion::free_remote(Arena& a, void* p) {
  // Another thread's arena: hand the block back through its lock-free stack; the owner removes
  // it from its live ranges at its next placement. Planned sizes are multiples of 64 bytes (and
  // at least 8), so the link fits.
  count(&SharedCounters::remote_frees);
  void* head = a.remote_frees_.load(std::memory_order_relaxed);
  do {
    *static_cast<void**>(p) = head;
  } while (!a.remote_frees_.compare_exchange_weak(head, p, std::memory_order_seq_cst,
                                                  std::memory_order_relaxed));
  // The owner has exited: nobody else will drain. Either the owner's last drain saw this block or
  // this load sees `exited` (both sequentially consistent). The Arena object is never freed, so
  // reading it is safe even if the owner released it meanwhile.
  if (!a.exited_.load(std::memory_order_seq_cst)) return;
  SpinLock lock(a.lock_);
  if (!a.exited_.load(std::memory_order_relaxed) || !a.base_) return;  // released meanwhile
  a.drain_remote_frees();
  if (a.live_.count() == 0) {
    a.release();
    count(&SharedCounters::late_slab_releases);
  }
}

uint64_t ArenaRegion::usable_size(const void* p) const {
  const Arena& a = arenas_[slots_.slot_of(p)];
  if (!a.sizes_) return 0;
  const uint64_t offset = static_cast<uint64_t>(static_cast<const char*>(p) - a.base_);
  return a.sizes_[offset >> 6].load(std::memory_order_relaxed);
}

void ArenaRegion::release_all() {
  parked_count_ = 0;
  parked_published_.store(0, std::memory_order_relaxed);
  slots_.release_all();
  if (idle_samples_) munmap(idle_samples_, idle_samples_bytes_);
  idle_samples_ = nullptr;
  if (arenas_) munmap(arenas_, arenas_bytes_);
  arenas_ = nullptr;
  arenas_bytes_ = 0;
}

void ArenaRegion::after_fork_in_child(const void* survivor) {
  if (!arenas_) return;
  parked_lock_.clear();  // its holder did not come along; a park it was making leaks its arena
  for (uint32_t i = 0; i < slots_.slot_count(); ++i) {
    arenas_[i].lock_.clear();
    // The reaper did not come along: a discard it was making is over (the arena had no block).
    uint8_t reaping = Arena::kReaping;
    arenas_[i].reaping_.compare_exchange_strong(reaping, Arena::kNoReaper);
  }
  for (uint32_t i = 0; i < slots_.slot_count(); ++i) {
    const void* owner = arenas_[i].owner_.load(std::memory_order_relaxed);
    if (owner && owner != survivor) arenas_[i].retire_after_fork();
  }
}

void Arena::invalid_free(void* p) {
  if (lenient_) return;
  if (region_->invalid_free_) return region_->invalid_free_(p);
  char line[160];
  const int n = snprintf(line, sizeof line,
                         "memoplan: free(%p): not a live block of its arena (double free or "
                         "invalid pointer); aborting\n",
                         p);
  if (n > 0) {
    const ssize_t written = write(2, line, static_cast<size_t>(n));
    (void)written;
  }
  abort();
}

uint64_t Arena::discard_pages() {
  close_to_reaper();
  drain_remote_frees();
  bool ok = false;
  if (live_.count() == 0 && base_) {
    const int saved = errno;
    ok = madvise(base_, bytes_ ? bytes_ : 1, MADV_DONTNEED) == 0;
    errno = saved;
  }
  open_to_reaper();
  return ok ? bytes_ : 0;
}

void Arena::discard_freed(uint64_t offset, uint64_t length) {
  if (length < discard_min_bytes_) return;
  // The pages wholly inside the block: one it shares a page with may be alive. The reaper may
  // discard these pages at the same time (an arena that no block holds): both give back memory
  // nobody uses, and the owner places nothing meanwhile (it is here, or gone).
  const uint64_t lo = round_to_pages(offset);
  const uint64_t hi = (offset + length) & ~uint64_t{kPage - 1};
  if (hi <= lo) return;
  const int saved = errno;
  if (madvise(base_ + lo, hi - lo, MADV_DONTNEED) == 0) {
    region_->count(&SharedCounters::released_bytes, hi - lo);
  }
  errno = saved;
}

void Arena::wait_for_reaper() {
  for (;;) {
    uint8_t state = reaping_.load(std::memory_order_acquire);
    if (state == kReaping) {  // madvise of an idle arena: rare, and short
      sched_yield();
      continue;
    }
    if (state == kNoReaper || reaping_.compare_exchange_weak(state, kNoReaper)) return;
  }
}

void Arena::close_to_reaper() {
  for (;;) {
    uint8_t state = reaping_.load(std::memory_order_acquire);
    if (state == kReaping) {
      sched_yield();
      continue;
    }
    if (reaping_.compare_exchange_weak(state, kClosed)) return;
  }
}

namespace {

// The asymmetric barrier: every running thread of the process executes a full memory barrier.
long membarrier(int command) { return syscall(__NR_membarrier, command, 0, 0); }

// Registering twice is harmless, so no lock (a function-local static's guard, held by another
// thread at a fork, would hang the child forever).
std::atomic<int> membarrier_state{0};  // 0 not asked yet, 1 registered, 2 unsupported
bool register_membarrier() {
  int state = membarrier_state.load(std::memory_order_acquire);
  if (state == 0) {
    state = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 ? 1 : 2;  // Linux 4.14
    membarrier_state.store(state, std::memory_order_release);
  }
  return state == 1;
}

}  // namespace

bool ArenaRegion::idle_discard_supported() { return register_membarrier(); }

uint64_t ArenaRegion::discard_idle(uint64_t now_ns, uint64_t idle_ns) {
  // Parked arenas idle as long go back whole (their slots too).
  uint64_t released = release_parked_if(
      [&](const Parked& p) { return now_ns > p.since_ns && now_ns - p.since_ns >= idle_ns; });
  if (released) count(&SharedCounters::released_bytes, released);
  if (!arenas_ || !register_membarrier()) return released;
  const uint32_t arenas = slots_.slot_count();
  if (!idle_samples_) {
    idle_samples_bytes_ = round_to_pages(sizeof(IdleSample) * arenas);
    idle_samples_ = static_cast<IdleSample*>(map(idle_samples_bytes_, nullptr));
    if (!idle_samples_) return 0;
  }
  uint64_t discarded = 0;
  for (uint32_t i = 0; i < arenas; ++i) {
    Arena& a = arenas_[i];
    IdleSample& sample = idle_samples_[i];
    if (!a.owner_.load(std::memory_order_acquire)) {  // free, or retired
      sample.known = false;
      continue;
    }
    const uint64_t placements = a.placements_.load(std::memory_order_acquire);
    if (placements & 1) {  // a placement in progress: its block may not be in the live set yet
      sample.known = false;
      continue;
    }
    const uint32_t incarnation = a.incarnation_.load(std::memory_order_relaxed);
    if (!sample.known || sample.placements != placements || sample.incarnation != incarnation) {
      sample = IdleSample{placements, now_ns, incarnation, true};
      continue;
    }
    if (now_ns - sample.since_ns < idle_ns || a.live_.count() != 0) continue;
    uint8_t state = Arena::kNoReaper;  // kDiscarded: done already; kClosed: the owner's
    if (!a.reaping_.compare_exchange_strong(state, Arena::kReaping)) continue;
    // The owner announces a placement before it reads reaping_; this reads the placements after
    // claiming. The barrier orders the owner's side too: one of the two sees the other.
    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    if (a.placements_.load(std::memory_order_relaxed) != placements || a.live_.count() != 0) {
      a.reaping_.store(Arena::kNoReaper, std::memory_order_release);
      sample.known = false;
      continue;
    }
    const int saved = errno;
    if (madvise(a.base_, a.bytes_ ? a.bytes_ : 1, MADV_DONTNEED) == 0) {
      discarded += a.bytes_;
      count(&SharedCounters::idle_discards);
    }
    errno = saved;
    a.reaping_.store(Arena::kDiscarded, std::memory_order_release);
  }
  if (discarded) count(&SharedCounters::released_bytes, discarded);
  return discarded + released;
}

void* Arena::place_shared(uint64_t offset, uint64_t size, const ByteRange* allowed,
                          uint32_t allowed_count, Fallback* why) {
  return announced([&]() -> void* {
    if (remote_frees_.load(std::memory_order_relaxed)) drain_remote_frees();
    uint64_t grown = 0;
    switch (live_.absorb(offset, offset + (size ? size : 1), allowed, allowed_count, &grown)) {
      case LiveRanges::kAbsorbed:
        break;
      case LiveRanges::kNotAllowed:
        *why = Fallback::kOverlap;
        return nullptr;
      case LiveRanges::kFull:
        *why = Fallback::kGuardFull;
        return nullptr;
    }
    live_bytes_ += grown;
    if (live_bytes_ > peak_live_bytes_.load(std::memory_order_relaxed)) {
      peak_live_bytes_.store(live_bytes_, std::memory_order_relaxed);
    }
    return base_ + offset;
  });
}

void Arena::drain_remote_frees() {
  void* head = remote_frees_.exchange(nullptr, std::memory_order_seq_cst);
  while (head) {
    void* next = *static_cast<void**>(head);
    free_local(head);
    head = next;
  }
}

bool Arena::release_if_empty() {
  close_to_reaper();
  drain_remote_frees();
  if (live_.count() != 0) {
    open_to_reaper();
    return false;
  }
  release();
  return true;
}

void Arena::retire() {
  close_to_reaper();
  SpinLock lock(lock_);
  owner_.store(nullptr, std::memory_order_relaxed);  // a later thread with the same token is not it
  exited_.store(true, std::memory_order_seq_cst);    // before the last drain: see ArenaRegion::free
  drain_remote_frees();
  if (live_.count() == 0) release();
}

void Arena::release() {
  if (!region_->park(*this)) unmap();
}

void Arena::unmap() {
  // Forget everything first, then give it back: a fork in the middle leaves the child an arena
  // that owns nothing rather than one that would give the same memory back twice.
  ByteRange* live = live_storage_;
  std::atomic<uint64_t>* sizes = sizes_;
  live_storage_ = nullptr;
  sizes_ = nullptr;
  live_.init(nullptr, 0);
  owner_.store(nullptr, std::memory_order_relaxed);
  exited_.store(false, std::memory_order_relaxed);
  lenient_ = false;
  char* base = base_;
  base_ = nullptr;
  munmap(live, live_storage_bytes_);
  if (sizes) munmap(sizes, sizes_bytes_);
  region_->slots_.decommit(index_, bytes_);
  (void)base;
  region_->slots_.release(index_);
}

}  // namespace memoplan::replay
