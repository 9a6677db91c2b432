// A thread's replay of its plan (replay_state.h).
#include "replay_state.h"

#include <c10/core/alignment.h>  // c10::gAlignment: every planned offset is a multiple of it

#include <algorithm>

#include "memoplan/replay/serve.h"

namespace memoplan::torch_ext::runtime_pass {
namespace {

// How many visits on a graph that took another path finds its node's visit.
constexpr uint32_t kVisitLookahead = 8;

}  // namespace

void ReplayState::start(const CompiledPlan& plan, replay::Arena& arena) {
  plan_ = &plan;
  arena_ = &arena;
  visit_ = 0;
  permit_visit_ = ~uint32_t{0};
  const replay::Visit& first = plan.visits.front();
  matcher_.start_window(plan.tensors.data(), first.first_slot, first.slot_count);
}

void ReplayState::enter_visit(int64_t node) {
  const std::vector<replay::Visit>& visits = plan_->visits;
  const uint32_t next = replay::next_visit(visits.data(), static_cast<uint32_t>(visits.size()),
                                           visit_, node, kVisitLookahead);
  if (next != replay::Matcher::kNone) {
    visit_ = next;
    matcher_.start_window(plan_->tensors.data(), visits[next].first_slot,
                          visits[next].slot_count);
  } else {
    matcher_.stop();  // nothing planned until the graph is back in step
  }
}

bool ReplayState::checks_visit() {
  const std::vector<uint32_t>& begin = plan_->check_begin;
  if (visit_ + 1 < begin.size() && begin[visit_] != begin[visit_ + 1]) return true;
  permits_.clear();  // no output of this visit lies over live blocks
  return false;
}

void ReplayState::check_inputs(const ShareInput* inputs, uint32_t count) {
  permits_.clear();
  permit_visit_ = visit_;
  const CompiledPlan& plan = *plan_;
  if (plan.check_begin.empty() || visit_ + 1 >= plan.check_begin.size()) return;
  const char* base = arena_->base();
  for (uint32_t i = plan.check_begin[visit_]; i < plan.check_begin[visit_ + 1]; ++i) {
    const ShareCheck& c = plan.share_checks[i];
    if (c.index < count && inputs[c.index].data == base + c.offset) {
      permits_.push_back({c.offset, c.offset + c.bytes});
    }
  }
  std::sort(permits_.begin(), permits_.end(),
            [](const replay::ByteRange& a, const replay::ByteRange& b) { return a.lo < b.lo; });
  size_t merged = 0;
  for (size_t i = 0; i < permits_.size(); ++i) {
    if (merged && permits_[merged - 1].hi >= permits_[i].lo) {
      permits_[merged - 1].hi = std::max(permits_[merged - 1].hi, permits_[i].hi);
    } else {
      permits_[merged++] = permits_[i];
    }
  }
  permits_.resize(merged);
}

void* ReplayState::serve(size_t bytes, replay::Fallback* why) {
  *why = replay::Fallback::kNotPlanned;
  const uint32_t index = matcher_.match(bytes);
  if (index == replay::Matcher::kNone) return nullptr;
  const replay::Slot& slot = plan_->tensors[index];
  void* p = replay::serve_slot(slot, *arena_, bytes, c10::gAlignment, why);
  // memory "min": the slot lies over live blocks the plan shares it with; laid there only over
  // those its visit's ShareInputs node found where the plan put them.
  if (!p && slot.shares && *why == replay::Fallback::kOverlap && permit_visit_ == visit_ &&
      !permits_.empty()) {
    p = arena_->place_shared(slot.offset, bytes, permits_.data(),
                             static_cast<uint32_t>(permits_.size()), why);
  }
  return p;
}

}  // namespace memoplan::torch_ext::runtime_pass
