// FluidML Alg. 3 and the conflict resolution around it. Along a sequence the state is the layout
// of the edge joining one node to the next; a node's other edges (inputs from other sequences,
// outputs to them, skip connections) take whatever layout is cheapest for that node, and that
// choice is the sequence's vote for them. Edges the votes disagree on get the majority's layout,
// fixed, and every sequence that voted otherwise is optimized again under it, until no
// disagreement is left (each round fixes at least one edge, so this ends).
#include <algorithm>
#include <limits>
#include <map>

#include "memoplan/layout/layout.h"

namespace memoplan::layout {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Planner {
  const LayoutGraph& g;
  std::vector<int> fixed;  // per edge: a layout, or -1
  uint64_t evaluations = 0;

  // The edge from v to w (one of v's outputs that w consumes).
  int joining_edge(int v, int w) const {
    for (int e : g.nodes[v].outputs) {
      const auto& c = g.edges[e].consumers;
      if (std::find(c.begin(), c.end(), w) != c.end()) return e;
    }
    return -1;
  }

  // v's edges apart: those whose layouts are weighed together (outputs, coupled inputs), and the
  // separable inputs (LayoutGraph::Node::coupled_inputs) that are nothing else.
  void incident(int v, std::vector<int>* joint, std::vector<int>* separable) const {
    const LayoutGraph::Node& node = g.nodes[v];
    const size_t coupled =
        node.coupled_inputs < 0 ? node.inputs.size() : static_cast<size_t>(node.coupled_inputs);
    auto add = [](std::vector<int>* list, int e) {
      if (std::find(list->begin(), list->end(), e) == list->end()) list->push_back(e);
    };
    for (size_t i = 0; i < coupled; ++i) add(joint, node.inputs[i]);
    for (int e : node.outputs) add(joint, e);
    for (size_t i = coupled; i < node.inputs.size(); ++i) {
      if (std::find(joint->begin(), joint->end(), node.inputs[i]) == joint->end()) {
        add(separable, node.inputs[i]);
      }
    }
  }

  double cost(int v, const std::map<int, int>& layout_of) {
    std::vector<int> in, out;
    for (int e : g.nodes[v].inputs) in.push_back(layout_of.at(e));
    for (int e : g.nodes[v].outputs) out.push_back(layout_of.at(e));
    ++evaluations;
    return g.cost(v, in, out);
  }

  // The cheapest cost of v with the state edges set, over its free other edges; *best gets the
  // layout of every incident edge at that minimum. Every assignment of the free joint edges is
  // tried; under each, each free separable input alone (its term does not depend on the others').
  double node_min(int v, const std::map<int, int>& state, std::map<int, int>* best) {
    std::vector<int> joint, separable, free_joint, free_separable;
    incident(v, &joint, &separable);
    std::map<int, int> layout_of = state;
    auto set_free = [&](const std::vector<int>& edges, std::vector<int>* free_edges) {
      for (int e : edges) {
        if (state.count(e)) continue;
        if (fixed[e] >= 0) {
          layout_of[e] = fixed[e];
        } else {
          free_edges->push_back(e);
          layout_of[e] = 0;
        }
      }
    };
    set_free(joint, &free_joint);
    set_free(separable, &free_separable);
    double best_cost = kInfinity;
    while (true) {
      double c = cost(v, layout_of);
      for (int e : free_separable) {
        int& l = layout_of[e];
        int chosen = 0;
        for (l = 1; l < g.edges[e].layouts; ++l) {
          const double with = cost(v, layout_of);
          if (with < c) c = with, chosen = l;
        }
        l = chosen;
      }
      if (c < best_cost) {
        best_cost = c;
        *best = layout_of;
      }
      for (int e : free_separable) layout_of[e] = 0;
      size_t i = 0;  // next assignment of the free joint edges, mixed radix
      for (; i < free_joint.size(); ++i) {
        int& l = layout_of[free_joint[i]];
        if (++l < g.edges[free_joint[i]].layouts) break;
        l = 0;
      }
      if (i == free_joint.size()) break;
    }
    return best_cost;
  }

  std::vector<int> states(int edge) const {
    if (edge < 0) return {-1};
    if (fixed[edge] >= 0) return {fixed[edge]};
    std::vector<int> out(g.edges[edge].layouts);
    for (int l = 0; l < g.edges[edge].layouts; ++l) out[l] = l;
    return out;
  }

