#include "min_cost_flow.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <tuple>

namespace memoplan::planner {
namespace {

constexpr int64_t kUnreached = std::numeric_limits<int64_t>::max();
constexpr size_t kNoArc = std::numeric_limits<size_t>::max();

}  // namespace

MinCostFlow::MinCostFlow(size_t nodes)
    : excess_(nodes, 0),
      potential_(nodes, 0),
      distance_(nodes, kUnreached),
      parent_arc_(nodes, kNoArc),
      settled_(nodes, false) {}

size_t MinCostFlow::add_arc(size_t from, size_t to, int64_t capacity, int64_t cost) {
  added_.push_back({from, to, capacity, cost});
  return arc_count_++;
}

void MinCostFlow::add_supply(size_t node, int64_t amount) { excess_[node] += amount; }

int64_t MinCostFlow::flow(size_t arc) const {
  return arcs_[arcs_[forward_position_[arc]].partner].residual;
}

void MinCostFlow::build_residual_graph() {
  const size_t nodes = node_count();
  first_arc_.assign(nodes + 1, 0);
  for (const AddedArc& a : added_) {
    ++first_arc_[a.from + 1];
    ++first_arc_[a.to + 1];
  }
  for (size_t v = 0; v < nodes; ++v) first_arc_[v + 1] += first_arc_[v];
  arcs_.resize(2 * added_.size());
  forward_position_.resize(added_.size());
  std::vector<size_t> next(first_arc_.begin(), first_arc_.end() - 1);
  for (size_t k = 0; k < added_.size(); ++k) {
    const AddedArc& a = added_[k];
    const size_t forward = next[a.from]++, reverse = next[a.to]++;
    arcs_[forward] = {a.to, reverse, a.capacity, a.cost};
    arcs_[reverse] = {a.from, forward, 0, -a.cost};
    forward_position_[k] = forward;
  }
  added_.clear();
  added_.shrink_to_fit();
}

Result<int64_t> MinCostFlow::solve() {
  const size_t nodes = node_count();
  int64_t balance = 0;
  for (int64_t e : excess_) balance += e;
  if (balance != 0) return Error{"supplies and demands differ by " + std::to_string(balance)};
  for (const AddedArc& a : added_) {
    if (a.from >= nodes || a.to >= nodes) return Error{"arc to a missing node"};
    if (a.capacity < 0) return Error{"negative arc capacity"};
    if (a.cost < 0) return Error{"negative arc cost (initial potentials assume none)"};
  }
  build_residual_graph();

  int64_t total_cost = 0;
  for (size_t source = 0; source < nodes; ++source) {
    while (excess_[source] > 0) {
      const size_t target = find_shortest_path(source);
      if (target == nodes) {
        reset_search();
        return Error{"supply at node " + std::to_string(source) + " cannot reach any demand"};
      }
      update_potentials(distance_[target]);

      int64_t amount = std::min(excess_[source], -excess_[target]);
      for (size_t v = target; v != source; v = arcs_[arcs_[parent_arc_[v]].partner].head) {
        amount = std::min(amount, arcs_[parent_arc_[v]].residual);
      }
      for (size_t v = target; v != source;) {
        ResidualArc& arc = arcs_[parent_arc_[v]];
        ResidualArc& reverse = arcs_[arc.partner];
        arc.residual -= amount;
        reverse.residual += amount;
        total_cost += amount * arc.cost;
        v = reverse.head;
      }
      excess_[source] -= amount;
      excess_[target] += amount;
      reset_search();
    }
  }
  return total_cost;
}

size_t MinCostFlow::find_shortest_path(size_t source) {
  std::vector<HeapEntry>& heap = heap_;
  heap.clear();
  // Among equally distant nodes the first reached goes first (FIFO): with many zero reduced costs
  // that reaches a demand sooner; on DNN-like traces it settled a third of the nodes an unordered
  // heap did.
  uint64_t pushes = 0;
  const auto later = std::greater<HeapEntry>();
  distance_[source] = 0;
  touched_.push_back(source);
  heap.emplace_back(0, pushes++, source);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const int64_t d = std::get<0>(heap.back());
    const size_t u = std::get<2>(heap.back());
    heap.pop_back();
    if (settled_[u] || d != distance_[u]) continue;  // a stale entry
    settled_[u] = true;
    settled_order_.push_back(u);
    if (excess_[u] < 0) return u;
    const int64_t base = d + potential_[u];
    for (size_t position = first_arc_[u]; position < first_arc_[u + 1]; ++position) {
      const ResidualArc& arc = arcs_[position];
      if (arc.residual <= 0) continue;
      const size_t v = arc.head;
      // The reduced cost cost + potential[u] - potential[v] is non-negative because every phase
      // keeps the potentials feasible for the residual arcs.
      const int64_t candidate = base + arc.cost - potential_[v];
      if (candidate >= distance_[v] || settled_[v]) continue;
      if (distance_[v] == kUnreached) touched_.push_back(v);
      distance_[v] = candidate;
      parent_arc_[v] = position;
      if (excess_[v] < 0 && candidate == d) {
        // Nothing left in the heap is closer than d, so v is as good as settled: stop now rather
        // than after every other node at distance d (ties are common with zero-cost arcs).
        settled_[v] = true;
        settled_order_.push_back(v);
        return v;
      }
      heap.emplace_back(candidate, pushes++, v);
      std::push_heap(heap.begin(), heap.end(), later);
    }
  }
  return node_count();
}

void MinCostFlow::update_potentials(int64_t target_distance) {
  // Only settled nodes move. Shifting every potential by one constant changes no reduced cost, so
  // the nodes the search never settled may keep theirs, as if their distance were the target's;
  // reduced costs of residual arcs then stay non-negative, and the augmenting path's arcs are 0.
  for (size_t v : settled_order_) potential_[v] += distance_[v] - target_distance;
}

void MinCostFlow::reset_search() {
  for (size_t v : touched_) {
    distance_[v] = kUnreached;
    parent_arc_[v] = kNoArc;
    settled_[v] = false;
  }
  touched_.clear();
  settled_order_.clear();
}

}  // namespace memoplan::planner
