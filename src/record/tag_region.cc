#include "memoplan/record/tag_region.h"

#include <sched.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "memoplan/vm/monotonic.h"

namespace memoplan::record {
namespace {

constexpr uint64_t kPage = 4096;
constexpr int kReuseClasses = 5;

// Size classes in pages: 1..8 exact, then m * 2^k with m in 4..7 (at most 25% over). Returns the
// class and sets `pages` to its size.
int size_class(uint64_t bytes, uint64_t& pages) {
  pages = bytes ? (bytes + kPage - 1) / kPage : 1;
  if (pages <= 8) return static_cast<int>(pages) - 1;
  const int k = 63 - __builtin_clzll(pages) - 2;  // pages >> k is 4..7
  uint64_t m = (pages + (uint64_t{1} << k) - 1) >> k;
  int shift = k;
  if (m == 8) {
    m = 4;
    ++shift;
  }
  pages = m << shift;
  return 8 + (shift - 1) * 4 + static_cast<int>(m - 4);
}

// What a block of `bytes` maps: its size class's pages, at most a slot. Sets `size_class`.
uint64_t mapped_bytes(uint64_t bytes, uint64_t slot_bytes, int& size_class) {
  uint64_t pages = 0;
  size_class = ::memoplan::record::size_class(bytes, pages);
  return pages * kPage < slot_bytes ? pages * kPage : slot_bytes;
}

}  // namespace

bool TagRegion::reserve(unsigned largest_shift, unsigned smallest_shift, unsigned step) {
  if (reserved()) return true;
  for (unsigned shift = largest_shift; shift >= smallest_shift && shift >= step; shift -= step) {
    if (slots_.reserve(shift, kSlots)) break;
  }
  return slots_.reserved() && set_up();
}

bool TagRegion::adopt(uintptr_t base, unsigned shift) {
  if (reserved()) return true;
  return slots_.adopt(base, shift, kSlots) && set_up();
}

bool TagRegion::set_up() {
  void* table = mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (table == MAP_FAILED) {
    const int saved = errno;
    slots_.release_all();
    errno = saved;
    return false;
  }
  table_ = static_cast<Slot*>(table);
  next_ = reinterpret_cast<std::atomic<uint32_t>*>(table_ + 2 * kSlots);
  // Small slots in the first large ones, held for good (a failure leaves every block large).
  const unsigned shift = static_cast<unsigned>(__builtin_ctzll(slots_.slot_bytes()));
  if (shift >= kSmallFromShift) {
    uint32_t held = 0;
    while (held < kSmallSetAside && slots_.try_acquire(held)) ++held;
    const uint64_t small = (uint64_t{kSmallSetAside} << shift) >> kSmallShift;
    if (held < kSmallSetAside ||
        !small_.adopt(slots_.base(), kSmallShift,
                      static_cast<uint32_t>(small < kSlots ? small : kSlots))) {
      while (held) slots_.release(--held);
    }
  }
  return true;
}

bool TagRegion::share_small_slots() { return small_.reserved() && shared_.init(&small_); }

bool TagRegion::acquire(uint64_t mapped, bool small, uint32_t& tag) {
  uint32_t index = 0;
  if (small && mapped <= small_.slot_bytes() && small_.acquire(index)) {
    tag = kSlots + index;
    return true;
  }
  if (!slots_.acquire(index)) return false;
  tag = index;
  return true;
}

void TagRegion::release(uint32_t tag) { region_of(tag).release(index_of(tag)); }

bool TagRegion::pop_kept(int size_class, uint32_t& slot) {
  std::atomic<uint64_t>& head = kept_[size_class];
  // The hold count read before the head: an empty head between two reads of one even count was
  // empty with nobody holding the class (expire_kept takes its hold before it empties the head).
  uint32_t hold = holds_[size_class].load(std::memory_order_acquire);
  uint64_t old = head.load(std::memory_order_acquire);
  for (int waits = 0;;) {
    if (static_cast<uint32_t>(old) != 0) {
      const uint32_t top = static_cast<uint32_t>(old) - 1;
      // A stale next (the slot popped and pushed meanwhile) fails the exchange: the count moved.
      const uint64_t next = next_[top].load(std::memory_order_relaxed);
      const uint64_t replacement = ((old >> 32) + 1) << 32 | next;
      if (head.compare_exchange_weak(old, replacement, std::memory_order_acquire)) {
        slot = top;
        return true;
      }
      continue;
    }
    const uint32_t now = holds_[size_class].load(std::memory_order_acquire);
    if ((hold & 1) == 0 && now == hold) return false;  // empty
    // Held (or it was, meanwhile): the recent slots come back in a moment; a bounded wait.
    if (waits++ == kHoldWaits) {
      waits_run_out_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (now & 1) sched_yield();
    hold = now;
    old = head.load(std::memory_order_acquire);
  }
}

uint32_t TagRegion::take_all_kept(int size_class) {
  std::atomic<uint64_t>& head = kept_[size_class];
  uint64_t old = head.load(std::memory_order_acquire);
  while (!head.compare_exchange_weak(old, ((old >> 32) + 1) << 32, std::memory_order_seq_cst)) {
  }
  return static_cast<uint32_t>(old);
}

void TagRegion::push_kept(int size_class, uint32_t top, uint32_t bottom) {
  std::atomic<uint64_t>& head = kept_[size_class];
  uint64_t old = head.load(std::memory_order_relaxed);
  uint64_t replacement;
  do {
    next_[bottom].store(static_cast<uint32_t>(old), std::memory_order_relaxed);
    replacement = ((old >> 32) + 1) << 32 | (top + 1);
  } while (!head.compare_exchange_weak(old, replacement, std::memory_order_release));
}

bool TagRegion::pop_kept_before(int size_class, uint64_t before_ns, uint32_t& slot) {
  // The top is the class's newest: when it is too recent, so is the class (no pop, no write).
  const uint32_t top = static_cast<uint32_t>(kept_[size_class].load(std::memory_order_acquire));
  if (top == 0 || table_[top - 1].kept_at.load(std::memory_order_relaxed) > before_ns) return false;
  if (!pop_kept(size_class, slot)) return false;
  if (table_[slot].kept_at.load(std::memory_order_relaxed) <= before_ns) return true;
  push_kept(size_class, slot);  // another slot was kept on top meanwhile
  return false;
}

void TagRegion::cut(uint32_t index, uint64_t mapped) {
  Slot& s = table_[index];
  if (s.committed <= mapped) return;
  region_of(index).decommit(index_of(index), s.committed - mapped, mapped);
  mapped_.fetch_sub(s.committed - mapped, std::memory_order_relaxed);
  s.committed = mapped;
}

bool TagRegion::reshape_kept(int size_class, uint64_t mapped, uint64_t before_ns, uint32_t& index,
                             uint64_t& fresh) {
  // The smallest larger one first: its pages past the block go back.
  for (int c = size_class + kReuseClasses; c < kClasses; ++c) {
    if (!pop_kept_before(c, before_ns, index)) continue;
    retained_.fetch_sub(table_[index].committed, std::memory_order_relaxed);
    cut(index, mapped);
    return true;
  }
  // Then the largest smaller one its slot can hold the block in: pages mapped past its own.
  for (int c = size_class - 1; c >= 0; --c) {
    if (!pop_kept_before(c, before_ns, index)) continue;
    Slot& s = table_[index];
    vm::SlotRegion& region = region_of(index);
    if (region.slot_bytes() < mapped || (commit_fault_ && commit_fault_()) ||
        !region.commit(index_of(index), mapped - s.committed, s.committed)) {
      push_kept(c, index);  // a small slot under a large block, or no pages: kept as it was
      continue;
    }
    retained_.fetch_sub(s.committed, std::memory_order_relaxed);
    fresh = mapped - s.committed;
    s.committed = mapped;
    return true;
  }
  return false;
}

void* TagRegion::take(uint64_t bytes, bool zero, uintptr_t owner, uint64_t record, Miss* why,
                      uint64_t alignment, unsigned flags) {
  if (bytes > slots_.slot_bytes()) {
    *why = Miss::kTooLarge;
    return nullptr;
  }
  if (shared_.ready() && bytes <= SharedSlots::kLargestBlock && alignment <= 64) {
    bool commit_failed = false;
    void* p = shared_.take(bytes, zero, owner, record, commit_fault_, slots_in_use(),
                           live_limit_.load(std::memory_order_relaxed), &commit_failed);
    if (p || commit_failed) {  // a block, or untracked as a slot of its own would be
      *why = p ? Miss::kNone : Miss::kCommitFailed;
      return p;
    }  // else a slot of its own, or why not
  }
  int size_class = 0;
  const uint64_t mapped = mapped_bytes(bytes, slots_.slot_bytes(), size_class);
  uint32_t index = 0;
  char* at = nullptr;
  // A kept slot of this class, else of the next few (up to 2.4 times the pages: the pages of
  // freed blocks serve other sizes too, as a general allocator's would, rather than pile up),
  // cut to the block's class unless kKeepTail.
  // Kept slots may be small ones: a block aligned past them takes a fresh large slot.
  const bool small = small_.reserved() && alignment <= small_.slot_bytes();
  const bool any_slot = small || !small_.reserved();
  const int last = any_slot ? size_class + kReuseClasses : size_class;
  if (flags & kKeepIfReturning) mark_returning(size_class, last);
  bool kept = false;
  for (int c = size_class; c < last && c < kClasses && !kept; ++c) {
    kept = pop_kept(c, index);
  }
  uint64_t fresh = 0;  // bytes of pages mapped anew for this block
  if (kept) {
    retained_.fetch_sub(table_[index].committed, std::memory_order_relaxed);
    if (!(flags & kKeepTail)) cut(index, mapped);  // a larger class's
  } else if (any_slot && retained_.load(std::memory_order_relaxed)) {
    // Fresh pages would raise the peak: kept ones of other sizes serve first. Below it, those
    // kept kRefitAfterNs ago or more: their sizes did not come back (a model's load freed them,
    // its passes make other sizes). The recent ones stay as they are, for their own sizes.
    const bool above = mapped_.load(std::memory_order_relaxed) + mapped >
                       peak_mapped_.load(std::memory_order_relaxed);
    kept = reshape_kept(size_class, mapped, above ? UINT64_MAX : vm::monotonic_ns() - kRefitAfterNs,
                        index, fresh);
  }
  if (kept) {  // its pages: no system call, or one to fit them to the block
    at = region_of(index).slot_address(index_of(index));
    // Pages mapped on read as zeros already.
    if (zero) memset(at, 0, bytes < mapped - fresh ? bytes : mapped - fresh);
  } else {
    const uint32_t limit = live_limit_.load(std::memory_order_relaxed);
    // Kept slots count: they are mappings too. At the budget they go first.
    if (limit && slots_in_use() >= limit && retained_.load(std::memory_order_relaxed)) {
      trim();
    }
    if (limit && slots_in_use() >= limit) {  // approximate under races: a budget
      *why = Miss::kOverLimit;
      return nullptr;
    }
    if (!acquire(mapped, small, index)) {
      *why = Miss::kNoSlot;
      return nullptr;
    }
    Slot& s = table_[index];
    if ((commit_fault_ && commit_fault_()) ||
        !region_of(index).commit(index_of(index), mapped)) {  // e.g. vm.max_map_count reached
      release(index);
      *why = Miss::kCommitFailed;
      return nullptr;
    }
    s.committed = mapped;
    at = region_of(index).slot_address(index_of(index));
    fresh = mapped;
  }
  if (fresh) mapped_fresh(fresh);
  Slot& s = table_[index];
  s.probe = 0;
  s.keep_if_returning = flags & kKeepIfReturning;
  if ((flags & kPopulateRepeated) && bytes >= kPopulateFrom) {  // a large slot's block
    populate_or_probe(s, size_class, at, bytes, mapped - fresh);
  }
  s.owner = owner;
  s.record = record;
  s.bytes = bytes;
  *why = Miss::kNone;
  return at;
}

bool TagRegion::resize(const void* p, uint64_t bytes) {
  const uint32_t index = tag_of(p);
  const int64_t shared = shared_slot(index);
  if (shared >= 0) return shared_.resize(static_cast<uint32_t>(shared), p, bytes);
  vm::SlotRegion& region = region_of(index);
  if (bytes > region.slot_bytes()) return false;
  Slot& s = table_[index];
  int size_class = 0;
  const uint64_t mapped = mapped_bytes(bytes, region.slot_bytes(), size_class);
  if (mapped > s.committed) {
    if ((commit_fault_ && commit_fault_()) ||
        !region.commit(index_of(index), mapped - s.committed, s.committed)) {
      return false;
    }
    mapped_fresh(mapped - s.committed);
    s.committed = mapped;
  }
  s.bytes = bytes;
  return true;
}

void TagRegion::give_back(const void* p, bool keep) {
  const uint32_t index = tag_of(p);
  const int64_t shared = shared_slot(index);
  if (shared >= 0) return shared_.give_back(static_cast<uint32_t>(shared), p);
  Slot& s = table_[index];
  if (s.probe) learn_whole(index);
  uint64_t pages = 0;
  const int size_class = ::memoplan::record::size_class(s.committed, pages);
  s.owner = 0;
  s.bytes = 0;
  uint64_t limit = keep ? retain_limit_.load(std::memory_order_relaxed) : 0;
  if (limit && s.keep_if_returning && size_class < kClasses && !note_free_keeps(size_class))
    limit = 0;
  if (limit && size_class < kClasses && pages * kPage == s.committed) {  // a whole class
    if (retained_.fetch_add(s.committed, std::memory_order_relaxed) + s.committed <= limit) {
      s.kept_at.store(vm::monotonic_ns(), std::memory_order_relaxed);
      push_kept(size_class, index);  // kept for the next block of its class; still held
      return;
    }
    retained_.fetch_sub(s.committed, std::memory_order_relaxed);
  }
  unmap(index);
}

void TagRegion::mark_returning(int first, int last) {
  for (int c = first; c < last && c < kClasses; ++c) {
    const uint64_t bit = uint64_t{1} << (c % 64);
    if ((freed_[c / 64].load(std::memory_order_relaxed) & bit) &&
        !(returning_[c / 64].load(std::memory_order_relaxed) & bit)) {
      returning_[c / 64].fetch_or(bit, std::memory_order_relaxed);
    }
  }
}

bool TagRegion::note_free_keeps(int size_class) {
  const uint64_t bit = uint64_t{1} << (size_class % 64);
  if (returning_[size_class / 64].load(std::memory_order_relaxed) & bit) return true;
  if (!(freed_[size_class / 64].load(std::memory_order_relaxed) & bit)) {
    freed_[size_class / 64].fetch_or(bit, std::memory_order_relaxed);
  }
  return false;
}

void TagRegion::unmap(uint32_t index) {
  Slot& s = table_[index];
  region_of(index).decommit(index_of(index), s.committed);
  mapped_.fetch_sub(s.committed, std::memory_order_relaxed);
  s.committed = 0;
  release(index);
}

void TagRegion::trim() {
  shared_.close_open();
  trim_to(0);
}

void TagRegion::trim_to(uint64_t bytes) {
  if (!reserved()) return;
  for (int c = kClasses - 1; c >= 0; --c) {  // the largest first: the fewest system calls
    uint32_t index = 0;
    while (retained_.load(std::memory_order_relaxed) > bytes && pop_kept(c, index)) {
      retained_.fetch_sub(table_[index].committed, std::memory_order_relaxed);
      unmap(index);
    }
  }
}

void TagRegion::set_kept_expiry(uint64_t min_bytes, uint64_t after_ns) {
  uint64_t pages = 0;
  for (int c = ::memoplan::record::size_class(min_bytes, pages); c < kClasses; ++c) {
    expiry_ns_[c].store(after_ns, std::memory_order_relaxed);
  }
}

bool TagRegion::try_hold(int size_class) {
  uint32_t hold = holds_[size_class].load(std::memory_order_relaxed);
  return (hold & 1) == 0 &&
         holds_[size_class].compare_exchange_strong(hold, hold + 1, std::memory_order_seq_cst);
}

void TagRegion::release_hold(int size_class) {
  holds_[size_class].fetch_add(1, std::memory_order_release);
}

bool TagRegion::hold_class_for_tests(uint64_t bytes, bool hold) {
  int size_class = 0;
  mapped_bytes(bytes, slots_.slot_bytes(), size_class);
  if (!hold) release_hold(size_class);
  return !hold || try_hold(size_class);
}

bool TagRegion::keeps(uint64_t min_bytes) const {
  uint64_t pages = 0;
  for (int c = ::memoplan::record::size_class(min_bytes, pages); c < kClasses; ++c) {
    if (static_cast<uint32_t>(kept_[c].load(std::memory_order_relaxed)) != 0) return true;
  }
  return false;
}

bool TagRegion::kept_past(uint32_t index, uint64_t now_ns, uint64_t after_ns) const {
  // Kept after now_ns (by another thread, since the caller read its clock): recent.
  const uint64_t kept_at = table_[index].kept_at.load(std::memory_order_relaxed);
  return kept_at < now_ns && now_ns - kept_at >= after_ns;
}

bool TagRegion::any_kept_past(int size_class, uint64_t now_ns, uint64_t after_ns) const {
  // The links read while others pop and push: stale ones lead to slots of the region still (a
  // slot popped meanwhile, its last keep's time); a hint, so a walk too long says yes.
  uint32_t top = static_cast<uint32_t>(kept_[size_class].load(std::memory_order_acquire));
  for (int steps = 0; top != 0 && steps < kLookSteps; ++steps) {
    if (kept_past(top - 1, now_ns, after_ns)) return true;
    top = next_[top - 1].load(std::memory_order_relaxed);
  }
  return top != 0;
}

uint64_t TagRegion::expire_kept(uint64_t now_ns, uint64_t min_bytes) {
  if (!reserved()) return 0;
  uint64_t expired = 0;
  uint64_t pages = 0;
  for (int c = ::memoplan::record::size_class(min_bytes, pages); c < kClasses; ++c) {
    const uint64_t after_ns = expiry_ns_[c].load(std::memory_order_relaxed);
    if (after_ns == 0 || static_cast<uint32_t>(kept_[c].load(std::memory_order_relaxed)) == 0) {
      continue;
    }
    if (!any_kept_past(c, now_ns, after_ns)) continue;
    // The whole stack, taken in one exchange and walked in private: the recent slots go back in
    // their order in one more, before the old ones' pages are unmapped (system calls). A request
    // of this class in between waits for them (pop_kept) rather than map fresh pages.
    if (!try_hold(c)) continue;                             // another call holds it
    uint32_t top = take_all_kept(c);                        // slot + 1 (0: none), as the links
    uint32_t young_top = 0, young_bottom = 0, old_top = 0;  // the recent in order, the old
    while (top) {
      const uint32_t index = top - 1;
      top = next_[index].load(std::memory_order_relaxed);
      if (!kept_past(index, now_ns, after_ns)) {
        if (young_bottom) next_[young_bottom - 1].store(index + 1, std::memory_order_relaxed);
        if (!young_top) young_top = index + 1;
        young_bottom = index + 1;
      } else {
        next_[index].store(old_top, std::memory_order_relaxed);
        old_top = index + 1;
      }
    }
    if (young_top) push_kept(c, young_top - 1, young_bottom - 1);
    release_hold(c);
    while (old_top) {
      const uint32_t index = old_top - 1;
      old_top = next_[index].load(std::memory_order_relaxed);
      retained_.fetch_sub(table_[index].committed, std::memory_order_relaxed);
      expired += table_[index].committed;
      unmap(index);
    }
  }
  return expired;
}

void TagRegion::trim_by(uint64_t bytes) {
  while (bytes && retained_.load(std::memory_order_relaxed)) {
    // The smallest kept slot of `bytes` or more (the least given back past them), else the
    // largest there is (the fewest system calls).
    uint64_t pages = 0;
    const int fits = ::memoplan::record::size_class(bytes, pages);
    uint32_t index = 0;
    bool found = false;
    for (int c = fits; c < kClasses && !found; ++c) found = pop_kept(c, index);
    for (int c = fits - 1; c >= 0 && !found; --c) found = pop_kept(c, index);
    if (!found) return;
    const uint64_t committed = table_[index].committed;
    retained_.fetch_sub(committed, std::memory_order_relaxed);
    bytes = committed < bytes ? bytes - committed : 0;
    unmap(index);
  }
}

void TagRegion::mapped_fresh(uint64_t bytes) {
  const uint64_t now = mapped_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = peak_mapped_.load(std::memory_order_relaxed);
  if (now <= peak) return;
  if (retained_.load(std::memory_order_relaxed)) trim_by(now - peak < bytes ? now - peak : bytes);
  // The new peak, if the kept pages did not cover it (approximate under races: a bound).
  const uint64_t after = mapped_.load(std::memory_order_relaxed);
  while (after > peak &&
         !peak_mapped_.compare_exchange_weak(peak, after, std::memory_order_relaxed)) {
  }
}

void TagRegion::release_all() {
  shared_.release_all();
  small_.release_all();
  slots_.release_all();
  if (table_) munmap(table_, kTableBytes);
  table_ = nullptr;
  next_ = nullptr;
  for (auto& head : kept_) head.store(0);
  retained_.store(0);
  mapped_.store(0);
  peak_mapped_.store(0);
}

}  // namespace memoplan::record
