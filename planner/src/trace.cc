#include "memoplan/planner/trace.h"

#include <cstdio>
#include <unordered_set>

#include "memoplan/planner/plan.h"

namespace memoplan {
namespace {

// FNV-1a over 64-bit words: stable across platforms and runs, cheap for 100k rows.
struct Fnv1a {
  uint64_t state = 1469598103934665603ull;
  void add(uint64_t word) {
    for (int i = 0; i < 8; ++i) {
      state ^= (word >> (8 * i)) & 0xff;
      state *= 1099511628211ull;
    }
  }
};

bool is_power_of_two(uint64_t x) { return x && !(x & (x - 1)); }

}  // namespace

std::string trace_fingerprint(const Trace& trace) {
  Fnv1a hash;
  hash.add(trace.allocations.size());
  for (const Allocation& a : trace.allocations) {
    hash.add(a.size);
    hash.add(effective_align(trace, a));
    hash.add(a.begin);
    hash.add(effective_end(a));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash.state));
  return hex;
}

std::string check_trace(const Trace& trace) {
  if (!is_power_of_two(trace.default_align)) {
    return "default alignment " + std::to_string(trace.default_align) + " is not a power of two";
  }
  std::unordered_set<uint64_t> ids;
  ids.reserve(trace.allocations.size());
  for (size_t row = 0; row < trace.allocations.size(); ++row) {
    const Allocation& a = trace.allocations[row];
    const std::string where = "row " + std::to_string(row) + " (id " + std::to_string(a.id) + "): ";
    if (a.end < a.begin) {
      return where + "ends (" + std::to_string(a.end) + ") before it begins (" +
             std::to_string(a.begin) + ")";
    }
    if (a.align && !is_power_of_two(a.align)) {
      return where + "alignment " + std::to_string(a.align) + " is not a power of two";
    }
    if (a.size > (uint64_t{1} << 56)) {
      return where + "size " + std::to_string(a.size) + " is beyond any address space";
    }
    if (!ids.insert(a.id).second) return where + "duplicate id";
  }
  return {};
}

const char* to_string(SolveStatus status) {
  switch (status) {
    case SolveStatus::kHeuristic:
      return "heuristic";
    case SolveStatus::kOptimal:
      return "optimal";
    case SolveStatus::kFeasible:
      return "feasible";
    case SolveStatus::kTimedOut:
      return "timed_out";
  }
  return "unknown";
}

}  // namespace memoplan
