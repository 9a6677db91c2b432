// The layout plan's state per (graph, input key): the convolutions' measurements and the
// conversions' sizes from the first pass, then FluidML's plan over them (layout/).
#include "layout_plan.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "memoplan/layout/layout.h"
#include "memoplan/torch/kernels.h"
#include "planning/planning.h"
#include "reports.h"
#include "weight_cache.h"  // tuned::rewrite_owner

namespace memoplan::torch_ext::layouts {
namespace {

struct Context {
  std::map<int, ConvCosts> convs;
  std::map<int, uint64_t> conversion_bytes;
  std::shared_ptr<const Decision> decision;
};

std::mutex mutex;
// Moved (under the lock) whenever a graph's contexts go or its spec is replaced: every thread's
// settled views (conv_view) are looked up anew.
std::atomic<uint64_t> views_epoch{0};
// Never destroyed: the ops may run while the process exits. A deque: graph_spec's references
// stay valid while more graphs are registered.
std::deque<GraphSpec>& specs() {
  static auto* table = new std::deque<GraphSpec>();
  return *table;
}
// By graph: the module whose rewrite registered it (weight_cache.h's RewriteOwner).
std::deque<int64_t>& owners() {
  static auto* table = new std::deque<int64_t>();
  return *table;
}
// By graph, then by input key: a region op looks its graph's context up on every call, and the key
// is found by reference (a (graph, key) pair copied the key's string each time).
std::map<int64_t, std::map<std::string, Context>>& contexts() {
  static auto* table = new std::map<int64_t, std::map<std::string, Context>>();
  return *table;
}
Context& context(int64_t graph) { return contexts()[graph][runtime_pass::current_key()]; }

// KernelOptions::region_layout: the layout every free edge of a blocked region's graph (the
// graphs with all kLayouts candidates) takes; -1: the plan's.
int forced_layout(const GraphSpec& spec) {
  if (spec.layouts != kLayouts) return -1;
  switch (kernel_options().region_layout) {
    case RegionLayout::kNchw:
      return kNchw;
    case RegionLayout::kNhwc:
      return kNhwc;
    case RegionLayout::kBlocked:
      return kBlocked;
    case RegionLayout::kPlanned:
      break;
  }
  return -1;
}

// Milliseconds to convert the input of each conversion node, from the bytes it saw and the median
// conversion speed the convolutions measured; unseen (a branch not taken): free.
std::map<std::pair<int, int>, double> conversion_costs(const GraphSpec& spec, const Context& c) {
  std::vector<double> rates;
  for (const auto& [node, costs] : c.convs) {
    if (costs.convert_ms_per_mib > 0) rates.push_back(costs.convert_ms_per_mib);
  }
  std::map<std::pair<int, int>, double> ms;
  if (rates.empty()) return ms;
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  const double rate = rates[rates.size() / 2];
  for (const auto& [index, bytes] : c.conversion_bytes) {
    const GraphSpec::Conversion& conversion = spec.conversions.at(static_cast<size_t>(index));
    ms[{conversion.node, conversion.input}] += rate * static_cast<double>(bytes) / (1 << 20);
  }
  return ms;
}

std::shared_ptr<const Decision> plan(const GraphSpec& spec, const Context& c) {
  layout::LayoutGraph graph;
  for (const GraphSpec::Edge& edge : spec.edges) {
    graph.add_edge(edge.name, edge.fixed_default ? 1 : spec.layouts);
  }
  for (const GraphSpec::Node& node : spec.nodes) {
    std::vector<int> outputs;
    if (node.output >= 0) outputs.push_back(node.output);
    graph.add_node(node.name, node.inputs, outputs);
    // Below, each input past the first of a convolution (its residual) or an in-place join, and
    // every input of a join or a use outside, costs its own conversion or nothing.
    const bool first_coupled = node.kind == GraphSpec::Node::Kind::kConv ||
                               node.kind == GraphSpec::Node::Kind::kInPlaceJoin;
    graph.nodes.back().coupled_inputs = first_coupled ? 1 : 0;
  }
  const auto converting = conversion_costs(spec, c);
  auto convert_ms = [&](int node, int input) {
    const auto it = converting.find({node, input});
    return it == converting.end() ? 0.0 : it->second;
  };
  graph.cost = [&](int index, const std::vector<int>& in, const std::vector<int>& out) {
    const GraphSpec::Node& node = spec.nodes[static_cast<size_t>(index)];
    const int out_layout = out.empty() ? kNchw : out[0];
    double ms = 0;
    switch (node.kind) {
      case GraphSpec::Node::Kind::kConv: {
        for (size_t i = 1; i < in.size(); ++i) {  // the residual
          if (in[i] != out_layout) ms += convert_ms(index, static_cast<int>(i));
        }
        const auto it = c.convs.find(index);
        if (it != c.convs.end()) return ms + it->second.ms[in.at(0)][out_layout];
        // Not measured (aten's, or a branch the first pass did not take): free where the region
        // defaults to NCHW (layout_pass.cc's convolutions follow the plan on aten), else its output
        // keeps the default.
        return spec.default_layout == kNchw || out_layout == spec.default_layout ? ms : kForbidden;
      }
      case GraphSpec::Node::Kind::kJoin:
        for (size_t i = 0; i < in.size(); ++i) {
          if (in[i] != out_layout) ms += convert_ms(index, static_cast<int>(i));
        }
        return ms;
      case GraphSpec::Node::Kind::kInPlaceJoin:
        if (out_layout != in.at(0)) return kForbidden;
        for (size_t i = 1; i < in.size(); ++i) {
          if (in[i] != in[0]) ms += convert_ms(index, static_cast<int>(i));
        }
        return ms;
      case GraphSpec::Node::Kind::kSink:
        for (size_t i = 0; i < in.size(); ++i) {
          if (in[i] != kNchw) ms += convert_ms(index, static_cast<int>(i));
        }
        return ms;
    }
    return ms;
  };
  // Every free edge in one layout: the default's, or a forced one.
  auto uniform = [&](int layout) {
    layout::Assignment a(spec.edges.size(), kNchw);
    for (size_t e = 0; e < spec.edges.size(); ++e) {
      if (!spec.edges[e].fixed_default) a[e] = layout;
    }
    return a;
  };
  const layout::Assignment defaults = uniform(spec.default_layout);
  auto decision = std::make_shared<Decision>();
  auto take = [&](const layout::Assignment& a) {
    decision->edge_layouts.clear();
    for (int l : a) decision->edge_layouts.push_back(static_cast<Layout>(l));
  };
  take(defaults);
  decision->default_ms = layout::total_cost(graph, defaults);
  decision->planned_ms = decision->default_ms;
  if (const int forced = forced_layout(spec); forced >= 0) {
    const layout::Assignment a = uniform(forced);
    take(a);
    decision->planned_ms = layout::total_cost(graph, a);
    return decision;
  }
  if (!layout::check_graph(graph).ok()) return decision;  // keep the default layouts
  const layout::LayoutPlan planned = layout::plan_layouts(graph);
  // Against a default that is itself a tuned choice (the blocked region), only a clear gain: each
  // pair was timed in three rounds of one call, and a plan of near-ties would follow the noise.
  const double margin = spec.default_layout == kNchw ? 1.0 : 0.97;
  if (planned.cost >= decision->default_ms * margin) return decision;
  take(planned.layouts);
  decision->planned_ms = planned.cost;
  return decision;
}

}  // namespace

const char* to_string(Layout layout) {
  return layout == kNhwc ? "NHWC" : layout == kBlocked ? "blocked" : "NCHW";
}

int64_t register_graph(GraphSpec spec) {
  std::lock_guard<std::mutex> lock(mutex);
  specs().push_back(std::move(spec));
  owners().push_back(tuned::rewrite_owner());
  return static_cast<int64_t>(specs().size()) - 1;
}

void forget_graphs(int64_t module) {
  if (module < 0) return;
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t graph = 0; graph < owners().size(); ++graph) {
    // The spec stays (a few KiB: the graph's nodes carry its handle and indices, and a module that
    // runs after all needs it); its measurements and decisions go.
    if (owners()[graph] != module) continue;
    const auto id = static_cast<int64_t>(graph);
    contexts().erase(id);
    views_epoch.fetch_add(1, std::memory_order_acq_rel);
  }
}

