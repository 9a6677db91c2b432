#include "memoplan/planner/trace.h"

#include <cstdio>
#include <unordered_map>
#include <unordered_set>
#include <vector>

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

std::string row_text(size_t row, const Allocation& a) {
  return "row " + std::to_string(row) + " (id " + std::to_string(a.id) + "): ";
}

// alias_of and slice_of name other rows and fit them; slice_of chains end.
std::string check_relations(const Trace& trace) {
  const auto& rows = trace.allocations;
  std::unordered_map<uint64_t, size_t> row_of;
  for (size_t row = 0; row < rows.size(); ++row) {
    const Allocation& a = rows[row];
    if (a.alias_of != kNoRow || a.slice_of != kNoRow) row_of.emplace(a.id, row);
  }
  if (row_of.empty()) return {};
  row_of.clear();
  for (size_t row = 0; row < rows.size(); ++row) row_of.emplace(rows[row].id, row);
  for (size_t row = 0; row < rows.size(); ++row) {
    const Allocation& a = rows[row];
    if (a.alias_of != kNoRow) {
      auto it = row_of.find(a.alias_of);
      if (it == row_of.end() || it->second == row) {
        return row_text(row, a) + "alias_of " + std::to_string(a.alias_of) + " names no other row";
      }
      const Allocation& target = rows[it->second];
      if (a.size > target.size) {
        return row_text(row, a) + "is larger (" + std::to_string(a.size) + " bytes) than the row " +
               "it is an alias of (" + std::to_string(target.size) + ")";
      }
      if (a.begin <= target.begin) {
        return row_text(row, a) + "begins (" + std::to_string(a.begin) + ") no later than the " +
               "row it is an alias of (" + std::to_string(target.begin) + ")";
      }
    }
    if (a.slice_of != kNoRow) {
      auto it = row_of.find(a.slice_of);
      if (it == row_of.end() || it->second == row) {
        return row_text(row, a) + "slice_of " + std::to_string(a.slice_of) + " names no other row";
      }
      const Allocation& whole = rows[it->second];
      if (a.slice_offset > whole.size || a.size > whole.size - a.slice_offset) {
        return row_text(row, a) + "bytes [" + std::to_string(a.slice_offset) + ", " +
               std::to_string(a.slice_offset + a.size) + ") are not inside the " +
               std::to_string(whole.size) + " bytes of the row it is a slice of";
      }
    }
  }
  // Each chain walked once: a row met again on the walk that reached it closes a cycle.
  enum : uint8_t { kUnseen, kOnWalk, kEnds };
  std::vector<uint8_t> state(rows.size(), kUnseen);
  std::vector<size_t> walk;
  for (size_t start = 0; start < rows.size(); ++start) {
    walk.clear();
    size_t row = start;
    while (state[row] == kUnseen) {
      state[row] = kOnWalk;
      walk.push_back(row);
      if (rows[row].slice_of == kNoRow) break;
      row = row_of[rows[row].slice_of];
    }
    if (state[row] == kOnWalk && rows[row].slice_of != kNoRow) {
      return row_text(row, rows[row]) + "slice_of makes a cycle";
    }
    for (size_t r : walk) state[r] = kEnds;
  }
  return {};
}

}  // namespace

std::string trace_fingerprint(const Trace& trace) {
  Fnv1a hash;
  hash.add(trace.allocations.size());
  for (const Allocation& a : trace.allocations) {
    hash.add(a.size);
    hash.add(effective_align(trace, a));
    hash.add(a.begin);
    hash.add(effective_end(a));
    // Relations change what a plan may do: hashed only where a row has one, so traces without
    // them keep the fingerprints their plans were saved with.
    if (a.alias_of != kNoRow || a.slice_of != kNoRow) {
      hash.add(a.id);
      hash.add(a.alias_of);
      hash.add(a.slice_of);
      hash.add(a.slice_offset);
    }
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
  return check_relations(trace);
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
