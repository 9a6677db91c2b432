// What the memoplan::AllocateSlab / AllocateTensor / EndPass nodes of a rewritten graph do at run
// time, per calling thread: pick the plan for the pass's input key (or profile the pass that makes
// it), and serve each node's tensors from the thread's slab through the replay allocator. No torch
// headers: graph_pass.cc turns IValues into keys.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "memoplan/torch/plan.h"
#include "planning.h"  // current_key, OffPlan

namespace memoplan::torch_ext::runtime_pass {

// A planned module's id (its graph's AllocateSlab carries it). Options apply to every key.
int64_t register_module(const PlanOptions& options);

// The three graph operators. `key` identifies the pass's inputs (shapes, dtypes, ...) exactly.
void allocate_slab(int64_t module, const std::string& key);
void allocate_tensor(int64_t node);
void end_pass(int64_t module);
// Whether `module` has a plan for `key` (plan() waits for it).
bool has_plan(int64_t module, const std::string& key, PlanSummary* summary);
// The profiled trace and plan behind `module`'s plan for `key`; null when there is none.
std::shared_ptr<const PlanDetail> plan_detail(int64_t module, const std::string& key);
// Lets plan() plan `key` even when the module's options say plan_new_keys:false.
void request_key(int64_t module, const std::string& key);
// Forgets the plan for `key`: the next passes with it are profiled again (after warm-up).
void forget_plans(int64_t module);

}  // namespace memoplan::torch_ext::runtime_pass
