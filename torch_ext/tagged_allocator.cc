#include "tagged_allocator.h"

#include <cstdlib>
#include <iterator>

#include "shadow_stack.h"

namespace memoplan::torch_ext {
namespace {

constexpr size_t kAlignment = 64;  // c10's CPU alignment (gAlignment)
constexpr uint32_t kTagSlots = 1u << 16;
// 256 MiB slots (16 TiB of address space, reserved, not committed), smaller when the address space
// is short (sanitizers, ulimit -v). As in the shim.
constexpr unsigned kLargestSlotShift = 28;
constexpr unsigned kSmallestSlotShift = 20;
// Freed slots keep their pages, up to this many bytes in all, while sessions run (see release()).
constexpr size_t kRetainedBytes = size_t{64} << 20;
constexpr size_t kPage = 4096;

size_t round_to_pages(size_t bytes) { return (bytes + kPage - 1) & ~(kPage - 1); }

// Session the calling thread records into (kCallingThread sessions); 0 when none. Checked
// against the live sessions under the lock, so a session ended by another thread is never used.
thread_local uint64_t t_session = 0;
thread_local uint64_t t_thread_number = 0;
std::atomic<uint64_t> g_next_thread_number{1};

}  // namespace

TaggedAllocator& TaggedAllocator::instance() {
  static TaggedAllocator* allocator = new TaggedAllocator;  // never destroyed: see the header
  return *allocator;
}

uint64_t TaggedAllocator::thread_number() {
  if (t_thread_number == 0) t_thread_number = g_next_thread_number.fetch_add(1);
  return t_thread_number;
}

void TaggedAllocator::prepare() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (region_.reserved() || !slots_.empty()) return;
  for (unsigned shift = kLargestSlotShift; shift >= kSmallestSlotShift; shift -= 2) {
    if (region_.reserve(shift, kTagSlots)) break;
  }
  // Without a region every block is untagged; sessions still work. slots_ non-empty marks "tried".
  slots_.resize(region_.reserved() ? kTagSlots : 1);
}

uint64_t TaggedAllocator::slot_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return region_.reserved() ? region_.slot_bytes() : 0;
}

c10::DataPtr TaggedAllocator::allocate(size_t bytes) const {
  // c10's interface is const; the one instance is not.
  return const_cast<TaggedAllocator*>(this)->make_block(bytes);
}

c10::DataPtr TaggedAllocator::make_block(size_t bytes) {
  const bool maybe_recorded = t_session != 0 || all_threads_.load(std::memory_order_acquire);
  c10::Allocator* fallback = fallback_.load(std::memory_order_acquire);
  if (!maybe_recorded && fallback && fallback != this) return fallback->allocate(bytes);

  const c10::Device cpu(c10::DeviceType::CPU);
  const OpContext where = shadow_stack::current();
  const uint64_t thread = thread_number();
  // Everything under the one lock, mmap included: profiling passes are rare and short, and a slot's
  // commit state then never races with trim().
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t session = recording_session();
  RecordTable* table = live_table(session);
  if (table) table->count_request(bytes == 0);
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &free_block, cpu);

  uint32_t slot = 0;
  const bool tagged = take_slot(bytes, slot);
  void* data = nullptr;
  if (tagged) {
    data = region_.slot_address(slot);
  } else if (posix_memalign(&data, kAlignment, bytes) != 0) {
    data = nullptr;
  }
  TORCH_CHECK(data, "memoplan: not enough memory: you tried to allocate ", bytes, " bytes");
  Block& block = tagged ? slots_[slot] : untagged_[reinterpret_cast<uintptr_t>(data)];
  block.session = table ? session : 0;  // no table: the session ended meanwhile
  block.row = table ? table->add(bytes, tagged, thread, where) : 0;
  block.bytes = bytes;
  return c10::DataPtr(data, data, &free_block, cpu);
}

bool TaggedAllocator::take_slot(size_t bytes, uint32_t& slot) {
  if (!region_.reserved() || bytes > region_.slot_bytes() || !region_.acquire(slot)) return false;
  Block& block = slots_[slot];
  retained_ -= block.committed;               // in use again
  if (block.committed >= bytes) return true;  // a recycled slot: no system call, no page fault
  if (!region_.commit(slot, bytes)) {         // e.g. vm.max_map_count reached
    region_.release(slot);
    retained_ += block.committed;
    return false;
  }
  block.committed = round_to_pages(bytes);
  return true;
}

void TaggedAllocator::free_block(void* p) {
  if (p) instance().release(p);
}

void TaggedAllocator::release(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  Block block;
  const bool tagged = region_.contains(p);
  if (tagged) {
    block = slots_[region_.slot_of(p)];
  } else if (auto it = untagged_.find(reinterpret_cast<uintptr_t>(p)); it != untagged_.end()) {
    block = it->second;
    untagged_.erase(it);
  }
  if (RecordTable* table = live_table(block.session)) table->remove(block.row, thread_number());
  if (!tagged) {
    std::free(p);
    return;
  }
  const uint32_t slot = region_.slot_of(p);
  Block& freed = slots_[slot];
  // While sessions run, freed slots stay committed for the next blocks: that saves two mmap calls
  // and the page faults of fresh pages per allocation (resnet18: a profiled pass took 67-73 ms
  // without, 47.5 with; docs/TORCH_EXT.md). Bounded by kRetainedBytes; trim() returns them after
  // the last session.
  if (!sessions_.empty() && retained_ + freed.committed <= kRetainedBytes) {
    retained_ += freed.committed;
  } else {
    region_.decommit(slot, freed.committed);
    freed.committed = 0;
  }
  freed.session = 0;
  freed.bytes = 0;
  region_.release(slot);
}

void TaggedAllocator::trim() {
  for (uint32_t slot = 0; slot < slots_.size() && region_.reserved(); ++slot) {
    Block& block = slots_[slot];
    if (block.bytes == 0 && block.committed > 0) {  // free but still committed
      region_.decommit(slot, block.committed);
      block.committed = 0;
    }
  }
  retained_ = 0;
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
  if (sessions_.empty()) trim();
}

bool TaggedAllocator::thread_attached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_table(t_session) != nullptr;
}

std::optional<uint64_t> TaggedAllocator::find(uint64_t session, const void* p) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Block* block = nullptr;
  if (region_.contains(p)) {
    block = &slots_[region_.slot_of(p)];
  } else {
    const auto address = reinterpret_cast<uintptr_t>(p);
    auto after = untagged_.upper_bound(address);  // the first block starting past p
    if (after != untagged_.begin()) {
      const auto& [start, candidate] = *std::prev(after);
      if (address - start < candidate.bytes) block = &candidate;
    }
  }
  if (!block || block->session == 0 || block->session != session) return std::nullopt;
  return block->row;
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
