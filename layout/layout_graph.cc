// The graph itself: building it, checking it, and the cost of an assignment.
#include <algorithm>

#include "memoplan/layout/layout.h"

namespace memoplan::layout {

int LayoutGraph::add_edge(std::string name, int layouts) {
  edges.push_back({std::move(name), layouts, -1, {}});
  return static_cast<int>(edges.size()) - 1;
}

int LayoutGraph::add_node(std::string name, std::vector<int> inputs, std::vector<int> outputs) {
  const int index = static_cast<int>(nodes.size());
  for (int e : inputs) {
    if (e >= 0 && e < static_cast<int>(edges.size())) edges[e].consumers.push_back(index);
  }
  for (int e : outputs) {
    if (e >= 0 && e < static_cast<int>(edges.size()) && edges[e].producer < 0) {
      edges[e].producer = index;
    }
  }
  nodes.push_back({std::move(name), std::move(inputs), std::move(outputs)});
  return index;
}

Result<bool> check_graph(const LayoutGraph& graph) {
  if (!graph.cost) return Error{"layout graph: no cost function"};
  const int edge_count = static_cast<int>(graph.edges.size());
  std::vector<int> producers(edge_count, 0);
  for (const LayoutGraph::Edge& e : graph.edges) {
    if (e.layouts < 1) return Error{"layout graph: edge " + e.name + " has no layout"};
  }
  for (size_t v = 0; v < graph.nodes.size(); ++v) {
    const LayoutGraph::Node& node = graph.nodes[v];
    for (const auto* list : {&node.inputs, &node.outputs}) {
      for (int e : *list) {
        if (e < 0 || e >= edge_count) {
          return Error{"layout graph: node " + node.name + " names edge " + std::to_string(e) +
                       " of " + std::to_string(edge_count)};
        }
      }
    }
    if (node.coupled_inputs < -1 || node.coupled_inputs > static_cast<int>(node.inputs.size())) {
      return Error{"layout graph: node " + node.name + " couples " +
                   std::to_string(node.coupled_inputs) + " of its " +
                   std::to_string(node.inputs.size()) + " inputs"};
    }
    for (int e : node.outputs) {
      if (++producers[e] > 1) {
        return Error{"layout graph: edge " + graph.edges[e].name + " has two producers"};
      }
    }
  }
  // Kahn's algorithm: every node must come out.
  std::vector<int> pending(graph.nodes.size(), 0);
  for (size_t v = 0; v < graph.nodes.size(); ++v) {
    for (int e : graph.nodes[v].inputs) pending[v] += graph.edges[e].producer >= 0;
  }
  std::vector<int> ready;
  for (size_t v = 0; v < pending.size(); ++v) {
    if (!pending[v]) ready.push_back(static_cast<int>(v));
  }
  size_t done = 0;
  while (!ready.empty()) {
    const int v = ready.back();
    ready.pop_back();
    ++done;
    for (int e : graph.nodes[v].outputs) {
      for (int w : graph.edges[e].consumers) {
        if (--pending[w] == 0) ready.push_back(w);
      }
    }
  }
  if (done != graph.nodes.size()) return Error{"layout graph: it has a cycle"};
  return true;
}

double total_cost(const LayoutGraph& graph, const Assignment& layouts) {
  double sum = 0;
  std::vector<int> in, out;
  for (size_t v = 0; v < graph.nodes.size(); ++v) {
    in.clear();
    out.clear();
    for (int e : graph.nodes[v].inputs) in.push_back(layouts[e]);
    for (int e : graph.nodes[v].outputs) out.push_back(layouts[e]);
    sum += graph.cost(static_cast<int>(v), in, out);
  }
  return sum;
}

}  // namespace memoplan::layout
