#include "sharing.h"

#include <algorithm>
#include <unordered_map>

namespace memoplan::torch_ext {
namespace {

constexpr uint64_t kForever = ~uint64_t{0};

// The first non-empty row made in each visit.
std::vector<uint64_t> first_rows(const Trace& trace, size_t visits) {
  std::vector<uint64_t> first(visits, kNoRow);
  for (size_t row = 0; row < trace.allocations.size(); ++row) {
    const Allocation& a = trace.allocations[row];
    const int64_t v = a.provenance.node;
    if (a.size == 0 || v < 0 || static_cast<size_t>(v) >= visits) continue;
    if (first[static_cast<size_t>(v)] == kNoRow) first[static_cast<size_t>(v)] = row;
  }
  return first;
}

// A concat output's inputs (row -> place), for the concats after it.
struct ConcatRecord {
  bool complete = false;
  std::unordered_map<uint64_t, uint64_t> at;
};

void resolve_elementwise(Trace& trace, ShareClaim& claim, uint64_t out, uint64_t visit_begin,
                         uint64_t visit_end) {
  Allocation& o = trace.allocations[out];
  for (const ShareClaim::Input& in : claim.inputs) {
    const Allocation& a = trace.allocations[in.row];
    if (in.row == out || a.escapes || a.size != o.size || in.bytes != o.size) continue;
    // Made before the op, freed in it after its output was: the op's input, dying there.
    if (a.begin >= visit_begin || a.end <= o.begin || a.end > visit_end) continue;
    o.alias_of = a.id;
    claim.out_row = out;
    return;
  }
}

void resolve_concat(Trace& trace, ShareClaim& claim, uint64_t out,
                    std::unordered_map<uint64_t, ConcatRecord>& records) {
  auto& rows = trace.allocations;
  ConcatRecord record;
  record.complete = claim.complete;
  for (const ShareClaim::Input& in : claim.inputs) {
    if (!record.at.emplace(in.row, in.offset).second) record.complete = false;  // twice
  }
  bool any = false;
  for (const ShareClaim::Input& in : claim.inputs) {
    if (in.row == out || record.at.at(in.row) != in.offset) continue;  // a second occurrence
    // Up the concats this input already lies in, while each lies whole in this one.
    uint64_t top = in.row;
    uint64_t place = in.offset;
    bool whole = true;
    while (whole && rows[top].slice_of != kNoRow && rows[top].slice_of != rows[out].id) {
      const uint64_t parent = rows[top].slice_of;
      if (rows[top].slice_offset > place) {
        whole = false;
        break;
      }
      place -= rows[top].slice_offset;
      auto it = records.find(parent);
      whole = it != records.end() && it->second.complete;
      if (whole) {
        for (const auto& [row, at] : it->second.at) {
          auto here = record.at.find(row);
          if (here == record.at.end() || here->second != at + place) whole = false;
        }
      }
      top = parent;
    }
    if (!whole || rows[top].slice_of == rows[out].id || top == out) continue;
    if (place > rows[out].size || rows[top].size > rows[out].size - place) continue;
    rows[top].slice_of = rows[out].id;
    rows[top].slice_offset = place;
    any = true;
  }
  if (any) claim.out_row = out;
  records[out] = std::move(record);
}

}  // namespace

void resolve_claims(Trace& trace, std::vector<ShareClaim>& claims,
                    const std::vector<uint64_t>& visit_ticks) {
  // Claims name rows by index, the relations by id: the profiler's traces have one for the other.
  for (size_t row = 0; row < trace.allocations.size(); ++row) {
    if (trace.allocations[row].id != row) return;
  }
  const std::vector<uint64_t> first = first_rows(trace, visit_ticks.size());
  std::unordered_map<uint64_t, ConcatRecord> concats;
  for (ShareClaim& claim : claims) {
    claim.out_row = kNoRow;
    if (claim.visit >= first.size() || first[claim.visit] == kNoRow) continue;
    const uint64_t out = first[claim.visit];
    const Allocation& o = trace.allocations[out];
    if (o.escapes || o.alias_of != kNoRow) continue;
    const uint64_t begin = visit_ticks[claim.visit];
    const uint64_t end =
        claim.visit + 1 < visit_ticks.size() ? visit_ticks[claim.visit + 1] : kForever;
    if (o.begin < begin || o.begin >= end) continue;
    if (claim.kind == ShareKind::kElementwise) {
      resolve_elementwise(trace, claim, out, begin, end);
    } else if (o.size == claim.total_bytes) {
      resolve_concat(trace, claim, out, concats);
    }
  }
}

std::vector<ShareCheck> share_checks(const Trace& trace, const std::vector<ShareClaim>& claims,
                                     const Plan& plan, std::vector<bool>& shares) {
  const auto& rows = trace.allocations;
  shares.assign(rows.size(), false);
  std::vector<ShareCheck> checks;
  if (plan.offsets.size() != rows.size()) return checks;
  auto planned = [&](uint64_t row) { return rows[row].size != 0 && !rows[row].escapes; };
  for (const ShareClaim& claim : claims) {
    const uint64_t out = claim.out_row;
    if (out == kNoRow || !planned(out)) continue;
    for (const ShareClaim::Input& in : claim.inputs) {
      if (!planned(in.row)) continue;
      const bool taken =
          claim.kind == ShareKind::kElementwise
              ? rows[out].alias_of == rows[in.row].id && plan.offsets[in.row] == plan.offsets[out]
              : plan.offsets[in.row] == plan.offsets[out] + in.offset;
      if (!taken) continue;
      checks.push_back({claim.visit, in.index, plan.offsets[in.row], rows[in.row].size});
      shares[out] = true;
    }
  }
  std::stable_sort(checks.begin(), checks.end(),
                   [](const ShareCheck& a, const ShareCheck& b) { return a.visit < b.visit; });
  return checks;
}

}  // namespace memoplan::torch_ext
