#include "memoplan/planner/aliasing.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "memoplan/planner/problem.h"

namespace memoplan::planner {
namespace {

constexpr size_t kMaxGroupRows = 4096;

// The trace's claims by row, and the test two rows must pass to share bytes while both live.
class Claims {
 public:
  explicit Claims(const Trace& trace) : rows_(trace.allocations) {
    row_of_.reserve(rows_.size());
    for (size_t row = 0; row < rows_.size(); ++row) row_of_.emplace(rows_[row].id, row);
  }
  size_t row_of(uint64_t id) const {
    auto it = row_of_.find(id);
    return it == row_of_.end() ? AliasGroups::kAlone : it->second;
  }
  // delta = offset(b) - offset(a).
  bool may_share(size_t a, size_t b, int64_t delta) const {
    return alias_pair(a, b, delta) || alias_pair(b, a, -delta) || slice_within(a, b, delta) ||
           slice_within(b, a, -delta);
  }

 private:
  // b is an alias of a: same start, no larger.
  bool alias_pair(size_t a, size_t b, int64_t delta) const {
    return delta == 0 && rows_[b].alias_of == rows_[a].id && rows_[b].size <= rows_[a].size;
  }
  // b lies in a through slice_of steps, at the place they add up to.
  bool slice_within(size_t a, size_t b, int64_t delta) const {
    __int128 at = 0;  // a hostile trace's chain of offsets may pass 2^63
    for (size_t row = b; rows_[row].slice_of != kNoRow;) {
      at += rows_[row].slice_offset;
      row = row_of(rows_[row].slice_of);
      if (row == a) return at == delta;
    }
    return false;
  }

  const std::vector<Allocation>& rows_;
  std::unordered_map<uint64_t, size_t> row_of_;
};

// Groups of rows with places fixed relative to their group's root (a weighted union-find).
class Groups {
 public:
  Groups(const Trace& trace, const Claims& claims)
      : trace_(trace),
        claims_(claims),
        root_(trace.allocations.size()),
        at_(trace.allocations.size(), 0),
        members_(trace.allocations.size()) {
    for (size_t row = 0; row < root_.size(); ++row) {
      root_[row] = row;
      members_[row] = {row};
    }
  }

  // Ties row to other so that offset(row) = offset(other) + delta, when that shares bytes only
  // as the claims allow and keeps every place a multiple of `alignment`. False: left alone.
  bool tie(size_t row, size_t other, int64_t delta, uint64_t alignment) {
    const size_t a = find(row), b = find(other);
    // Places relative to b's root once tied: row's group shifts by `shift`. Places stay within
    // +-2^61 (a hostile trace's offsets could pass 2^63), so no sum below overflows.
    const __int128 wide = static_cast<__int128>(at_[other]) + delta - at_[row];
    if (a == b) return wide == 0;
    constexpr int64_t kFar = int64_t{1} << 61;
    if (wide > kFar || wide < -kFar) return false;
    const auto shift = static_cast<int64_t>(wide);
    for (size_t x : members_[a]) {
      if (at_[x] + shift > kFar || at_[x] + shift < -kFar) return false;
    }
    if (shift % static_cast<int64_t>(alignment) != 0) return false;
    if (members_[a].size() + members_[b].size() > kMaxGroupRows) return false;
    const auto& rows = trace_.allocations;
    for (size_t x : members_[a]) {
      const int64_t x_at = at_[x] + shift;
      for (size_t y : members_[b]) {
        if (rows[x].begin >= effective_end(rows[y]) || rows[y].begin >= effective_end(rows[x]))
          continue;
        const int64_t y_at = at_[y];
        const bool apart = x_at >= y_at + static_cast<int64_t>(rows[y].size) ||
                           y_at >= x_at + static_cast<int64_t>(rows[x].size);
        if (!apart && !claims_.may_share(y, x, x_at - y_at)) return false;
      }
    }
    for (size_t x : members_[a]) {
      at_[x] += shift;
      root_[x] = b;
    }
    members_[b].insert(members_[b].end(), members_[a].begin(), members_[a].end());
    members_[a].clear();
    members_[a].shrink_to_fit();
    return true;
  }

  size_t find(size_t row) const { return root_[row]; }
  int64_t at(size_t row) const { return at_[row]; }
  const std::vector<size_t>& members(size_t root) const { return members_[root]; }