  // Alg. 3 on one sequence: the layouts of every edge its nodes touch (its votes).
  std::map<int, std::vector<int>> run(const std::vector<int>& sequence) {
    const size_t k = sequence.size();
    std::vector<int> joins(k, -1);  // joins[i]: edge from node i to node i + 1
    for (size_t i = 0; i + 1 < k; ++i) joins[i] = joining_edge(sequence[i], sequence[i + 1]);
    // best[i][s]: cheapest time of nodes 0..i with join i in state s; choice[i][s]: the state of
    // join i - 1 there, and the layouts node i took.
    std::vector<std::map<int, double>> best(k);
    std::vector<std::map<int, std::pair<int, std::map<int, int>>>> choice(k);
    for (size_t i = 0; i < k; ++i) {
      const int prev_edge = i > 0 ? joins[i - 1] : -1;
      for (int next : states(joins[i])) {
        for (int prev : states(prev_edge)) {
          const double before = i > 0 ? best[i - 1].at(prev) : 0.0;
          if (before == kInfinity) continue;
          std::map<int, int> state, taken;
          if (prev_edge >= 0) state[prev_edge] = prev;
          if (joins[i] >= 0) state[joins[i]] = next;
          const double total = before + node_min(sequence[i], state, &taken);
          auto it = best[i].find(next);
          if (it == best[i].end() || total < it->second) {
            best[i][next] = total;
            choice[i][next] = {prev, taken};
          }
        }
      }
    }
    std::map<int, std::vector<int>> votes;
    int state =
        std::min_element(best[k - 1].begin(), best[k - 1].end(), [](const auto& a, const auto& b) {
          return a.second < b.second;
        })->first;
    for (size_t i = k; i-- > 0;) {
      const auto& [prev, taken] = choice[i].at(state);
      for (const auto& [edge, layout] : taken) votes[edge].push_back(layout);
      state = prev;
    }
    return votes;
  }
};

// Single-edge moves, first improvement, until none improves: each accepted move lowers the total,
// so this ends.
void refine(const LayoutGraph& graph, LayoutPlan* plan) {
  bool improved = true;
  while (improved) {
    improved = false;
    for (size_t e = 0; e < graph.edges.size(); ++e) {
      const int kept = plan->layouts[e];
      for (int l = 0; l < graph.edges[e].layouts; ++l) {
        if (l == kept) continue;
        plan->layouts[e] = l;
        const double c = total_cost(graph, plan->layouts);
        plan->evaluations += graph.nodes.size();
        if (c < plan->cost - 1e-12) {
          plan->cost = c;
          improved = true;
          break;
        }
        plan->layouts[e] = kept;
      }
    }
  }
}

}  // namespace

LayoutPlan plan_layouts(const LayoutGraph& graph, const LayoutPlanOptions& options) {
  Planner planner{graph, std::vector<int>(graph.edges.size(), -1)};
  const std::vector<std::vector<int>> sequences = extract_sequences(graph);
  std::vector<std::map<int, std::vector<int>>> votes;
  for (const auto& s : sequences) votes.push_back(planner.run(s));
  LayoutPlan plan;
  plan.sequences = static_cast<int>(sequences.size());
  while (true) {
    // Count the votes of every edge not fixed yet.
    std::map<int, std::map<int, int>> tally;  // edge -> layout -> votes
    for (const auto& sequence_votes : votes) {
      for (const auto& [edge, layouts] : sequence_votes) {
        if (planner.fixed[edge] >= 0) continue;
        for (int l : layouts) ++tally[edge][l];
      }
    }
    std::vector<int> newly_fixed;
    for (const auto& [edge, counts] : tally) {
      if (counts.size() < 2) continue;
      // The most votes; a tie goes to the lowest layout number (the default first).
      int winner = counts.begin()->first;
      for (const auto& [layout, n] : counts) {
        if (n > counts.at(winner)) winner = layout;
      }
      planner.fixed[edge] = winner;
      newly_fixed.push_back(edge);
    }
    if (newly_fixed.empty()) break;
    plan.conflicts += static_cast<int>(newly_fixed.size());
    for (size_t s = 0; s < sequences.size(); ++s) {
      bool lost = false;
      for (int edge : newly_fixed) {
        auto it = votes[s].find(edge);
        if (it == votes[s].end()) continue;
        for (int l : it->second) lost |= l != planner.fixed[edge];
      }
      if (lost) {
        votes[s] = planner.run(sequences[s]);
        ++plan.reoptimized;
      }
    }
  }
  plan.layouts.assign(graph.edges.size(), 0);
  for (const auto& sequence_votes : votes) {
    for (const auto& [edge, layouts] : sequence_votes) plan.layouts[edge] = layouts.front();
  }
  for (size_t e = 0; e < graph.edges.size(); ++e) {
    if (planner.fixed[e] >= 0) plan.layouts[e] = planner.fixed[e];
  }
  plan.cost = plan.cost_before_refining = total_cost(graph, plan.layouts);
  plan.evaluations = planner.evaluations + graph.nodes.size();
  if (options.refine) refine(graph, &plan);
  return plan;
}

Result<LayoutPlan> brute_force_layouts(const LayoutGraph& graph, uint64_t max_assignments) {
  uint64_t count = 1;
  for (const LayoutGraph::Edge& e : graph.edges) {
    if (count > max_assignments / static_cast<uint64_t>(e.layouts)) {
      return Error{"brute force: more than " + std::to_string(max_assignments) +
                   " layout assignments"};
    }
    count *= e.layouts;
  }
  LayoutPlan plan;
  Assignment current(graph.edges.size(), 0);
  plan.cost = kInfinity;
  for (uint64_t n = 0; n < count; ++n) {
    const double c = total_cost(graph, current);
    plan.evaluations += graph.nodes.size();
    if (c < plan.cost) {
      plan.cost = c;
      plan.layouts = current;
    }
    for (size_t e = 0; e < current.size(); ++e) {
      if (++current[e] < graph.edges[e].layouts) break;
      current[e] = 0;
    }
  }
  return plan;
}

}  // namespace memoplan::layout
