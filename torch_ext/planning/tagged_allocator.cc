#include "tagged_allocator.h"

#include <c10/core/alignment.h>

#include <cstdlib>
#include <iterator>

#include "shadow_stack.h"

namespace memoplan::torch_ext {
namespace {

// 256 MiB slots (16 TiB of address space, reserved, not committed), smaller when the address space
// is short (sanitizers, ulimit -v). As in the shim.
constexpr unsigned kLargestSlotShift = 28;
constexpr unsigned kSmallestSlotShift = 20;

// Session the calling thread records into (kCallingThread sessions); 0 when none. Checked
// against the live sessions under the lock, so a session ended by another thread is never used.
thread_local uint64_t t_session = 0;
thread_local uint64_t t_thread_number = 0;
// Set while the calling thread's requests are to be left out of every session (Unrecorded).
thread_local bool t_unrecorded = false;
std::atomic<uint64_t> g_next_thread_number{1};

}  // namespace

TaggedAllocator& TaggedAllocator::instance() {
  static TaggedAllocator* allocator = new TaggedAllocator;  // never destroyed: see the header
  return *allocator;
}

bool TaggedAllocator::set_thread_unrecorded(bool unrecorded) {
  const bool before = t_unrecorded;
  t_unrecorded = unrecorded;
  return before;
}

uint64_t TaggedAllocator::thread_number() {
  if (t_thread_number == 0) t_thread_number = g_next_thread_number.fetch_add(1);
  return t_thread_number;
}

void TaggedAllocator::prepare() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (prepared_) return;
  prepared_ = true;
  // Without a region every block is untagged; sessions still work.
  region_.reserve(kLargestSlotShift, kSmallestSlotShift, 2);
}

uint64_t TaggedAllocator::slot_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return region_.reserved() ? region_.slot_bytes() : 0;
}

c10::DataPtr TaggedAllocator::allocate_exact(size_t bytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!region_.reserved() || bytes == 0) return c10::DataPtr(nullptr, cpu);
  record::TagRegion::Miss miss;
  void* data = region_.take(bytes, false, 0, 0, &miss);
  if (!data) return c10::DataPtr(nullptr, cpu);
  return c10::DataPtr(data, data, &free_block, cpu);
}

c10::DataPtr TaggedAllocator::allocate_block(size_t bytes) const {
  // Called const (LibTorch 1.13's interface); the one instance is not.
  return const_cast<TaggedAllocator*>(this)->make_block(bytes);
}

c10::DataPtr TaggedAllocator::make_block(size_t bytes) {
  const bool maybe_recorded =
      !t_unrecorded && (t_session != 0 || all_threads_.load(std::memory_order_acquire));
  c10::Allocator* fallback = fallback_.load(std::memory_order_acquire);
  if (!maybe_recorded && fallback && fallback != this) return fallback->allocate(bytes);

  const c10::Device cpu(c10::DeviceType::CPU);
  const OpContext where = shadow_stack::current();
  const uint64_t thread = thread_number();
  // Everything under the one lock, mmap included: profiling passes are rare and short, and a slot's
  // commit state then never races with trim().
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t session = t_unrecorded ? 0 : recording_session();
  RecordTable* table = live_table(session);
  if (table) table->count_request(bytes == 0);
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &free_block, cpu);

  void* data = nullptr;
  if (region_.reserved()) {
    record::TagRegion::Miss miss;
    data = region_.take(bytes, false, table ? session : 0, table ? table->next_row() : 0, &miss);
  }
  const bool tagged = data != nullptr;
  if (!tagged && posix_memalign(&data, c10::gAlignment, bytes) != 0) data = nullptr;
  TORCH_CHECK(data, "memoplan: not enough memory: you tried to allocate ", bytes, " bytes");
  const uint64_t row = table ? table->add(bytes, tagged, thread, where) : 0;
  if (!tagged) {
    untagged_[reinterpret_cast<uintptr_t>(data)] = Block{table ? session : 0, row, bytes};
  }
  return c10::DataPtr(data, data, &free_block, cpu);
}

void TaggedAllocator::free_block(void* p) {
  if (p) instance().release(p);
}

void TaggedAllocator::release(void* p) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (region_.contains(p)) {
    const record::TagRegion::Owner owner = region_.owner_of(p);
    if (RecordTable* table = live_table(owner.owner)) table->remove(owner.record, thread_number());
    // The pages go back at once: a profiled pass's memory is then its live blocks, never more
    // (keeping freed slots' pages saved a profiled resnet18 pass 20 ms but added up to 64 MiB to
    // the process's peak RSS; CHANGELOG.md, 2026-11-25).
    region_.give_back(p);
    return;
  }
  if (auto it = untagged_.find(reinterpret_cast<uintptr_t>(p)); it != untagged_.end()) {
    if (RecordTable* table = live_table(it->second.session)) {
      table->remove(it->second.row, thread_number());
    }
    untagged_.erase(it);
    std::free(p);
    return;
  }
  // Not this allocator's: a block of the allocator behind it, freed through this one because c10's
  // CPU slot changed between the block's allocation and its free. oneDNN frees its scratch memory
  // through the allocator installed at the time of the free (raw_deallocate), and another thread
  // may have begun a profiled pass in between: the block may be a slab's (the replay allocator's
  // arena, which the system free must never see). The allocator behind knows its blocks.
  c10::Allocator* behind = fallback_.load(std::memory_order_acquire);
  lock.unlock();
  if (behind && behind != this) {
    behind->raw_deleter()(p);
    return;
  }
  std::free(p);
}

uint64_t TaggedAllocator::attach(RecordTable* table, bool all_threads) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (all_threads && all_threads_session_ != 0) return 0;
  const uint64_t id = next_session_++;
  sessions_.push_back(Session{id, table});
  if (all_threads) {
    all_threads_session_ = id;
    all_threads_.store(true, std::memory_order_release);
  } else {
    t_session = id;
  }
  return id;
}

void TaggedAllocator::detach(uint64_t session) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < sessions_.size(); ++i) {
    if (sessions_[i].id == session) {
      sessions_.erase(sessions_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (all_threads_session_ == session) {
    all_threads_session_ = 0;
    all_threads_.store(false, std::memory_order_release);
  }
  if (t_session == session) t_session = 0;  // else the owning thread finds it gone
}

bool TaggedAllocator::thread_attached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_table(t_session) != nullptr;
}

std::optional<uint64_t> TaggedAllocator::find(uint64_t session, const void* p) const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t block_session = 0, row = 0;
  if (region_.contains(p)) {
    const record::TagRegion::Owner owner = region_.owner_of(p);
    if (owner.bytes == 0) return std::nullopt;  // a free slot
    block_session = owner.owner;
    row = owner.record;
  } else {
    const auto address = reinterpret_cast<uintptr_t>(p);
    auto after = untagged_.upper_bound(address);  // the first block starting past p
    if (after == untagged_.begin()) return std::nullopt;
    const auto& [start, candidate] = *std::prev(after);
    if (address - start >= candidate.bytes) return std::nullopt;
    block_session = candidate.session;
    row = candidate.row;
  }
  if (block_session == 0 || block_session != session) return std::nullopt;
  return row;
}

RecordTable* TaggedAllocator::live_table(uint64_t session) const {
  if (session == 0) return nullptr;
  for (const Session& s : sessions_) {
    if (s.id == session) return s.table;
  }
  return nullptr;
}

uint64_t TaggedAllocator::recording_session() const {
  return live_table(t_session) ? t_session : all_threads_session_;
}

}  // namespace memoplan::torch_ext
