// The plan stage: a recorded pass (the planner's Trace) planned and laid out as the runtime's
// slot table. The one place where the planner's offsets become replay::Slot tables, for both ways
// in: the LD_PRELOAD shim (interpose/plan_builder.cc, pass_files.cc: one cyclic pass keyed by call
// site) and the LibTorch extension (torch_ext/planning/compiled_plan.cc: visits keyed by size,
// with its sharing checks on top).
//
// Plan time only: compile() allocates (the planner's vectors, the table's); the shim calls it under
// its reentry guard, so those allocations go to its fallback allocator. No torch, no pointers: a
// PlannedPass holds offsets into a slab the caller maps (replay::ArenaRegion).
#pragma once

#include <cstdint>
#include <vector>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/planner.h"
#include "memoplan/planner/result.h"
#include "memoplan/planner/trace.h"
#include "memoplan/replay/matcher.h"

namespace memoplan::plan_stage {

// What a replayed request must match to be served by a row's slot (replay::Slot::key).
enum class SlotKey : uint8_t {
  kCallsite,  // Allocation::provenance.callsite: the shim's key (call site and size hashed)
  kSize,      // Allocation::size: the extension matches by size within a visit
};

// The order of the slot table: the order a replayed pass makes its requests in, which the matcher
// walks.
enum class SlotOrder : uint8_t {
  kRows,        // the trace's row order (record::trace_of makes rows in allocation order)
  kAllocation,  // by Allocation::begin, ties in row order: a trace file's rows may be in any order
  kVisit,       // by visit (CompileOptions::visit_nodes), row order kept inside each visit
};

struct CompileOptions {
  PlanOptions planner;  // strategy, learned row order, sharing claims (PlanOptions::aliases)
  SlotKey key = SlotKey::kCallsite;
  // One key per trace row, used instead of `key` when not empty: a size-free shim plan keys each
  // slot by the call site alone, which the trace's rows do not carry.
  std::vector<uint64_t> row_keys;
  SlotOrder order = SlotOrder::kRows;
  // kVisit: the graph node that starts each visit (visit 0: the stretch before the first node). A
  // row's visit is its provenance.node; one outside [0, visit_nodes.size()) counts as visit 0.
  std::vector<int64_t> visit_nodes;
  // Escaping rows (alive past the pass's end) of a cyclic plan get two places each after the
  // planned slab (replay/escaping.h), as long as the slab stays within this many bytes (the
  // shim's slab_max). 0: they stay unplanned, served by the fallback (the extension's plans, and
  // the shim's size-free plans, whose arena must hold the pass's blocks only).
  uint64_t escaping_limit = 0;
};

struct PlannedPass {
  // One slot per trace row, in CompileOptions::order. A slot is planned when its row has bytes and
  // does not escape (or escapes and got places: escaping_limit).
  std::vector<replay::Slot> slots;
  std::vector<uint32_t> rows;  // the trace row each slot serves
  // SlotOrder::kVisit: one per visit node, each with its stretch of `slots`; empty otherwise.
  std::vector<replay::Visit> visits;
  uint64_t slab_bytes = 0;      // the arena's bytes: the plan's slab and the escaping region
  uint64_t escaping_bytes = 0;  // of those, the escaping blocks' region (0: none placed)
  // The plan as the planner made it (offsets by trace row, slab without the escaping region,
  // lower bounds, strategy, note, planning time).
  Plan plan;
};

// Plans `trace` with options.planner and lays the plan out (lay_out). Fails when the planner does
// (an unknown strategy, a malformed trace), with its message, or when lay_out does.
Result<PlannedPass> compile(const Trace& trace, const CompileOptions& options);

// Lays out a plan made elsewhere for `trace` (a plan file, validated by the caller): the slot
// table, visits and escaping places as compile() makes them; options.planner is not used. Fails
// when the plan or options.row_keys do not have one entry per trace row.
Result<PlannedPass> lay_out(const Trace& trace, Plan plan, const CompileOptions& options);

}  // namespace memoplan::plan_stage
