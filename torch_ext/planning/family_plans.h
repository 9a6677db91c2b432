// The plans of a module's shape families (family_state.h) at run time: predicting a new key's
// plan from the formulas, learning the family's placement order and planning its shapes in it,
// refreshing a thread's copy of a replaced plan, and dropping a prediction that missed. Called by
// pass_runtime.cc; no torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiled_plan.h"
#include "module_state.h"
#include "thread_plans.h"

namespace memoplan::torch_ext::runtime_pass {

// The plan for a key of a fitted family, from its formulas (under the module's lock); null when
// the family cannot predict these dims.
std::shared_ptr<const CompiledPlan> predict_plan(ModuleState& m, const std::string& key,
                                                 const std::string& family_key,
                                                 const std::vector<int64_t>& dims);

// A family's plan this thread cached may since have been replaced by a smaller one (the family
// learned its placement order): the module's plan for the key is taken instead. One atomic load
// a pass; the lock only after a replacement. Returns false when the module dropped the key's plan
// meanwhile (a prediction made before the order): the thread's copy goes too, and the key is
// predicted again.
bool refresh_family_plan(ModuleState& m, CachedPlan& cached);

// Learns the family's placement order when it wants one (FamilyState::order_wanted), outside the
// lock, then plans its profiled shapes again in that order, replacing each plan that gets
// smaller. Called, and returns, with `lock` held.
void learn_family_order(ModuleState& m, const std::string& family_key,
                        std::unique_lock<std::mutex>& lock);

// A pass that missed its predicted plan: the plan goes (its key is profiled like any new key, and
// becomes one more shape of the family), and a second such key ends the family's predictions.
// `plan` is the thread's: its entry in `plans` goes too.
void drop_prediction(ThreadPlans& plans, const CompiledPlan* plan);

// Plans made from the formulas and predictions that missed, since the process started.
uint64_t family_plans_made();
uint64_t family_mispredictions_seen();

}  // namespace memoplan::torch_ext::runtime_pass
