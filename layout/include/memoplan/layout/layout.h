// Choosing a memory layout for every tensor of a graph (FluidML, Jiang et al.): the graph is split
// into its longest sequences recursively (Alg. 1-2), a dynamic program picks the layouts along
// each sequence from measured costs (Alg. 3), tensors that several sequences scheduled
// differently get the layout most of them chose (majority vote) and the sequences that lost are
// optimized again with it fixed. Brute force gives the optimum on small graphs to compare with
// (FluidML's Table 3). Pure C++: the costs come from a callback (measured kernels in torch_ext).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "memoplan/planner/result.h"

namespace memoplan::layout {

// Nodes are ops, edges the tensors between them. An edge has one producer (or none: a graph
// input) and any number of consumers, and `layouts` candidate layouts numbered 0..layouts-1
// (0: the default, e.g. row-major).
struct LayoutGraph {
  struct Edge {
    std::string name;
    int layouts = 1;
    int producer = -1;
    std::vector<int> consumers;
  };
  struct Node {
    std::string name;
    std::vector<int> inputs, outputs;  // edge indices
    // -1: the cost depends on the layouts of all inputs together. k >= 0: each input from
    // position k on adds a term of its own, which depends only on its layout, the first k inputs'
    // and the outputs' (a concatenation's operands, a residual). The plan then chooses those
    // inputs one at a time: a sum of their layout counts tried, not a product.
    int coupled_inputs = -1;
  };
  std::vector<Edge> edges;
  std::vector<Node> nodes;
  // The time of a node given the layout of each of its input and output edges (in the order of
  // Node::inputs and Node::outputs); converting a tensor it does not take as it is belongs here.
  std::function<double(int node, const std::vector<int>& input_layouts,
                       const std::vector<int>& output_layouts)>
      cost;

  int add_edge(std::string name, int layouts);
  int add_node(std::string name, std::vector<int> inputs, std::vector<int> outputs);
};

// The layout of every edge, by edge index.
using Assignment = std::vector<int>;

// Checks the graph: indices in range, every edge at most one producer, layouts >= 1, acyclic,
// a cost callback. An error says what is wrong.
Result<bool> check_graph(const LayoutGraph& graph);

double total_cost(const LayoutGraph& graph, const Assignment& layouts);

// FluidML Alg. 1-2: the longest path of nodes (by node count) of the graph, then recursively of
// each weakly connected part of what is left, until every node is in exactly one sequence. Each
// sequence is a path: consecutive nodes are joined by an edge.
std::vector<std::vector<int>> extract_sequences(const LayoutGraph& graph);

struct LayoutPlanOptions {
  // After FluidML's plan: change one edge's layout at a time while that lowers the total (a local
  // search the paper does not have; it repairs what the majority vote lost).
  bool refine = true;
};

struct LayoutPlan {
  Assignment layouts;
  double cost = 0;
  double cost_before_refining = 0;  // FluidML's own plan
  int sequences = 0;
  int conflicts = 0;         // edges the sequences scheduled differently
  int reoptimized = 0;       // sequence DPs run again after a vote
  uint64_t evaluations = 0;  // cost callback calls
};

// FluidML's layout plan. The graph must pass check_graph.
LayoutPlan plan_layouts(const LayoutGraph& graph, const LayoutPlanOptions& options = {});

// The exact optimum by enumerating every assignment; an error when there are more than
// max_assignments of them.
Result<LayoutPlan> brute_force_layouts(const LayoutGraph& graph,
                                       uint64_t max_assignments = uint64_t{1} << 22);

}  // namespace memoplan::layout