void set_graph_spec(int64_t graph, GraphSpec spec) {
  std::lock_guard<std::mutex> lock(mutex);
  specs().at(static_cast<size_t>(graph)) = std::move(spec);
  views_epoch.fetch_add(1, std::memory_order_acq_rel);
}

const GraphSpec& graph_spec(int64_t graph) {
  std::lock_guard<std::mutex> lock(mutex);
  return specs().at(static_cast<size_t>(graph));
}

void record_conv(int64_t graph, int node, const ConvCosts& costs) {
  std::lock_guard<std::mutex> lock(mutex);
  context(graph).convs.emplace(node, costs);  // the first measurement stays: readers hold it
}

const ConvCosts* conv_costs(int64_t graph, int node) {
  std::lock_guard<std::mutex> lock(mutex);
  const Context& c = context(graph);
  const auto it = c.convs.find(node);
  return it == c.convs.end() ? nullptr : &it->second;  // map nodes are stable
}

void record_conversion_bytes(int64_t graph, int conversion, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex);
  Context& c = context(graph);
  if (!c.decision) c.conversion_bytes.emplace(conversion, bytes);
}

namespace {

// Under the lock: the context's layouts, decided now where measuring is over.
std::shared_ptr<const Decision> decided(int64_t graph, Context& c, bool measuring_over) {
  if (!c.decision && measuring_over) {
    c.decision = plan(specs().at(static_cast<size_t>(graph)), c);
  }
  return c.decision;
}

}  // namespace

