// Minimum-cost flow by successive shortest paths with node potentials (Ahuja, Magnanti & Orlin,
// "Network Flows", 1993, ch. 9). Used by the `mincost_flow` strategy (Lee et al. 2019), but knows
// nothing about memory: nodes, arcs with capacities and costs, supplies and demands.
//
// Each phase starts a Dijkstra search from one node that still has supply, stops at the first node
// with unmet demand it settles and updates the potentials of the settled nodes only, so a phase
// costs the neighbourhood it searched rather than the whole graph. That is what keeps the planner's
// n phases (one per block) near-linear in practice; on degenerate graphs, where many reroutings
// cost the same, a search can still sweep most of the graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "memoplan/planner/result.h"

namespace memoplan::planner {

class MinCostFlow {
 public:
  explicit MinCostFlow(size_t nodes);

  // Adds an arc and returns its id (for flow()). Costs must be non-negative, which is what lets
  // the first phase run Dijkstra without a Bellman-Ford pass; solve() rejects negative ones.
  size_t add_arc(size_t from, size_t to, int64_t capacity, int64_t cost);

  // Positive: the node must send that much; negative: it must receive that much. Accumulates.
  void add_supply(size_t node, int64_t amount);

  // Routes every supply to the demands at the least total cost and returns that cost. Fails when
  // supplies and demands do not balance, an arc is malformed, or some supply cannot reach demand.
  // Call once.
  Result<int64_t> solve();

  // Units the optimal flow sends along the arc (valid after a successful solve()).
  int64_t flow(size_t arc) const;

  size_t node_count() const { return excess_.size(); }
  size_t arc_count() const { return arc_count_; }

 private:
  struct AddedArc {
    size_t from, to;
    int64_t capacity, cost;
  };
  // A residual arc. Arcs out of one node sit next to each other (CSR order), so a search reads
  // them sequentially instead of chasing arc ids.
  struct ResidualArc {
    size_t head;
    size_t partner;  // position of the reverse arc
    int64_t residual;
    int64_t cost;
  };

  void build_residual_graph();
  // Shortest residual path from `source` to the nearest node with demand; returns that node, or
  // node_count() when no demand is reachable. Leaves the path in parent_arc_.
  size_t find_shortest_path(size_t source);
  void update_potentials(int64_t target_distance);
  void reset_search();

  size_t arc_count_ = 0;
  std::vector<AddedArc> added_;           // until solve() builds arcs_ from them
  std::vector<size_t> forward_position_;  // added arc id -> its position in arcs_
  std::vector<size_t> first_arc_;         // arcs out of v: arcs_[first_arc_[v] .. first_arc_[v+1])
  std::vector<ResidualArc> arcs_;

  std::vector<int64_t> excess_;
  std::vector<int64_t> potential_;

  // Per-search state, reset through touched_ so a search costs what it visits, not node_count().
  std::vector<int64_t> distance_;
  std::vector<size_t> parent_arc_;
  std::vector<bool> settled_;
  std::vector<size_t> touched_;
  std::vector<size_t> settled_order_;
  using HeapEntry = std::tuple<int64_t, uint64_t, size_t>;  // (tentative distance, tie, node)
  std::vector<HeapEntry> heap_;  // kept between searches to reuse its memory
};

}  // namespace memoplan::planner
