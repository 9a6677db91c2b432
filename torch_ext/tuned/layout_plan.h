// The activation layouts of a CNN's forward (FluidML's layout plan in the graph pass): NCHW or
// NHWC (channels-last) for every 4-d activation between convolutions. layout_pass.cc finds the
// layout graph in the TorchScript graph (convolutions, the ops that join two activations, the
// uses that need the default layout) and inserts memoplan::conv2d and memoplan::layout nodes;
// tuned_conv.cc measures every convolution in both layouts on its real input during the first
// pass; this file keeps those measurements per (graph, input key), runs the layout DP over them
// when the second pass starts and answers which layout each activation takes from then on.
// No torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace memoplan::torch_ext::layouts {

enum Layout : int { kNchw = 0, kNhwc = 1 };
const char* to_string(Layout layout);

// What the graph pass found in one forward graph.
struct GraphSpec {
  struct Node {
    enum class Kind {
      kConv,         // memoplan::conv2d: input edge -> output edge, both layouts possible
      kJoin,         // two or more activations into one (add, an If's branches): inputs that
                     // differ from the output's layout are converted
      kInPlaceJoin,  // add_: the output keeps input 0's layout, the others are converted to it
      kSink,         // a use that needs the default layout (graph output, unknown op)
    } kind;
    std::vector<int> inputs;  // edges
    int output = -1;          // edge, or -1
    std::string name;
  };
  struct Edge {
    bool fixed_default = false;  // a graph input or an unknown op's output: NCHW
    std::string name;
  };
  std::vector<Node> nodes;
  std::vector<Edge> edges;
  // Each memoplan::layout node: converts its input to `edge`'s layout (-1: the default), counted
  // as input `input` of `node` (its bytes price the conversion).
  struct Conversion {
    int node = -1, input = 0, edge = -1;
  };
  std::vector<Conversion> conversions;
};

// Registers a graph's spec; returns the handle its nodes carry.
int64_t register_graph(GraphSpec spec);
// Replaces a registered graph's spec (the graph pass registers first, for the handle its nodes
// carry, and fills the spec in as it rewrites; nothing runs the graph meanwhile).
void set_graph_spec(int64_t graph, GraphSpec spec);
const GraphSpec& graph_spec(int64_t graph);

// One convolution's measurements: milliseconds for every (input layout, output layout), and
// which of its implementations achieves each (tuned_conv.cc's numbering).
struct ConvCosts {
  double ms[2][2] = {{0, 0}, {0, 0}};
  int implementation[2][2] = {{0, 0}, {0, 0}};
  double convert_ms_per_mib = 0;  // measured layout conversion speed on its input
  std::string summary;            // one line: shape, candidates measured, the choices
};

// The layout of every edge, once decided for a (graph, input key).
struct Decision {
  std::vector<Layout> edge_layouts;
  double default_ms = 0, planned_ms = 0;  // the model's estimate: all NCHW, and the plan
};

// Records node `node`'s measurements in the calling thread's current pass key.
void record_conv(int64_t graph, int node, const ConvCosts& costs);
// The measurements of `node`, or null when it has none yet for this key.
const ConvCosts* conv_costs(int64_t graph, int node);
// Records the bytes a conversion node saw (first pass), which price it in the plan.
void record_conversion_bytes(int64_t graph, int conversion, uint64_t bytes);
// The layouts for the calling thread's pass; null until decided (every activation then keeps the
// default layout). `measuring_over`: a convolution that already has measurements runs again, so
// the measuring pass is over and the plan is made now.
std::shared_ptr<const Decision> decision(int64_t graph, bool measuring_over);

// One line per planned (graph, key): edges in NHWC, modelled ms of all-NCHW and of the plan.
std::string layout_report();

}  // namespace memoplan::torch_ext::layouts
