// Deliberately written without Problem, LiveIntervalIndex or any strategy helper: it re-derives the
// rules from the trace so it can catch bugs in that shared machinery.
#include "memoplan/planner/validator.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memoplan {
namespace {

struct Reporter {
  ValidationReport& report;
  size_t max_messages;
  void fail(std::string message) {
    report.valid = false;
    ++report.violations;
    if (report.messages.size() < max_messages) report.messages.push_back(std::move(message));
  }
};

std::string describe(const Trace& trace, size_t row) {
  const Allocation& a = trace.allocations[row];
  std::string s = "row " + std::to_string(row) + " (id " + std::to_string(a.id);
  if (!a.provenance.op.empty()) s += ", " + a.provenance.op;
  return s + ")";
}

// The claims of the trace (Allocation::alias_of, ::slice_of) that let two live blocks share
// bytes, read from the rows here again rather than through the planner's aliasing.cc.
std::string text(__int128 v) {
  if (v < 0) return "-" + text(-v);
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return digits;
}

class SharingRules {
 public:
  explicit SharingRules(const Trace& trace) : rows_(trace.allocations) {
    for (const Allocation& a : rows_) any_ |= a.alias_of != kNoRow || a.slice_of != kNoRow;
    if (!any_) return;
    for (size_t row = 0; row < rows_.size(); ++row) by_id_.emplace(rows_[row].id, row);
  }
  bool any() const { return any_; }

  // Empty when rows a and b, both live, may overlap as the plan puts them; else why not (a clause
  // to append to the message).
  std::string why_not(size_t a, size_t b, const std::vector<uint64_t>& offsets) const {
    std::string why;  // the first claim that does not fit, if none does
    for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
      // 128 bits: a plan file's offsets and a trace's chains of slice offsets may pass 2^63.
      const __int128 x_start = offsets[x];
      const __int128 y_start = offsets[y];
      // y coalesced into x: at x's start, no larger.
      if (rows_[y].alias_of == rows_[x].id) {
        if (y_start == x_start && rows_[y].size <= rows_[x].size) return {};
        if (why.empty()) {
          why = y_start != x_start ? ": row " + std::to_string(y) + " may take row " +
                                         std::to_string(x) + "'s bytes only at its start"
                                   : ": row " + std::to_string(y) + " is larger than row " +
                                         std::to_string(x) + " it is an alias of";
        }
      }
      // y inside x through slice_of steps, at the place they add up to.
      __int128 inside = 0;
      for (size_t row = y; rows_[row].slice_of != kNoRow;) {
        inside += rows_[row].slice_offset;
        row = by_id_.at(rows_[row].slice_of);
        if (row != x) continue;
        if (y_start - x_start == inside) return {};
        if (why.empty()) {
          why = ": row " + std::to_string(y) + " is a slice of row " + std::to_string(x) +
                " at byte " + text(inside) + ", not at " + text(y_start - x_start);
        }
        break;
      }
    }
    return why.empty() ? " and the trace lets neither share the other's bytes" : why;
  }

 private:
  const std::vector<Allocation>& rows_;
  bool any_ = false;
  std::unordered_map<uint64_t, size_t> by_id_;
};

}  // namespace

ValidationReport validate_plan(const Trace& trace, const Plan& plan, size_t max_messages) {
  ValidationReport report;
  Reporter reporter{report, max_messages};
  const auto& rows = trace.allocations;
  if (plan.offsets.size() != rows.size()) {
    reporter.fail("plan has " + std::to_string(plan.offsets.size()) + " offsets, trace has " +
                  std::to_string(rows.size()) + " allocations");
    return report;
  }

  struct Event {
    uint64_t time;
    bool is_alloc;
    size_t row;
  };
  std::vector<Event> events;
  for (size_t row = 0; row < rows.size(); ++row) {
    const Allocation& a = rows[row];
    if (a.size == 0 || a.escapes) continue;  // never in the slab (see is_planned)
    const uint64_t align = a.align ? a.align : trace.default_align;
    const uint64_t offset = plan.offsets[row];
    if (align == 0 || offset % align != 0) {
      reporter.fail(describe(trace, row) + ": offset " + std::to_string(offset) +
                    " is not a multiple of its alignment " + std::to_string(align));
    }
    if (plan.alignment == 0 || plan.alignment % align != 0) {
      reporter.fail(describe(trace, row) + ": needs alignment " + std::to_string(align) +
                    " but the slab is only aligned to " + std::to_string(plan.alignment));
    }
    if (offset > plan.slab_bytes || a.size > plan.slab_bytes - offset) {
      reporter.fail(describe(trace, row) + ": [" + std::to_string(offset) + ", " +
                    std::to_string(offset + a.size) + ") ends outside the slab of " +
                    std::to_string(plan.slab_bytes) + " bytes");
    }
    const uint64_t end = a.end > a.begin ? a.end : a.begin + 1;
    events.push_back({a.begin, true, row});
    events.push_back({end, false, row});
  }
  // Half-open lifetimes: at one tick, what dies makes room before what is born.
  std::sort(events.begin(), events.end(), [](const Event& x, const Event& y) {
    if (x.time != y.time) return x.time < y.time;
    if (x.is_alloc != y.is_alloc) return !x.is_alloc;
    return x.row < y.row;
  });

  const SharingRules rules(trace);
  std::multimap<uint64_t, size_t> live;  // start address -> row
  std::vector<std::multimap<uint64_t, size_t>::iterator> where(rows.size());
  uint64_t largest = 0;  // the largest live-or-dead planned row: how far back an overlap can start
  for (const Event& e : events) {
    if (!e.is_alloc) {
      live.erase(where[e.row]);
      continue;
    }
    const uint64_t lo = plan.offsets[e.row];
    const uint64_t hi = lo + rows[e.row].size;
    largest = std::max(largest, rows[e.row].size);
    if (!rules.any()) {
      // No claims: live blocks never overlap, so only the neighbours can.
      auto next = live.lower_bound(lo);
      if (next != live.end() && next->first < hi) {
        reporter.fail(describe(trace, e.row) + " and " + describe(trace, next->second) +
                      " are live together and overlap in address");
      } else if (next != live.begin()) {
        auto prev = std::prev(next);
        if (prev->first + rows[prev->second].size > lo) {
          reporter.fail(describe(trace, e.row) + " and " + describe(trace, prev->second) +
                        " are live together and overlap in address");
        }
      }
    } else {
      // Claims let live blocks overlap: every live block that overlaps this one must be allowed to.
      for (auto it = live.lower_bound(lo >= largest ? lo - largest : 0);
           it != live.end() && it->first < hi; ++it) {
        const size_t other = it->second;
        if (it->first + rows[other].size <= lo) continue;
        const std::string why = rules.why_not(other, e.row, plan.offsets);
        if (!why.empty()) {
          reporter.fail(describe(trace, e.row) + " and " + describe(trace, other) +
                        " are live together and overlap in address" + why);
        }
      }
    }
    where[e.row] = live.emplace(lo, e.row);
  }
  return report;
}

}  // namespace memoplan
