// The activation layouts of a CNN's forward (FluidML's layout plan in the graph pass): NCHW, NHWC
// (channels-last) or oneDNN's blocked layout for every 4-d activation between convolutions. Two
// graph passes make such a graph: layout_pass.cc (memoplan::conv2d and memoplan::layout nodes;
// NCHW or NHWC) and blocked/blocked_pass.cc (the blocked region's ops; all three, blocked while
// the first pass measures). They find the layout graph in the TorchScript graph (convolutions,
// the ops that join two activations, the uses that need the default layout); the convolutions
// measure every (input, output) layout on their real input shape during the first pass; this file
// keeps those measurements per (graph, input key), runs the layout DP over them when the second
// pass starts and answers which layout each activation takes from then on. No torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace memoplan::torch_ext::layouts {

enum Layout : int { kNchw = 0, kNhwc = 1, kBlocked = 2 };  // as onednn::Format numbers them
constexpr int kLayouts = 3;
const char* to_string(Layout layout);

// What the graph pass found in one forward graph.
struct GraphSpec {
  struct Node {
    enum class Kind {
      kConv,         // input edge (and a residual added in its epilogue, converted to the
                     // output's layout where it differs) -> output edge
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
  // The candidates of every edge not fixed (layouts 0 .. layouts - 1), and the layout every such
  // edge takes while the first pass measures, and where the plan is not faster than it.
  int layouts = 2;
  Layout default_layout = kNchw;
};

// Registers a graph's spec, owned by the module being rewritten; returns the handle its nodes
// carry.
int64_t register_graph(GraphSpec spec);
// The module will not run again: its graphs' measurements and layout decisions go (measured
// again if it runs after all).
void forget_graphs(int64_t module);
// Replaces a registered graph's spec (the graph pass registers first, for the handle its nodes
// carry, and fills the spec in as it rewrites; nothing runs the graph meanwhile).
void set_graph_spec(int64_t graph, GraphSpec spec);
const GraphSpec& graph_spec(int64_t graph);

// One convolution's measurements: milliseconds for every (input layout, output layout), and
// which of its implementations achieves each (tuned_conv.cc's numbering).
struct ConvCosts {
  double ms[kLayouts][kLayouts] = {};  // kForbidden where that pair cannot be had
  int implementation[kLayouts][kLayouts] = {};
  double convert_ms_per_mib = 0;  // measured layout conversion speed on its input
  std::string summary;            // one line: shape, candidates measured, the choices
};

constexpr double kForbidden = 1e9;  // a layout combination an op cannot produce

// The layout of every edge, once decided for a (graph, input key).
struct Decision {
  std::vector<Layout> edge_layouts;
  double default_ms = 0, planned_ms = 0;  // the model's estimate: the default layouts, the plan
};

// Records node `node`'s measurements in the calling thread's current pass key.
void record_conv(int64_t graph, int node, const ConvCosts& costs);
// The measurements of `node`, or null when it has none yet for this key.
const ConvCosts* conv_costs(int64_t graph, int node);
// What a convolution node reads on every call, in one lookup: its measurements (null until
// measured), the layouts (decision(graph, costs != null)) and its output edge. Once both are
// there they no longer change, and the calling thread keeps its own copy: a planned pass reads
// it with no lock and no reference count taken. The reference is the thread's; it stays valid
// until the thread's next conv_view.
struct ConvView {
  const ConvCosts* costs = nullptr;
  std::shared_ptr<const Decision> decision;
  int output_edge = -1;
};
const ConvView& conv_view(int64_t graph, int node);
// Records the bytes a conversion node saw (first pass), which price it in the plan.
void record_conversion_bytes(int64_t graph, int conversion, uint64_t bytes);
// The layouts for the calling thread's pass; null until decided (every activation then keeps the
// default layout). `measuring_over`: a convolution that already has measurements runs again, so
// the measuring pass is over and the plan is made now.
std::shared_ptr<const Decision> decision(int64_t graph, bool measuring_over);

// One line per planned (graph, key): edges per layout, modelled ms of the default and of the plan.
std::string layout_report();

}  // namespace memoplan::torch_ext::layouts
