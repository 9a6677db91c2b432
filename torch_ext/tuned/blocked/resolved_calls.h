// The convolution calls a thread resolved, by site and input shape (the last four shapes of a
// site: blocked_ops.cc's conv): a convolution in a pass resolves the same way every time (the
// same input shape and layout, output layout and epilogue, the same weights), through lookups under
// locks that cost a small net more than its arithmetic (bench/node_overhead.py --graph conv). What
// a call resolved is kept weakly (a primitive or form a cache drops is not held here: the call
// resolves again), per thread (no lock), and only while tuned::resolution_generation() and
// onednn::primitives_forgotten() stand (a census, a forgotten module, new kernel options empty the
// table). While a census runs nothing is kept or read: the caches mark what the pass uses. ATen
// types; for blocked/ only.
#pragma once

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <memory>

#include "memoplan/onednn/onednn.h"
#include "tuned/weight_cache.h"  // tuned::Sources

namespace memoplan::torch_ext::blocked {

// What one call runs: the primitive, its packed weight and bias, and whether it writes its output
// over the residual (a sum post-op) rather than reading it.
struct Resolution {
  std::shared_ptr<const onednn::Conv> primitive;
  std::shared_ptr<const void> weights_owner, bias_owner;  // alive for the call; null: this call's
  const void* weights = nullptr;
  const float* bias = nullptr;
  bool in_place = false;
};

struct Resolved;
struct ResolvedTable;

// This thread's table, emptied where the generations moved; null while a census runs.
ResolvedTable* resolved_calls();
// The entry of `site` for a call with this spec (its post-ops `post`, not spec.post), thread
// count and weights' sources, or null.
const Resolved* resolved_for(ResolvedTable* table, int64_t site, const onednn::ConvSpec& spec,
                             c10::ArrayRef<onednn::PostOp> post, const tuned::Sources& sources);
// The entry's variant for a residual that may (`sole`) or may not be written over, where its
// primitive and forms are all still alive.
bool take(const Resolved& entry, bool sole, Resolution& out);
// Keeps what a call of `site` resolved, unless it is for this call only (no owners) or the
// generations moved since the table was read.
void keep(ResolvedTable* table, int64_t site, const onednn::ConvSpec& spec,
          const tuned::Sources& sources, bool sole, const Resolution& r);

}  // namespace memoplan::torch_ext::blocked
