// Shape families (issue 18): one program's passes at several values of the input dims that vary
// from request to request (sequence length, batch, image side). When those passes make the same
// allocations in the same order with the same lifetimes, and only sizes differ, every size is a
// small polynomial of the varying dims (a linear layer's output grows with L, attention scores
// with L², a batch of them with B·L²). fit_family() checks the sequences and finds, for each
// allocation, the simplest such polynomial that reproduces every sample exactly with at least one
// sample left over to verify it; instantiate() then gives the trace of an unseen shape without
// profiling it, ready for plan_trace().
//
// A formula is only as good as its samples: a size that is not polynomial over the whole range
// (a stride-2 convolution's output is floor((H - 1) / 2) + 1) can fit the samples and still be
// wrong elsewhere. Callers check each prediction as the pass runs (a request whose size differs
// from its slot's falls back) and drop the family on a mismatch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/planner/result.h"
#include "memoplan/planner/trace.h"

namespace memoplan::family {

// At most this many dims may vary within a family; formulas use monomials of total degree at most
// kMaxDegree with every dim's exponent at most 2, and at most kMaxTerms of them.
constexpr int kMaxVarying = 3;
constexpr int kMaxDegree = 3;
constexpr int kMaxTerms = 3;

struct Sample {
  std::vector<int64_t> dims;     // the pass's input dims (flattened over inputs), all samples alike
  const Trace* trace = nullptr;  // its profiled pass
};

// size(d) = (sum over terms of coefficient * prod over varying dims v of d[v]^exponent[v]) /
// denominator; exact, integer at every sample.
struct Term {
  int64_t coefficient = 0;
  uint8_t exponents[kMaxVarying] = {};
};
struct SizeFormula {
  std::vector<Term> terms;  // empty: always 0 bytes
  int64_t denominator = 1;
  int degree() const;  // the highest total degree among the terms (0: a constant)
};

struct Model {
  std::vector<int64_t> dims;      // the first sample's dims (the static ones hold everywhere)
  std::vector<uint32_t> varying;  // indices into dims of the ones that vary, at most kMaxVarying
  Trace skeleton;  // the first sample's trace, without sharing claims; sizes come from `sizes`
  std::vector<SizeFormula> sizes;  // one per allocation of the skeleton, in its order
  uint32_t samples = 0;            // how many distinct shapes it was fitted on
};

// What fitting found, for reports: allocations by their formula's degree (0 constant, 1 linear in
// the dims, 2 and 3 products such as L² or B·L²).
struct FitSummary {
  uint64_t allocations = 0;
  uint64_t by_degree[kMaxDegree + 1] = {};
};
FitSummary summarize(const Model& model);

// Fits a family on two or more samples of distinct dims. Fails with the first reason found: fewer
// than two distinct shapes, dims of different counts, two samples of the same dims with different
// traces, more than kMaxVarying varying dims, allocation sequences that differ (count, order,
// lifetimes, alignment, escaping, op or graph node: data-dependent control flow), or an allocation
// whose sizes no formula of at most min(kMaxTerms, distinct shapes - 1) terms reproduces.
Result<Model> fit_family(const std::vector<Sample>& samples);

// The trace of `dims` predicted by the model (the skeleton with every size from its formula).
// Fails when dims has another count, a dim that did not vary in the samples differs (another
// family), or a formula gives a negative or fractional size there (outside what the samples
// describe).
Result<Trace> instantiate(const Model& model, const std::vector<int64_t>& dims);

}  // namespace memoplan::family
