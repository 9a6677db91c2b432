// PlanStats, the public face of the runtime's counters (replay::Counters) for the graph pass.
#include <string>

#include "memoplan/torch/plan.h"
#include "pass_runtime.h"
#include "thread_pass.h"

namespace memoplan::torch_ext {
namespace {

// PlanStats's fields, once: differences follow this list.
constexpr uint64_t PlanStats::*kFields[] = {
    &PlanStats::passes,
    &PlanStats::planned_passes,
    &PlanStats::profiled_passes,
    &PlanStats::unplanned_passes,
    &PlanStats::plans,
    &PlanStats::planned_hits,
    &PlanStats::fallback_not_planned,
    &PlanStats::fallback_escaping,
    &PlanStats::fallback_overlap,
    &PlanStats::slabs,
    &PlanStats::slab_bytes,
    &PlanStats::tensor_mallocs,
    &PlanStats::warmup_exact_blocks,
    &PlanStats::family_plans,
    &PlanStats::family_mispredictions,
};

}  // namespace

PlanStats plan_stats() {
  const replay::Counters c = runtime_pass::process_counters().load();
  PlanStats s;
  s.passes = c.passes;
  s.planned_passes = c.planned_passes;
  s.profiled_passes = c.profiled_passes;
  s.unplanned_passes = c.unplanned_passes;
  s.plans = c.plans;
  s.planned_hits = c.planned_hits;
  s.fallback_not_planned = c.fallback(replay::Fallback::kNotPlanned);
  s.fallback_escaping = c.fallback(replay::Fallback::kEscaping);
  // The guard said no: the slot's memory is in use, or too many blocks are alive to track.
  s.fallback_overlap = c.fallback(replay::Fallback::kOverlap) +
                       c.fallback(replay::Fallback::kGuardFull) +
                       c.fallback(replay::Fallback::kAlignment);
  s.slabs = c.slabs;
  s.slab_bytes = c.slab_bytes;
  s.tensor_mallocs = c.passed_on;
  s.warmup_exact_blocks = c.exact_blocks;
  const runtime_pass::FamilyCounts families = runtime_pass::family_counts();
  s.family_plans = families.plans;
  s.family_mispredictions = families.mispredictions;
  s.slab_bytes_max = families.largest_slab_bytes;
  return s;
}

PassOutcome last_pass() { return runtime_pass::thread_pass().last; }

PlanStats operator-(const PlanStats& a, const PlanStats& b) {
  PlanStats d;
  for (uint64_t PlanStats::*field : kFields) d.*field = a.*field - b.*field;
  d.slab_bytes_max = a.slab_bytes_max;
  return d;
}

std::string to_string(const PlanStats& s) {
  return "passes " + std::to_string(s.passes) + " (planned " + std::to_string(s.planned_passes) +
         ", profiled " + std::to_string(s.profiled_passes) + ", unplanned " +
         std::to_string(s.unplanned_passes) + "), plans " + std::to_string(s.plans) +
         ", planned hits " + std::to_string(s.planned_hits) + ", fallbacks not_planned " +
         std::to_string(s.fallback_not_planned) + " escaping " +
         std::to_string(s.fallback_escaping) + " overlap " + std::to_string(s.fallback_overlap) +
         ", slabs " + std::to_string(s.slabs) + " (" + std::to_string(s.slab_bytes) +
         " bytes), tensor mallocs " + std::to_string(s.tensor_mallocs) + ", warm-up exact blocks " +
         std::to_string(s.warmup_exact_blocks) + ", family plans " +
         std::to_string(s.family_plans) + " (mispredicted " +
         std::to_string(s.family_mispredictions) + "), largest slab " +
         std::to_string(s.slab_bytes_max) + " bytes";
}

}  // namespace memoplan::torch_ext
