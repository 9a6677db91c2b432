// Aliasing: planning below the offset lower bound (Occamy §III-B). A trace may claim that a row
// may take the bytes of another that dies at the op creating it (Allocation::alias_of: tensor
// coalescing) or that a row's contents are a slice of another's (Allocation::slice_of: a concat's
// inputs in its output). accept_aliases() takes the claims it can honour and ties rows into
// groups with fixed places relative to one another; the planner then plans each group as one
// block (its span, alive from its first member's birth to its last's death) and the validator
// checks every shared byte against the claims. docs/PLANNER.md, "Aliasing".
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/trace.h"

namespace memoplan::planner {

struct AliasGroups {
  static constexpr size_t kAlone = ~size_t{0};
  // Per trace row: its group (an index into span), or kAlone; and its byte offset in the group.
  std::vector<size_t> group;
  std::vector<uint64_t> offset;
  // Per group: its bytes (the highest member end; the lowest member is at 0) and members.
  std::vector<uint64_t> span;
  std::vector<std::vector<size_t>> members;
  // Claims taken and left: left ones would share bytes with a live row the trace ties to neither
  // (a coalesced op's input still read through a concat), misalign a row, or contradict a claim
  // taken before; claims by or on rows that are not planned (zero bytes, escaping) are skipped.
  size_t aliases_taken = 0, aliases_left = 0;
  size_t slices_taken = 0, slices_left = 0;
};

// Which claims of `trace` to take. Every row's offset in its group is a multiple of `alignment`
// (the plan's): a group placed at an aligned offset keeps every member aligned. Rows must have
// passed check_trace. O(claims x group members^2) at worst; groups are capped at 4096 rows.
AliasGroups accept_aliases(const Trace& trace, uint64_t alignment);

// The offset lower bound with the groups' sharing: the most bytes live at once, bytes that live
// members of a group share counted once. Equal to the offset lower bound without groups.
uint64_t aliased_lower_bound(const Trace& trace, const AliasGroups& groups);

}  // namespace memoplan::planner

namespace memoplan::planner {

// Places every planned row with each group as one rigid shape (its members at their places in the
// group, each only for its own lifetime, not the group's span for the group's whole life): items
// (groups and rows alone) in the order `by_span` (largest span first) or by the most bytes each
// has in use at once, each at the lowest offset where none of its rows meets a placed row alive
// at the same time. Per trace row, its offset (0 for rows not planned). O(rows^2) at worst.
std::vector<uint64_t> place_groups_rigidly(const Trace& trace, const AliasGroups& groups,
                                           uint64_t alignment, bool by_span);

}  // namespace memoplan::planner
