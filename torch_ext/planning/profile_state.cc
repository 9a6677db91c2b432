// A thread's profiled pass (profile_state.h).
#include "profile_state.h"

#include <optional>
#include <utility>

#include "memoplan/torch/graph_node.h"

namespace memoplan::torch_ext::runtime_pass {

void ProfileState::begin(int64_t module, const std::string& key) {
  ProfileOptions options;
  options.meta.input_shapes = key;
  options.meta.source = "memoplan_torch";
  session_ = std::make_unique<ProfileSession>(options);
  session_->begin();
  visit_nodes_.assign(1, kUnknownNode);
  visit_ticks_.assign(1, 0);
  claims_.clear();
  set_current_node(0);
  module_ = module;
  key_ = key;
}

void ProfileState::enter_visit(int64_t node) {
  visit_nodes_.push_back(node);
  visit_ticks_.push_back(session_->tick());
  set_current_node(static_cast<int64_t>(visit_nodes_.size() - 1));
}

void ProfileState::record_inputs(ShareKind kind, const ShareInput* inputs, uint32_t count) {
  ShareClaim claim;
  claim.visit = static_cast<uint32_t>(visit_nodes_.size() - 1);
  claim.kind = kind;
  claim.complete = true;
  uint64_t offset = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const ShareInput& in = inputs[i];
    std::optional<uint64_t> row;
    if (in.candidate) row = session_->allocation_of(in.data);
    if (row) {
      claim.inputs.push_back({i, *row, in.bytes, offset});
    } else {
      claim.complete = false;
    }
    offset += in.bytes;
  }
  claim.total_bytes = offset;
  if (!claim.inputs.empty()) claims_.push_back(std::move(claim));
}

ProfileState::Finished ProfileState::finish(bool resolve) {
  Finished done{session_->end(), std::move(visit_nodes_), std::move(claims_)};
  session_.reset();
  set_current_node(kUnknownNode);
  if (resolve) resolve_claims(done.trace, done.claims, visit_ticks_);
  visit_nodes_.clear();
  visit_ticks_.clear();
  claims_.clear();
  return done;
}

void ProfileState::abandon() {
  if (!session_) return;
  session_->end();  // the trace of an unfinished pass is dropped
  session_.reset();
  set_current_node(kUnknownNode);
}

}  // namespace memoplan::torch_ext::runtime_pass
