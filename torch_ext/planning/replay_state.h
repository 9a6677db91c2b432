// Replay in the planning runtime: the plan a thread replays, its arena, the graph visit the thread
// is in with the matcher over that visit's slots, and (memory "min") the blocks the visit's
// ShareInputs node found where the plan put them. A thread's ReplayState is replay_state.cc's:
// start() gives it a plan, enter_visit() follows the graph, serve() hands out a slot (the replay
// allocator's fast path), stop() takes the plan away; pass_runtime.cc's lifecycle decides when.
// No torch headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compiled_plan.h"
#include "memoplan/replay/arena.h"
#include "memoplan/replay/matcher.h"
#include "sharing.h"

namespace memoplan::torch_ext::runtime_pass {

class ReplayState {
 public:
  // Replays `plan` in `arena` from the graph's first visit.
  void start(const CompiledPlan& plan, replay::Arena& arena);
  // No plan: the pass's remaining requests go to the allocator behind.
  void stop() {
    plan_ = nullptr;
    arena_ = nullptr;
  }
  const CompiledPlan* plan() const { return plan_; }

  // An AllocateTensor node: the next visit should be `node`'s; a graph that took another path (a
  // different branch, more loop iterations) finds it a few visits on, or gets no slots until it is
  // back in step.
  void enter_visit(int64_t node);
  // Whether the plan checks the current visit's ShareInputs node (it lays an output over live
  // blocks there); when not, no permits are kept.
  bool checks_visit();
  // A ShareInputs node: which of the blocks the plan lays the node's output over are where it put
  // them (sorted, touching ones merged).
  void check_inputs(const ShareInput* inputs, uint32_t count);
  // A tensor request of `bytes` (non-zero): the slot the plan has for it, or null with the reason
  // in `why`.
  void* serve(size_t bytes, replay::Fallback* why);

 private:
  const CompiledPlan* plan_ = nullptr;
  replay::Arena* arena_ = nullptr;
  uint32_t visit_ = 0;
  replay::Matcher matcher_;
  std::vector<replay::ByteRange> permits_;
  uint32_t permit_visit_ = ~uint32_t{0};
};

}  // namespace memoplan::torch_ext::runtime_pass
