// Profiling in the planning runtime: the session that records a thread's pass, the graph visit of
// each of its allocations (the node and the session's clock at each visit's start), what its
// ShareInputs nodes found (memory "min"), and the module and key it profiles. A thread's
// ProfileState is profile_state.cc's: begin() starts a session, enter_visit() and
// record_inputs() follow the graph, finish() or abandon() ends it; pass_runtime.cc's lifecycle
// decides when. No torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memoplan/planner/trace.h"
#include "memoplan/torch/profiler.h"
#include "sharing.h"

namespace memoplan::torch_ext::runtime_pass {

class ProfileState {
 public:
  // A finished profile: the pass's trace, the graph node of each visit, and the ShareInputs
  // claims (resolved against the trace when asked for).
  struct Finished {
    Trace trace;
    std::vector<int64_t> visit_nodes;
    std::vector<ShareClaim> claims;
  };

  bool active() const { return session_ != nullptr; }
  int64_t module() const { return module_; }
  const std::string& key() const { return key_; }

  // Starts recording `module`'s pass for `key` on this thread.
  void begin(int64_t module, const std::string& key);
  // An AllocateTensor node: the allocations from here on are `node`'s visit.
  void enter_visit(int64_t node);
  // A ShareInputs node: which of its inputs are blocks of this pass (the plan may lay the node's
  // output over those that die in it).
  void record_inputs(ShareKind kind, const ShareInput* inputs, uint32_t count);
  // Ends the session and returns the pass; `resolve` (memory "min") resolves the claims against
  // its trace.
  Finished finish(bool resolve);
  // Ends the session of a pass that never reached its end; its trace is dropped.
  void abandon();

 private:
  std::unique_ptr<ProfileSession> session_;
  std::vector<int64_t> visit_nodes_;
  std::vector<uint64_t> visit_ticks_;  // the session's clock at each visit's start
  std::vector<ShareClaim> claims_;
  int64_t module_ = -1;
  std::string key_;
};

}  // namespace memoplan::torch_ext::runtime_pass
