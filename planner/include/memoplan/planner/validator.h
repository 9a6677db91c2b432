// An independent check of a plan against its trace. It shares no code with the strategies (not even
// Problem): a bug in the planner's shared machinery cannot hide itself here.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/trace.h"

namespace memoplan {

struct ValidationReport {
  bool valid = true;
  size_t violations = 0;              // total count
  std::vector<std::string> messages;  // the first few, readable
};

// Checks: one offset per row; every non-empty allocation's offset is a multiple of its alignment
// and of nothing larger than the plan alignment; it ends inside the slab; no two allocations whose
// lifetimes overlap overlap in address unless the trace's claims allow it (an alias_of row at its
// row's start and no larger; a slice_of row at the place its slice_of steps add up to inside the
// other). Zero-byte rows are not checked.
ValidationReport validate_plan(const Trace& trace, const Plan& plan, size_t max_messages = 10);

}  // namespace memoplan
