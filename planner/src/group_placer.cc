// place_groups_rigidly (aliasing.h): first fit of rigid shapes. A group planned as one rectangle
// holds its whole span from its first member's birth (a dense block's concat region, full size
// while only its first feature lives); placed as the shape its members make, the bytes it does
// not hold yet stay free for others.
#include <algorithm>
#include <numeric>

#include "memoplan/planner/aliasing.h"
#include "memoplan/planner/problem.h"

namespace memoplan::planner {
namespace {

struct Member {
  size_t row;
  uint64_t at;  // offset in its item
  uint64_t size, begin, end;
};

struct Item {
  std::vector<Member> members;
  uint64_t span = 0, peak = 0, begin = ~uint64_t{0}, end = 0;
};

// The most bytes an item's members hold at once (their union).
uint64_t peak_in_use(const std::vector<Member>& members) {
  uint64_t peak = 0;
  for (const Member& m : members) {
    std::vector<std::pair<uint64_t, uint64_t>> live;
    for (const Member& o : members) {
      if (o.begin <= m.begin && m.begin < o.end) live.emplace_back(o.at, o.at + o.size);
    }
    std::sort(live.begin(), live.end());
    uint64_t used = 0, reach = 0;
    for (auto [lo, hi] : live) {
      if (hi <= reach) continue;
      used += hi - std::max(lo, reach);
      reach = hi;
    }
    peak = std::max(peak, used);
  }
  return peak;
}

}  // namespace

std::vector<uint64_t> place_groups_rigidly(const Trace& trace, const AliasGroups& groups,
                                           uint64_t alignment, bool by_span) {
  const auto& rows = trace.allocations;
  const uint64_t mask = std::max<uint64_t>(alignment, 1) - 1;
  std::vector<Item> items(groups.span.size());
  for (size_t row = 0; row < rows.size(); ++row) {
    const Allocation& a = rows[row];
    if (!is_planned(a)) continue;
    const Member m{row, groups.offset[row], (a.size + mask) & ~mask, a.begin, effective_end(a)};
    if (groups.group[row] == AliasGroups::kAlone) {
      items.emplace_back();
      items.back().members.push_back(m);
    } else {
      items[groups.group[row]].members.push_back(m);
    }
  }
  for (Item& item : items) {
    for (const Member& m : item.members) {
      item.span = std::max(item.span, m.at + m.size);
      item.begin = std::min(item.begin, m.begin);
      item.end = std::max(item.end, m.end);
    }
    item.peak = item.members.size() == 1 ? item.span : peak_in_use(item.members);
  }
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const Item &a = items[x], &b = items[y];
    const uint64_t ka = by_span ? a.span : a.peak, kb = by_span ? b.span : b.peak;
    if (ka != kb) return ka > kb;
    return a.end - a.begin > b.end - b.begin;
  });

  std::vector<uint64_t> offsets(rows.size(), 0);
  std::vector<Member> placed;  // with `at` the absolute offset
  // Item offsets in (first, second) collide; 128 bits, as offsets near 2^64 may be needed.
  std::vector<std::pair<__int128, __int128>> forbidden;
  for (size_t index : order) {
    const Item& item = items[index];
    forbidden.clear();
    for (const Member& p : placed) {
      if (p.begin >= item.end || item.begin >= p.end) continue;
      for (const Member& m : item.members) {
        if (p.begin >= m.end || m.begin >= p.end) continue;
        forbidden.emplace_back(static_cast<__int128>(p.at) - m.at - m.size,
                               static_cast<__int128>(p.at) + p.size - m.at);
      }
    }
    std::sort(forbidden.begin(), forbidden.end());
    __int128 base = 0;  // the lowest offset no forbidden interval holds
    for (auto [lo, hi] : forbidden) {
      if (lo >= base) break;
      base = std::max(base, hi);
    }
    for (const Member& m : item.members) {
      Member at = m;
      at.at = static_cast<uint64_t>(base) + m.at;
      offsets[m.row] = at.at;
      placed.push_back(at);
    }
  }
  return offsets;
}

}  // namespace memoplan::planner
