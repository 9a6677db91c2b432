// Deliberately written without Problem, LiveIntervalIndex or any strategy helper: it re-derives the
// rules from the trace so it can catch bugs in that shared machinery.
#include "memoplan/planner/validator.h"

#include <algorithm>
#include <map>
#include <string>

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

  std::multimap<uint64_t, size_t> live;  // start address -> row
  std::vector<std::multimap<uint64_t, size_t>::iterator> where(rows.size());
  for (const Event& e : events) {
    if (!e.is_alloc) {
      live.erase(where[e.row]);
      continue;
    }
    const uint64_t lo = plan.offsets[e.row];
    const uint64_t hi = lo + rows[e.row].size;
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
    where[e.row] = live.emplace(lo, e.row);
  }
  return report;
}

}  // namespace memoplan