std::shared_ptr<const Decision> decision(int64_t graph, bool measuring_over) {
  std::lock_guard<std::mutex> lock(mutex);
  return decided(graph, context(graph), measuring_over);
}

namespace {

// A thread's settled views (measured and decided: they no longer change) for one pass key, by
// graph << 32 | node.
struct KeyViews {
  std::string key;
  std::unordered_map<int64_t, ConvView> settled;
};
// A thread's views: those of its last few pass keys (a server's thread alternates models and
// shapes: each key keeps its views, none is rebuilt on a change), valid while views_epoch stands;
// the current key's, found when the key changes (current_key_serial), not per call; and the last
// view that was not settled.
struct ThreadViews {
  static constexpr size_t kKeys = 8;
  uint64_t epoch = 0, key_serial = 0;  // views_epoch starts at 0 too: nothing to drop then
  std::list<KeyViews> keys;            // most recently entered first
  KeyViews* current = nullptr;
  ConvView last;

  KeyViews& enter(const std::string& key) {
    auto it =
        std::find_if(keys.begin(), keys.end(), [&](const KeyViews& k) { return k.key == key; });
    if (it == keys.end()) {
      if (keys.size() == kKeys) keys.pop_back();
      keys.push_front(KeyViews{key, {}});
    } else {
      keys.splice(keys.begin(), keys, it);
    }
    return keys.front();
  }
};

}  // namespace

const ConvView& conv_view(int64_t graph, int node) {
  thread_local ThreadViews views;
  const uint64_t epoch = views_epoch.load(std::memory_order_acquire);
  const uint64_t serial = runtime_pass::current_key_serial();
  if (views.epoch != epoch) {
    views.keys.clear();
    views.epoch = epoch;
    views.current = nullptr;
  }
  if (!views.current || views.key_serial != serial) {
    views.current = &views.enter(runtime_pass::current_key());
    views.key_serial = serial;
  }
  auto& settled = views.current->settled;
  const int64_t id = graph << 32 | static_cast<uint32_t>(node);
  if (const auto it = settled.find(id); it != settled.end()) return it->second;
  ConvView view;
  {
    std::lock_guard<std::mutex> lock(mutex);
    Context& c = context(graph);
    const auto it = c.convs.find(node);
    if (it != c.convs.end()) view.costs = &it->second;  // map nodes are stable
    view.decision = decided(graph, c, view.costs != nullptr);
    view.output_edge =
        specs().at(static_cast<size_t>(graph)).nodes.at(static_cast<size_t>(node)).output;
  }
  if (view.costs && view.decision) return settled.emplace(id, std::move(view)).first->second;
  views.last = std::move(view);
  return views.last;
}

std::string layout_report() {
  std::ostringstream out;
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [graph, by_key] : contexts()) {
    for (const auto& [key, c] : by_key) {
      if (!c.decision) continue;
      const auto& layouts = c.decision->edge_layouts;
      const GraphSpec& spec = specs().at(static_cast<size_t>(graph));
      out << "layout plan (graph " << graph << ", " << c.convs.size()
          << " convolutions measured): of " << layouts.size() << " activations";
      for (int l = 0; l < spec.layouts; ++l) {
        out << (l ? ", " : " ") << std::count(layouts.begin(), layouts.end(), l) << " "
            << to_string(static_cast<Layout>(l));
      }
      out << "; modelled " << c.decision->default_ms << " ms all " << to_string(spec.default_layout)
          << " -> " << c.decision->planned_ms << " ms\n";
      for (const auto& [node, costs] : c.convs) {
        const GraphSpec::Node& n = spec.nodes.at(node);
        const Layout in_layout = n.inputs.empty() ? kNchw : layouts.at(n.inputs[0]);
        const Layout out_layout = n.output < 0 ? kNchw : layouts.at(n.output);
        out << "  conv " << n.name << ": " << costs.summary << "; planned " << to_string(in_layout)
            << " -> " << to_string(out_layout) << " " << costs.ms[in_layout][out_layout] << " ms\n";
      }
    }
  }
  return out.str();
}

namespace {
const bool layout_report_registered =
    tuned::add_report(60, &layout_report);  // kernel_report()'s order
}  // namespace

}  // namespace memoplan::torch_ext::layouts
