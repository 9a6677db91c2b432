// What the memoplan::AllocateSlab / AllocateTensor / EndPass nodes of a rewritten graph do at run
// time, per calling thread: pick the plan for the pass's input key (or profile the pass that makes
// it), and serve each node's tensors from the thread's slab through the replay allocator. No torch
// headers: graph_pass.cc turns IValues into keys.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memoplan/torch/plan.h"
#include "planning.h"  // current_key, OffPlan
#include "sharing.h"

namespace memoplan::torch_ext::runtime_pass {

// A planned module's id (its graph's AllocateSlab carries it). Options apply to every key;
// `weight_bytes`: its weights' bytes (module_weight_bytes, planning.h).
int64_t register_module(const PlanOptions& options, uint64_t weight_bytes);

// The shape family of a pass's inputs: the key with every tensor's sizes taken out, and those
// sizes (graph_pass.cc's family_key). Written only when a pass's exact key has no plan yet.
struct FamilyOf {
  void (*fill)(const void* context, std::string* key, std::vector<int64_t>* dims) = nullptr;
  const void* context = nullptr;
};

// The three graph operators. `key` identifies the pass's inputs (shapes, dtypes, ...) exactly.
// A key without a plan whose family has been fitted (three profiled shapes whose passes make the
// same allocations: memoplan/planner/family.h) is planned from the family's formulas at once, with
// neither warm-up nor profiling; a pass that misses such a plan drops it (its key is profiled as
// any other), and a second such key stops the family's predictions.
void allocate_slab(int64_t module, const std::string& key, FamilyOf family = {});
void allocate_tensor(int64_t node);
void end_pass(int64_t module);
// A pass that cannot reach its end (an exception in the call it planned): it ends unplanned, a
// profile it was taking dropped.
void abandon_pass();
// A memoplan::ShareInputs node (memory "min"; sharing.h): records the node's inputs on a profiled
// pass, checks them against the plan on a replayed one.
void share_inputs(ShareKind kind, const ShareInput* inputs, uint32_t count);
// Whether the calling thread's ShareInputs node has anything to do (a profiled pass, or a replayed
// one whose plan checks this visit): the node describes its inputs only then.
bool share_inputs_wanted();
// Whether `module` has a plan for `key` (plan() waits for it).
bool has_plan(int64_t module, const std::string& key, PlanSummary* summary);
// What plan() and PlannedCall::plan() do to get a plan for `key`: ask for it (request_key), then
// run `pass` (warm-up, then the profiled one; a few more in case another thread profiles this
// key) until it has one. Returns its summary; throws std::runtime_error when none was made.
PlanSummary run_until_planned(int64_t module, const std::string& key, int warmup_passes,
                              const std::function<void()>& pass);
// The profiled trace and plan behind `module`'s plan for `key`; null when there is none.
std::shared_ptr<const PlanDetail> plan_detail(int64_t module, const std::string& key);
// Lets plan() plan `key` even when the module's options say plan_new_keys:false.
void request_key(int64_t module, const std::string& key);
// Forgets the plan for `key`: the next passes with it are profiled again (after warm-up).
void forget_plans(int64_t module);
// forget_plans, and what plan() was asked for: for a module that will not run again.
void forget_module(int64_t module);
// The bytes of `module`'s arenas (slabs) held by threads now, and the largest slab among its plans
// (what one more thread that runs it would take).
struct SlabBytes {
  uint64_t held = 0, largest_plan = 0;
};
SlabBytes slab_bytes(int64_t module);
// Gives back the pages of the calling thread's arenas of `module` that hold no block now (plan()
// ends with this: a thread that planned and does not serve keeps no slab's pages; one that
// serves faults them in again at its next pass). Returns the bytes given back.
uint64_t discard_thread_slabs(int64_t module);

// Plans made from a family's formulas, passes that missed one (its key then profiled), and the
// bytes of the largest arena (slab) made so far.
struct FamilyCounts {
  uint64_t plans = 0, mispredictions = 0, largest_slab_bytes = 0;
};
FamilyCounts family_counts();

}  // namespace memoplan::torch_ext::runtime_pass