 private:
  const Trace& trace_;
  const Claims& claims_;
  // Every member points at its root directly (a tie re-points the members it moves), so find()
  // is one load; a group's members are listed at its root.
  std::vector<size_t> root_;
  std::vector<int64_t> at_;  // place relative to the root's
  std::vector<std::vector<size_t>> members_;
};

}  // namespace

AliasGroups accept_aliases(const Trace& trace, uint64_t alignment) {
  const auto& rows = trace.allocations;
  AliasGroups out;
  out.group.assign(rows.size(), AliasGroups::kAlone);
  out.offset.assign(rows.size(), 0);
  bool any = false;
  for (const Allocation& a : rows) any |= a.alias_of != kNoRow || a.slice_of != kNoRow;
  if (!any) return out;

  const Claims claims(trace);
  Groups groups(trace, claims);
  alignment = std::max<uint64_t>(alignment, 1);
  // Slices first: a concat's inputs and output are one group before any op's output is laid
  // over one of them, so a coalescing that would overwrite bytes a concat still holds is left.
  for (size_t row = 0; row < rows.size(); ++row) {
    const Allocation& a = rows[row];
    if (a.slice_of == kNoRow) continue;
    const size_t whole = claims.row_of(a.slice_of);
    if (!is_planned(a) || whole == AliasGroups::kAlone || !is_planned(rows[whole])) continue;
    const bool taken = groups.tie(row, whole, static_cast<int64_t>(a.slice_offset), alignment);
    ++(taken ? out.slices_taken : out.slices_left);
  }
  for (size_t row = 0; row < rows.size(); ++row) {
    const Allocation& a = rows[row];
    if (a.alias_of == kNoRow) continue;
    const size_t dying = claims.row_of(a.alias_of);
    if (!is_planned(a) || dying == AliasGroups::kAlone || !is_planned(rows[dying])) continue;
    const bool taken = groups.tie(row, dying, 0, alignment);
    ++(taken ? out.aliases_taken : out.aliases_left);
  }

  const uint64_t mask = alignment - 1;
  for (size_t root = 0; root < rows.size(); ++root) {
    if (groups.find(root) != root || groups.members(root).size() < 2) continue;
    const std::vector<size_t>& members = groups.members(root);
    int64_t lowest = groups.at(members.front());
    for (size_t row : members) lowest = std::min(lowest, groups.at(row));
    const size_t index = out.span.size();
    uint64_t span = 0;
    for (size_t row : members) {
      out.group[row] = index;
      out.offset[row] = static_cast<uint64_t>(groups.at(row) - lowest);
      span = std::max(span, out.offset[row] + ((rows[row].size + mask) & ~mask));
    }
    out.span.push_back(span);
    out.members.push_back(members);
  }
  return out;
}

uint64_t aliased_lower_bound(const Trace& trace, const AliasGroups& groups) {
  const auto& rows = trace.allocations;
  std::vector<std::pair<uint64_t, int64_t>> deltas;  // (tick, bytes); frees sort first
  for (size_t row = 0; row < rows.size(); ++row) {
    const Allocation& a = rows[row];
    if (!is_planned(a) || groups.group[row] != AliasGroups::kAlone) continue;
    deltas.emplace_back(a.begin, static_cast<int64_t>(a.size));
    deltas.emplace_back(effective_end(a), -static_cast<int64_t>(a.size));
  }
  // A group's bytes in use change only at its members' births and deaths: the union of the live
  // members' ranges, measured after each tick's events.
  for (const std::vector<size_t>& members : groups.members) {
    std::vector<std::pair<uint64_t, size_t>> events;  // (tick, member); deaths first at a tick
    for (size_t row : members) {
      events.emplace_back(rows[row].begin, row);
      events.emplace_back(effective_end(rows[row]), row);
    }
    std::sort(events.begin(), events.end());
    std::multimap<uint64_t, uint64_t> live;  // start -> end
    int64_t used = 0;
    for (size_t i = 0; i < events.size();) {
      const uint64_t tick = events[i].first;
      for (; i < events.size() && events[i].first == tick; ++i) {
        const size_t row = events[i].second;
        const uint64_t lo = groups.offset[row], hi = lo + rows[row].size;
        if (rows[row].begin == tick) {
          live.emplace(lo, hi);
        } else {
          auto [first, last] = live.equal_range(lo);
          for (auto it = first; it != last; ++it) {
            if (it->second == hi) {
              live.erase(it);
              break;
            }
          }
        }
      }
      int64_t now = 0;
      uint64_t reach = 0;
      for (const auto& [lo, hi] : live) {
        if (hi <= reach) continue;
        now += static_cast<int64_t>(hi - std::max(lo, reach));
        reach = hi;
      }
      deltas.emplace_back(tick, now - used);
      used = now;
    }
  }
  std::sort(deltas.begin(), deltas.end());
  int64_t live = 0, peak = 0;
  for (const auto& [tick, delta] : deltas) {
    live += delta;
    peak = std::max(peak, live);
  }
  return static_cast<uint64_t>(peak);
}

}  // namespace memoplan::planner
