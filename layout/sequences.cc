// FluidML Alg. 1-2: longest sequences, recursively. Alg. 1 as printed walks breadth-first and
// keeps the first distance it finds (a shortest one); the text asks for the longest, which on a
// DAG is a dynamic program in topological order, as here.
#include <algorithm>
#include <numeric>

#include "memoplan/layout/layout.h"

namespace memoplan::layout {
namespace {

// Nodes reachable from v by one edge, restricted to `alive`.
std::vector<int> successors(const LayoutGraph& g, int v, const std::vector<char>& alive) {
  std::vector<int> out;
  for (int e : g.nodes[v].outputs) {
    for (int w : g.edges[e].consumers) {
      if (alive[w] && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
    }
  }
  return out;
}

std::vector<int> topological_order(const LayoutGraph& g, const std::vector<char>& alive) {
  std::vector<int> pending(g.nodes.size(), 0), order, ready;
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    if (!alive[v]) continue;
    for (int w : successors(g, static_cast<int>(v), alive)) ++pending[w];
  }
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    if (alive[v] && !pending[v]) ready.push_back(static_cast<int>(v));
  }
  std::reverse(ready.begin(), ready.end());  // lowest index first: deterministic
  while (!ready.empty()) {
    const int v = ready.back();
    ready.pop_back();
    order.push_back(v);
    for (int w : successors(g, v, alive)) {
      if (--pending[w] == 0) ready.push_back(w);
    }
  }
  return order;
}

// The longest path (node count) among the alive nodes of one part.
std::vector<int> longest_sequence(const LayoutGraph& g, const std::vector<char>& alive) {
  const std::vector<int> order = topological_order(g, alive);
  std::vector<int> length(g.nodes.size(), 1), previous(g.nodes.size(), -1);
  for (int v : order) {
    for (int w : successors(g, v, alive)) {
      if (length[v] + 1 > length[w]) {
        length[w] = length[v] + 1;
        previous[w] = v;
      }
    }
  }
  int end = -1;
  for (int v : order) {
    if (end < 0 || length[v] > length[end]) end = v;
  }
  std::vector<int> path;
  for (int v = end; v >= 0; v = previous[v]) path.push_back(v);
  std::reverse(path.begin(), path.end());
  return path;
}

// Weakly connected parts of the alive nodes.
std::vector<std::vector<char>> parts(const LayoutGraph& g, const std::vector<char>& alive) {
  std::vector<int> part(g.nodes.size(), -1);
  std::vector<std::vector<char>> out;
  for (size_t start = 0; start < g.nodes.size(); ++start) {
    if (!alive[start] || part[start] >= 0) continue;
    out.emplace_back(g.nodes.size(), 0);
    std::vector<int> stack{static_cast<int>(start)};
    part[start] = static_cast<int>(out.size()) - 1;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      out.back()[v] = 1;
      std::vector<int> neighbours;
      for (int e : g.nodes[v].outputs) {
        for (int w : g.edges[e].consumers) neighbours.push_back(w);
      }
      for (int e : g.nodes[v].inputs) {
        if (g.edges[e].producer >= 0) neighbours.push_back(g.edges[e].producer);
      }
      for (int w : neighbours) {
        if (alive[w] && part[w] < 0) {
          part[w] = part[v];
          stack.push_back(w);
        }
      }
    }
  }
  return out;
}

void split(const LayoutGraph& g, const std::vector<char>& alive,
           std::vector<std::vector<int>>& sequences) {
  std::vector<int> sequence = longest_sequence(g, alive);
  if (sequence.empty()) return;
  std::vector<char> rest = alive;
  for (int v : sequence) rest[v] = 0;
  sequences.push_back(std::move(sequence));
  for (const std::vector<char>& part : parts(g, rest)) split(g, part, sequences);
}

}  // namespace

std::vector<std::vector<int>> extract_sequences(const LayoutGraph& graph) {
  std::vector<std::vector<int>> sequences;
  split(graph, std::vector<char>(graph.nodes.size(), 1), sequences);
  return sequences;
}

}  // namespace memoplan::layout
