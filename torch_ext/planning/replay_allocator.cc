// The replay allocator: c10's CPU allocator once a module is planned. On a thread replaying a
// plan, each non-empty request is served by its ReplayState (replay::serve_slot, the runtime's
// hit, the same the shim uses) from the slots of the graph visit the thread is in; everything
// else goes to the allocator installed before (c10's). Frees of arena blocks go back to their arena from any thread.
#include <c10/core/Allocator.h>

#include <mutex>

#include "arena_region.h"
#include "memoplan/torch/allocator_base.h"
#include "memoplan/torch/cpu_allocator_swap.h"
#include "planning.h"
#include "tagged_allocator.h"
#include "thread_pass.h"

namespace memoplan::torch_ext::runtime_pass {
namespace {

// Warm-up passes: tensors this large get exact blocks (a mapping each, given back at their free);
// smaller ones stay with the allocator behind (whatever it keeps of them is small).
constexpr size_t kExactBytes = 16 << 10;

class ReplayAllocator final : public AllocatorBase<ReplayAllocator> {
 public:
  explicit ReplayAllocator(c10::Allocator* next) : next_(next) {}

  c10::DataPtr allocate_block(size_t bytes) const {
    ThreadPass& t = thread_pass();
    if (t.mode == ThreadPass::Mode::kReplay && bytes != 0) {
      replay::Fallback why;
      if (void* p = t.replay.serve(bytes, &why)) {
        ++t.counters.planned_hits;
        return c10::DataPtr(p, p, &delete_block, c10::Device(c10::DeviceType::CPU));
      }
      ++t.counters.fallbacks[static_cast<int>(why)];
    }
    if (t.mode != ThreadPass::Mode::kIdle && bytes != 0) ++t.counters.passed_on;
    if (t.warming && bytes >= kExactBytes) {
      if (c10::DataPtr exact = TaggedAllocator::instance().allocate_exact(bytes)) {
        ++t.counters.exact_blocks;
        return exact;
      }
    }
    return next_->allocate(bytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_block; }

  static void delete_block(void* p) {
    replay::ArenaRegion& arenas = arena_region();
    if (arenas.contains(p)) return arenas.free(p, thread_token());
    if (tagged->owns(p)) return tagged->raw_deleter()(p);  // a warm-up pass's exact block
    next_raw_deleter(p);
  }
  static c10::DeleterFnPtr next_raw_deleter;
  static TaggedAllocator* tagged;  // set at install: no static guard on every free

 private:
  c10::Allocator* next_;
};
c10::DeleterFnPtr ReplayAllocator::next_raw_deleter = nullptr;
TaggedAllocator* ReplayAllocator::tagged = nullptr;

}  // namespace

void install_replay_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* next = c10::GetAllocator(c10::DeviceType::CPU);
    ReplayAllocator::next_raw_deleter = next->raw_deleter();
    ReplayAllocator::tagged = &TaggedAllocator::instance();
    // Never uninstalled: tensors it served may outlive every planned module.
    static ReplayAllocator* replay = new ReplayAllocator(next);
    // Kept, never destroyed: its destructor would put the previous allocator back.
    static CpuAllocatorSwap* installed = new CpuAllocatorSwap(replay);
    (void)installed;
  });
}

}  // namespace memoplan::torch_ext::runtime_pass
