#include "memoplan/torch/profiler.h"

#include <ATen/Parallel.h>

#include <mutex>
#include <stdexcept>
#include <utility>

#include "memoplan/torch/cpu_allocator_swap.h"
#include "record_table.h"
#include "shadow_stack.h"
#include "tagged_allocator.h"

namespace memoplan::torch_ext {
namespace {

// Concurrent sessions share one installation of the allocator and of the shadow-stack callback:
// the first begin() installs them, the last end() removes them.
struct Installation {
  std::mutex mutex;
  int sessions = 0;
  bool all_threads = false;  // a kAllThreads session is live
  std::unique_ptr<CpuAllocatorSwap> swap;
};

Installation& installation() {
  static auto* installation = new Installation;  // never destroyed, like the allocator
  return *installation;
}

}  // namespace

ProfileSession::ProfileSession(ProfileOptions options) : options_(std::move(options)) {}

ProfileSession::~ProfileSession() {
  if (!active()) return;
  try {
    end();
  } catch (...) {  // a destructor must not throw; the trace is dropped anyway
  }
}

void ProfileSession::begin() {
  if (active() || ended_) throw std::logic_error("memoplan: ProfileSession::begin() called twice");
  const bool all_threads = options_.threads == ProfileThreads::kAllThreads;
  TaggedAllocator& allocator = TaggedAllocator::instance();
  Installation& shared = installation();
  std::lock_guard<std::mutex> lock(shared.mutex);
  if (allocator.thread_attached()) {
    throw std::runtime_error("memoplan: this thread is already in a profiling session");
  }
  if (shared.all_threads || (all_threads && shared.sessions > 0)) {
    throw std::runtime_error(
        "memoplan: an all-threads profiling session cannot overlap another session");
  }
  if (options_.meta.source.empty()) options_.meta.source = "memoplan_torch";
  if (options_.meta.threads == 0) options_.meta.threads = at::get_num_threads();

  allocator.prepare();
  auto table = std::make_unique<RecordTable>(TaggedAllocator::thread_number());
  // Stack first, then recording, then the allocator: the first recorded block sees its op.
  if (shared.sessions == 0) shadow_stack::enable();
  session_ = allocator.attach(table.get(), all_threads);
  if (session_ == 0) {  // the checks above rule it out; never leave the callback behind
    if (shared.sessions == 0) shadow_stack::disable();
    throw std::runtime_error("memoplan: the profiling allocator refused the session");
  }
  table_ = std::move(table);
  shared.all_threads = all_threads;
  if (shared.sessions++ == 0) {
    shared.swap = std::make_unique<CpuAllocatorSwap>(&allocator);
    // Kept after the last session: storages made while profiling keep calling the allocator that
    // made them (resize), and those requests must reach the allocator that was there before.
    if (shared.swap->previous() != &allocator) allocator.set_fallback(shared.swap->previous());
  }
}

Trace ProfileSession::end() {
  if (!active()) throw std::logic_error("memoplan: ProfileSession::end() without begin()");
  TaggedAllocator& allocator = TaggedAllocator::instance();
  Installation& shared = installation();
  std::lock_guard<std::mutex> lock(shared.mutex);
  // After detach no allocator call reaches the table: it is ours alone.
  allocator.detach(session_);
  Trace trace = table_->finish(options_.meta);
  final_counters_ = table_->counters();
  table_.reset();
  ended_ = true;
  if (options_.threads == ProfileThreads::kAllThreads) shared.all_threads = false;
  if (--shared.sessions == 0) {
    shared.swap.reset();
    shadow_stack::disable();
  }
  return trace;
}

ProfileCounters ProfileSession::counters() const {
  if (!active()) return final_counters_;
  return TaggedAllocator::instance().with_table(session_, [](const RecordTable* table) {
    return table ? table->counters() : ProfileCounters{};
  });
}

std::optional<uint64_t> ProfileSession::allocation_of(const void* p) const {
  if (!active()) return std::nullopt;
  return TaggedAllocator::instance().find(session_, p);
}

uint64_t ProfileSession::tick() const {
  if (!active()) return 0;
  return TaggedAllocator::instance().with_table(
      session_, [](const RecordTable* table) { return table ? table->tick() : 0; });
}

uint64_t ProfileSession::tag_slot_bytes() { return TaggedAllocator::instance().slot_bytes(); }

}  // namespace memoplan::torch_ext
