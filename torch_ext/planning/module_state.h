// One planned module's shared state (its plans, shape families and counters of replaced plans),
// registered by module_registry.cc and kept under the module's lock by pass_runtime.cc and
// family_plans.cc. No torch headers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "compiled_plan.h"
#include "family_state.h"
#include "memoplan/torch/plan.h"  // PlanOptions

namespace memoplan::torch_ext::runtime_pass {

struct ModuleState {
  PlanOptions options;
  std::mutex mutex;  // everything below; taken once per new (thread, key), never per pass
  std::unordered_map<std::string, std::shared_ptr<const CompiledPlan>> plans;
  std::unordered_map<std::string, int> unplanned_passes;  // per key, before its profile
  std::unordered_set<std::string> profiling;              // keys a thread is profiling now
  std::unordered_set<std::string> requested;              // keys plan() was called with
  std::unordered_map<std::string, FamilyState> families;  // by family key
  std::atomic<uint64_t> generation{0};                    // bumped by forget_plans
  // Bumped when a family's plan is replaced by a smaller one (its placement order was learned):
  // threads look such keys up again at their next pass.
  std::atomic<uint64_t> plans_replaced{0};
  // Bytes of the module's arenas threads hold now (thread_plans.cc): made, less retired.
  std::atomic<uint64_t> arena_bytes{0};
  // forget_module: every thread drops its plans and arenas of the module at its next pass of any
  // module (ThreadPlans::drop_forgotten).
  std::atomic<bool> forgotten{false};
  // The bytes of its weights when it was rewritten (plan/graph_pass.cc): what the tuned kernels
  // weigh a packed form's extra bytes against.
  uint64_t weight_bytes = 0;
};

// How many modules were forgotten so far: a thread that saw another count sweeps its cache.
uint64_t forgotten_modules();

// The state of module `id` (register_module's); fails with a message for an unknown id.
ModuleState& module_state(int64_t id);

}  // namespace memoplan::torch_ext::runtime_pass
