// Sharing bytes below the offset lower bound (PlanOptions::memory "min"; Occamy's tensor
// coalescing and concat without copies): what the memoplan::ShareInputs nodes of a rewritten
// graph record at the profiled pass, how those records become the trace's claims (alias_of,
// slice_of: memoplan/planner/aliasing.h), and what a replayed pass checks before it lays a block
// over live ones. No torch headers: sharing_pass.cc turns a node's inputs into ShareInputs.
#pragma once

#include <cstdint>
#include <vector>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/trace.h"

namespace memoplan::torch_ext {

// Which ops a ShareInputs node stands before.
enum class ShareKind : uint8_t {
  // An op that reads its inputs element by element into an output of the same layout (relu,
  // batch norm in inference, add, ...): its output may take the bytes of an input that dies in it.
  kElementwise = 0,
  // aten::cat along a dimension whose leading sizes are all 1: each input is one stretch of bytes
  // of the output, where it may already lie.
  kConcat = 1,
};

// One input of the node as the ShareInputs node sees it. For kConcat, the list's elements in
// order; for kElementwise, the node's tensor inputs in order.
struct ShareInput {
  const void* data = nullptr;
  uint64_t bytes = 0;
  // It may share: a contiguous tensor that is all of its storage (data at the storage's start,
  // its bytes the storage's) and, for kElementwise, whose layout the op's output takes (no other
  // input of as many elements with other strides or sharing its storage otherwise).
  bool candidate = false;
};

// What the profiled pass recorded at one ShareInputs node.
struct ShareClaim {
  uint32_t visit = 0;  // the visit (graph node) it stood before
  ShareKind kind = ShareKind::kElementwise;
  uint64_t total_bytes = 0;  // kConcat: the output's bytes (all inputs', candidates or not)
  bool complete = false;     // kConcat: every input a candidate, in a row of the pass
  struct Input {
    uint32_t index;   // position among the node's inputs (ShareInput order)
    uint64_t row;     // the trace row of its allocation
    uint64_t bytes;   // its bytes (the row's size)
    uint64_t offset;  // kConcat: where it lies in the output
  };
  std::vector<Input> inputs;  // candidates only
  uint64_t out_row = kNoRow;  // the node's output row, once resolved
};

// Turns claims into the trace's alias_of / slice_of (rows in allocation order, ids = row
// indices, provenance.node = visit index). visit_ticks[v]: the event clock when visit v began.
// An elementwise claim: the visit's first non-empty allocation, as large as a candidate input
// that was made before the visit and freed during it after that allocation, is an alias of it. A
// concat claim: the visit's first allocation of the output's bytes; each candidate input is a
// slice of it, or, when it already is a slice of an earlier concat whose inputs all lie in this
// one at the same places (DenseNet: concat k is a prefix of concat k + 1), that concat is.
void resolve_claims(Trace& trace, std::vector<ShareClaim>& claims,
                    const std::vector<uint64_t>& visit_ticks);

// What a replayed pass checks at a ShareInputs node before its output is laid over live blocks:
// input `index` of visit `visit` is the block at `offset` of `bytes`.
struct ShareCheck {
  uint32_t visit;
  uint32_t index;
  uint64_t offset;
  uint64_t bytes;
};

// The checks of the claims `plan` took (an output placed over its input), sorted by visit, and
// per row whether its slot is laid over live blocks (`shares`, sized to the trace's rows).
std::vector<ShareCheck> share_checks(const Trace& trace, const std::vector<ShareClaim>& claims,
                                     const Plan& plan, std::vector<bool>& shares);

}  // namespace memoplan::torch_ext
