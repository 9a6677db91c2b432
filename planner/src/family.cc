// Fitting a shape family: structure check, then per allocation the simplest exact polynomial.
// Exact arithmetic throughout (128-bit integers with overflow checks, Cramer's rule on at most
// 3x3 systems): a size off by one byte is a wrong plan, so nothing is rounded.
#include "memoplan/planner/family.h"

#include <algorithm>
#include <array>
#include <numeric>

namespace memoplan::family {
namespace {

using i128 = __int128;
using Exponents = std::array<uint8_t, kMaxVarying>;

bool mul(i128 a, i128 b, i128* out) { return !__builtin_mul_overflow(a, b, out); }
bool add(i128 a, i128 b, i128* out) { return !__builtin_add_overflow(a, b, out); }
bool sub(i128 a, i128 b, i128* out) { return !__builtin_sub_overflow(a, b, out); }

// Monomials over `varying` dims, each exponent at most 2, total degree at most kMaxDegree, lowest
// degree first: the order in which simpler formulas are preferred.
std::vector<Exponents> monomials(size_t varying) {
  std::vector<Exponents> all;
  Exponents e{};
  for (;;) {
    int degree = 0;
    for (size_t v = 0; v < varying; ++v) degree += e[v];
    if (degree <= kMaxDegree) all.push_back(e);
    size_t v = 0;
    while (v < varying && e[v] == 2) e[v++] = 0;
    if (v == varying) break;
    ++e[v];
  }
  std::stable_sort(all.begin(), all.end(), [](const Exponents& a, const Exponents& b) {
    return a[0] + a[1] + a[2] < b[0] + b[1] + b[2];
  });
  return all;
}

bool monomial_value(const Exponents& e, const std::vector<int64_t>& values, i128* out) {
  i128 r = 1;
  for (size_t v = 0; v < values.size(); ++v) {
    for (int p = 0; p < e[v]; ++p) {
      if (!mul(r, values[v], &r)) return false;
    }
  }
  *out = r;
  return true;
}

// Determinant of the k x k matrix m (k <= 3), false on overflow.
bool determinant(const i128 m[3][3], int k, i128* out) {
  if (k == 1) {
    *out = m[0][0];
    return true;
  }
  auto minor2 = [&](int r0, int r1, int c0, int c1, i128* d) {
    i128 a, b;
    return mul(m[r0][c0], m[r1][c1], &a) && mul(m[r0][c1], m[r1][c0], &b) && sub(a, b, d);
  };
  if (k == 2) return minor2(0, 1, 0, 1, out);
  i128 d0, d1, d2, t0, t1, t2, s;
  if (!minor2(1, 2, 1, 2, &d0) || !minor2(1, 2, 0, 2, &d1) || !minor2(1, 2, 0, 1, &d2))
    return false;
  if (!mul(m[0][0], d0, &t0) || !mul(m[0][1], d1, &t1) || !mul(m[0][2], d2, &t2)) return false;
  return sub(t0, t1, &s) && add(s, t2, out);
}

i128 abs128(i128 x) { return x < 0 ? -x : x; }
i128 gcd128(i128 a, i128 b) {
  a = abs128(a);
  b = abs128(b);
  while (b != 0) {
    const i128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// The distinct shapes' varying dims and one allocation's sizes there.
struct Points {
  std::vector<std::vector<int64_t>> dims;  // per shape: the varying dims' values
  std::vector<std::vector<i128>> values;   // per shape: every monomial's value (0 flags overflow)
  std::vector<bool> overflow;              // per shape and monomial, flattened
};

// Tries the k monomials `chosen` against sizes y: solves on k shapes (the first nonsingular
// choice), checks every shape. On success writes the formula.
bool try_terms(const std::vector<Exponents>& mono, const Points& pts,
               const std::vector<int>& chosen, const std::vector<uint64_t>& y, size_t varying,
               SizeFormula* out) {
  const int k = static_cast<int>(chosen.size());
  const size_t shapes = pts.dims.size();
  const size_t nm = mono.size();
  for (size_t s = 0; s < shapes; ++s) {
    for (int t = 0; t < k; ++t) {
      if (pts.overflow[s * nm + static_cast<size_t>(chosen[t])]) return false;
    }
  }
  // Rows: combinations of k shapes in order, the first with a nonzero determinant.
  std::vector<int> rows(static_cast<size_t>(k));
  std::iota(rows.begin(), rows.end(), 0);
  for (;;) {
    i128 a[3][3] = {};
    for (int r = 0; r < k; ++r) {
      for (int c = 0; c < k; ++c) a[r][c] = pts.values[static_cast<size_t>(rows[r])][chosen[c]];
    }
    i128 d;
    if (determinant(a, k, &d) && d != 0) {
      i128 numerators[3];
      bool ok = true;
      for (int c = 0; c < k && ok; ++c) {
        i128 b[3][3];
        for (int r = 0; r < k; ++r) {
          for (int cc = 0; cc < k; ++cc) {
            b[r][cc] = cc == c ? static_cast<i128>(y[static_cast<size_t>(rows[r])]) : a[r][cc];
          }
        }
        ok = determinant(b, k, &numerators[c]);
      }
      if (!ok) return false;
      // Every shape: sum numerators * monomials == y * d.
      for (size_t s = 0; s < shapes && ok; ++s) {
        i128 sum = 0, term, target;
        for (int c = 0; c < k && ok; ++c) {
          ok = mul(numerators[c], pts.values[s][chosen[c]], &term) && add(sum, term, &sum);
        }
        ok = ok && mul(static_cast<i128>(y[s]), d, &target) && sum == target;
      }
      if (!ok) return false;
      i128 g = abs128(d);
      for (int c = 0; c < k; ++c) g = gcd128(g, numerators[c]);
      if (d < 0) g = -g;
      SizeFormula f;
      const i128 denominator = d / g;
      if (denominator > INT64_MAX) return false;
      f.denominator = static_cast<int64_t>(denominator);
      for (int c = 0; c < k; ++c) {
        const i128 coefficient = numerators[c] / g;
        if (coefficient == 0) continue;
        if (coefficient > INT64_MAX || coefficient < INT64_MIN) return false;
        Term term_out;
        term_out.coefficient = static_cast<int64_t>(coefficient);
        for (size_t v = 0; v < varying; ++v) term_out.exponents[v] = mono[chosen[c]][v];
        f.terms.push_back(term_out);
      }
      *out = f;
      return true;
    }
    // Next combination of k rows out of `shapes`.
    int i = k - 1;
    while (i >= 0 && rows[static_cast<size_t>(i)] == static_cast<int>(shapes) - k + i) --i;
    if (i < 0) return false;
    ++rows[static_cast<size_t>(i)];
    for (int j = i + 1; j < k; ++j)
      rows[static_cast<size_t>(j)] = rows[static_cast<size_t>(j - 1)] + 1;
  }
}

// The simplest formula for sizes y: fewest terms, then lowest degrees; at most shapes - 1 terms so
// that at least one shape verifies what the others determined.
bool fit_sizes(const std::vector<Exponents>& mono, const Points& pts,
               const std::vector<uint64_t>& y, size_t varying, SizeFormula* out) {
  if (std::all_of(y.begin(), y.end(), [](uint64_t v) { return v == 0; })) {
    *out = SizeFormula{};
    return true;
  }
  const int max_terms = std::min<int>(kMaxTerms, static_cast<int>(pts.dims.size()) - 1);
  const int nm = static_cast<int>(mono.size());
  for (int k = 1; k <= max_terms && k <= nm; ++k) {
    std::vector<int> chosen(static_cast<size_t>(k));
    std::iota(chosen.begin(), chosen.end(), 0);
    for (;;) {
      if (try_terms(mono, pts, chosen, y, varying, out)) return true;
      int i = k - 1;
      while (i >= 0 && chosen[static_cast<size_t>(i)] == nm - k + i) --i;
      if (i < 0) break;
      ++chosen[static_cast<size_t>(i)];
      for (int j = i + 1; j < k; ++j) {
        chosen[static_cast<size_t>(j)] = chosen[static_cast<size_t>(j - 1)] + 1;
      }
    }
  }
  return false;
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

// Why row i of b does not belong to the same family as row i of a ("" when it does).
std::string structure_mismatch(const Trace& a, const Trace& b, size_t i) {
  const Allocation &x = a.allocations[i], &y = b.allocations[i];
  if (x.begin != y.begin || x.end != y.end) return "lifetime";
  if (effective_align(a, x) != effective_align(b, y)) return "alignment";
  if (x.escapes != y.escapes) return "escaping";
  if (x.provenance.op != y.provenance.op || x.provenance.outer_op != y.provenance.outer_op) {
    return "op (" + x.provenance.op + " vs " + y.provenance.op + ")";
  }
  if (x.provenance.node != y.provenance.node) return "graph node";
  return "";
}

}  // namespace

int SizeFormula::degree() const {
  int d = 0;
  for (const Term& t : terms) {
    int td = 0;
    for (uint8_t e : t.exponents) td += e;
    d = std::max(d, td);
  }
  return d;
}

FitSummary summarize(const Model& model) {
  FitSummary s;
  s.allocations = model.sizes.size();
  for (const SizeFormula& f : model.sizes) ++s.by_degree[std::min(f.degree(), kMaxDegree)];
  return s;
}

Result<Model> fit_family(const std::vector<Sample>& samples) {
  if (samples.empty()) return Error{"no samples"};
  for (const Sample& s : samples) {
    if (!s.trace) return Error{"a sample without a trace"};
    if (s.dims.size() != samples[0].dims.size()) {
      return Error{"dims of different counts: " + dims_string(samples[0].dims) + " and " +
                   dims_string(s.dims)};
    }
  }
  // Distinct shapes; a repeated shape must have made the same sizes.
  std::vector<const Sample*> distinct;
  for (const Sample& s : samples) {
    const Sample* same = nullptr;
    for (const Sample* d : distinct) same = d->dims == s.dims ? d : same;
    if (!same) {
      distinct.push_back(&s);
      continue;
    }
    const auto &a = same->trace->allocations, &b = s.trace->allocations;
    bool equal = a.size() == b.size();
    for (size_t i = 0; equal && i < a.size(); ++i) equal = a[i].size == b[i].size;
    if (!equal) {
      return Error{"two passes of dims " + dims_string(s.dims) +
                   " made different allocations: sizes do not follow from the dims"};
    }
  }
  if (distinct.size() < 2) return Error{"fewer than two distinct shapes"};

  Model model;
  model.dims = distinct[0]->dims;
  for (uint32_t d = 0; d < model.dims.size(); ++d) {
    for (const Sample* s : distinct) {
      if (s->dims[d] != model.dims[d]) {
        model.varying.push_back(d);
        break;
      }
    }
  }
  if (model.varying.size() > static_cast<size_t>(kMaxVarying)) {
    return Error{std::to_string(model.varying.size()) + " dims vary; at most " +
                 std::to_string(kMaxVarying) + " can"};
  }
  const Trace& first = *distinct[0]->trace;
  for (const Sample* s : distinct) {
    const Trace& t = *s->trace;
    if (t.allocations.size() != first.allocations.size()) {
      return Error{"dims " + dims_string(s->dims) + " made " +
                   std::to_string(t.allocations.size()) + " allocations, dims " +
                   dims_string(model.dims) + " " + std::to_string(first.allocations.size()) +
                   ": not one family"};
    }
    for (size_t i = 0; i < first.allocations.size(); ++i) {
      const std::string why = structure_mismatch(first, t, i);
      if (!why.empty()) {
        return Error{"allocation " + std::to_string(i) + " differs in " + why + " between dims " +
                     dims_string(model.dims) + " and " + dims_string(s->dims) + ": not one family"};
      }
    }
  }

  const size_t varying = model.varying.size();
  const std::vector<Exponents> mono = monomials(varying);
  Points pts;
  for (const Sample* s : distinct) {
    std::vector<int64_t> v;
    for (uint32_t d : model.varying) v.push_back(s->dims[d]);
    std::vector<i128> values(mono.size());
    for (size_t m = 0; m < mono.size(); ++m) {
      const bool ok = monomial_value(mono[m], v, &values[m]);
      pts.overflow.push_back(!ok);
    }
    pts.dims.push_back(std::move(v));
    pts.values.push_back(std::move(values));
  }
  model.skeleton = first;
  // Sharing claims (memory min) hold for the sizes they were recorded with: a slice's offset, an
  // alias's size. A predicted trace shares nothing.
  for (Allocation& a : model.skeleton.allocations) {
    a.alias_of = a.slice_of = kNoRow;
    a.slice_offset = 0;
  }
  model.samples = static_cast<uint32_t>(distinct.size());
  model.sizes.resize(first.allocations.size());
  std::vector<uint64_t> y(distinct.size());
  for (size_t i = 0; i < first.allocations.size(); ++i) {
    for (size_t s = 0; s < distinct.size(); ++s) y[s] = distinct[s]->trace->allocations[i].size;
    if (!fit_sizes(mono, pts, y, varying, &model.sizes[i])) {
      std::string sizes;
      for (size_t s = 0; s < distinct.size(); ++s) {
        sizes += (s ? ", " : "") + std::to_string(y[s]) + " at " + dims_string(distinct[s]->dims);
      }
      return Error{"allocation " + std::to_string(i) + " (" + first.allocations[i].provenance.op +
                   "): no formula of at most " +
                   std::to_string(std::min<size_t>(kMaxTerms, distinct.size() - 1)) +
                   " terms gives its sizes (" + sizes + ")"};
    }
  }
  return model;
}

Result<Trace> instantiate(const Model& model, const std::vector<int64_t>& dims) {
  if (dims.size() != model.dims.size()) {
    return Error{"dims " + dims_string(dims) + " have another count than the family's " +
                 dims_string(model.dims)};
  }
  std::vector<int64_t> v;
  for (uint32_t d = 0; d < dims.size(); ++d) {
    const bool varies =
        std::find(model.varying.begin(), model.varying.end(), d) != model.varying.end();
    if (varies) {
      v.push_back(dims[d]);
    } else if (dims[d] != model.dims[d]) {
      return Error{"dim " + std::to_string(d) + " is " + std::to_string(dims[d]) +
                   ", the family's " + std::to_string(model.dims[d]) + ": another family"};
    }
  }
  Trace trace = model.skeleton;
  trace.meta.input_shapes = dims_string(dims);
  for (size_t i = 0; i < model.sizes.size(); ++i) {
    const SizeFormula& f = model.sizes[i];
    i128 sum = 0;
    bool ok = true;
    for (const Term& t : f.terms) {
      Exponents e{};
      for (size_t k = 0; k < v.size(); ++k) e[k] = t.exponents[k];
      i128 m, term;
      ok = ok && monomial_value(e, v, &m) && mul(m, t.coefficient, &term) && add(sum, term, &sum);
    }
    if (!ok || sum < 0 || sum % f.denominator != 0 || sum / f.denominator > INT64_MAX) {
      return Error{"allocation " + std::to_string(i) +
                   ": its formula gives no size in bytes at dims " + dims_string(dims) +
                   " (outside what the samples describe)"};
    }
    trace.allocations[i].size = static_cast<uint64_t>(sum / f.denominator);
  }
  return trace;
}

}  // namespace memoplan::family
