// The arena's slow paths: making and releasing arenas, remote frees, retirement.
#include "memoplan/replay/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace memoplan::replay {
namespace {

constexpr size_t kPage = 4096;
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
  uint32_t count = 1;
  while (count < config.arenas) count *= 2;
  const size_t table_bytes = round_to_pages(sizeof(Arena) * count);
  void* table = map(table_bytes, nullptr);
  if (!table) return false;
  for (unsigned shift = config.largest_shift;
       shift >= config.smallest_shift && !slots_.reserved() && shift >= config.shift_step;
       shift -= config.shift_step) {
    slots_.reserve(shift, count);
  }
  if (!slots_.reserved()) {
    munmap(table, table_bytes);
    return false;
  }
  arenas_ = static_cast<Arena*>(table);
  for (uint32_t i = 0; i < count; ++i) new (&arenas_[i]) Arena();
  arenas_bytes_ = table_bytes;
  config_ = config;
  return true;
}

Arena* ArenaRegion::create(uint64_t bytes, const void* owner, Failure* why) {
  uint32_t index = 0;
  if (!reserved() || bytes > slots_.slot_bytes()) {
    *why = Failure::kTooLarge;
    return nullptr;
  }
  if (!slots_.acquire(index)) {
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
  a.region_ = this;
  a.index_ = index;
  a.base_ = slots_.slot_address(index);
  a.bytes_ = bytes;
  a.live_storage_ = static_cast<ByteRange*>(live);
  a.live_storage_bytes_ = live_bytes;
  a.live_.init(a.live_storage_, config_.guard_capacity);
  a.sizes_ = static_cast<std::atomic<uint64_t>*>(sizes);
  a.sizes_bytes_ = sizes_bytes;
  a.live_bytes_ = 0;
  a.peak_live_bytes_.store(0, std::memory_order_relaxed);
  a.remote_frees_.store(nullptr, std::memory_order_relaxed);
  a.exited_.store(false, std::memory_order_relaxed);
  a.owner_.store(owner, std::memory_order_release);
  *why = Failure::kNone;
  return &a;
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
  slots_.release_all();
  if (arenas_) munmap(arenas_, arenas_bytes_);
  arenas_ = nullptr;
  arenas_bytes_ = 0;
}

void ArenaRegion::after_fork_in_child(const void* survivor) {
  if (!arenas_) return;
  for (uint32_t i = 0; i < slots_.slot_count(); ++i) arenas_[i].lock_.clear();
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
  drain_remote_frees();
  if (live_.count() != 0 || !base_) return 0;
  const int saved = errno;
  const bool ok = madvise(base_, bytes_ ? bytes_ : 1, MADV_DONTNEED) == 0;
  errno = saved;
  return ok ? bytes_ : 0;
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
  drain_remote_frees();
  if (live_.count() != 0) return false;
  release();
  return true;
}

void Arena::retire() {
  SpinLock lock(lock_);
  owner_.store(nullptr, std::memory_order_relaxed);  // a later thread with the same token is not it
  exited_.store(true, std::memory_order_seq_cst);    // before the last drain: see ArenaRegion::free
  drain_remote_frees();
  if (live_.count() == 0) release();
}

void Arena::release() {
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
