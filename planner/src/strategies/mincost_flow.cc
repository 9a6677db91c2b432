// Lee et al. 2019 ("On-Device Neural Net Inference with Mobile GPUs", the TFLite GPU delegate's
// memory manager), as compared in Pisarchyk & Lee 2020 §6: shared objects from a minimum-cost flow.
//
// Every block needs memory and gets it in one of two ways: a new shared object, costing the
// block's size, or the object of a block that died before it began, costing the growth
// max(0, size - predecessor's size). Each block hands its object on to at most one successor. The
// cheapest such choice is a min-cost flow: one unit out of every "needs" node into the sink,
// either through the "new object" arc or through a predecessor's "hands on" node. Following the
// hand-on arcs the flow uses gives chains of blocks, one chain per shared object. The cost only
// approximates the objects' total size (a chain that shrinks and grows again pays twice), which is
// why the method sits above the lower bound in the paper and here.
//
// TFLite offers every earlier-freed block to every later one: O(n^2) arcs. Here the graph is kept
// sparse: a block is offered only the kSameClassCandidates blocks of its own power-of-two size
// class that died most recently before it began (reuse that costs at most half its size) and the
// kAnyClassCandidates most recently freed blocks of any size (so an object can still pass to a
// tensor of another size, as when a network's tensors shrink stage by stage). That is O(n) arcs.
// Why mostly same-size: taking over a much bigger object costs nothing in the growth model, but the
// chain then ends small and the next big block pays the growth again. On the tests' random
// DNN-like traces (10,000 blocks) the 32 most recent frees of any size gave slabs 2.7-4x the
// offset lower bound, this mix 1.8-2.3x in under half the time. More candidates do not help
// either: the growth cost favours chains that only grow, and with freely mixed sizes the flow then
// opens ever more objects, which is also why the ratio worsens on longer random traces.
#include <algorithm>
#include <cstddef>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

#include "../min_cost_flow.h"
#include "../shared_objects.h"
#include "strategies.h"

namespace memoplan::planner {
namespace {

constexpr size_t kSameClassCandidates = 6;
constexpr size_t kAnyClassCandidates = 2;
constexpr size_t kNoPredecessor = static_cast<size_t>(-1);

int size_class(uint64_t size) { return 63 - __builtin_clzll(size); }

// For each block (by position in `order`), the positions of the earlier blocks it may reuse.
std::vector<std::vector<size_t>> reuse_candidates(const std::vector<Block>& blocks,
                                                  const std::vector<size_t>& order) {
  std::vector<std::vector<size_t>> candidates(order.size());
  using EndAndPosition = std::pair<uint64_t, size_t>;
  std::priority_queue<EndAndPosition, std::vector<EndAndPosition>, std::greater<>> live;
  std::vector<size_t> freed;                            // positions, in the order they died
  std::vector<std::vector<size_t>> freed_in_class(64);  // the same, per size class
  for (size_t p = 0; p < order.size(); ++p) {
    const Block& block = blocks[order[p]];
    while (!live.empty() && live.top().first <= block.begin) {
      const size_t dead = live.top().second;
      live.pop();
      freed.push_back(dead);
      freed_in_class[size_class(blocks[order[dead]].size)].push_back(dead);
    }
    const std::vector<size_t>& same = freed_in_class[size_class(block.size)];
    std::vector<size_t>& mine = candidates[p];
    mine.assign(same.end() - std::min(same.size(), kSameClassCandidates), same.end());
    mine.insert(mine.end(), freed.end() - std::min(freed.size(), kAnyClassCandidates), freed.end());
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    live.emplace(block.end, p);
  }
  return candidates;
}

}  // namespace

StrategyResult solve_mincost_flow(const Problem& problem, const StrategyOptions&) {
  const std::vector<Block>& blocks = problem.blocks;
  const size_t n = blocks.size();
  // Positions in begin order: a predecessor always comes before its successor.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return blocks[a].begin < blocks[b].begin; });
  const std::vector<std::vector<size_t>> candidates = reuse_candidates(blocks, order);

  // Nodes: [0, n) "position p needs memory", [n, 2n) "position p hands its object on", 2n sink.
  const size_t sink = 2 * n;
  MinCostFlow flow(sink + 1);
  for (size_t p = 0; p < n; ++p) {
    flow.add_supply(p, 1);
    flow.add_arc(p, sink, 1, static_cast<int64_t>(blocks[order[p]].size));  // a new object
    flow.add_arc(n + p, sink, 1, 0);  // p's object, if no successor takes it over
  }
  flow.add_supply(sink, -static_cast<int64_t>(n));
  struct Reuse {
    size_t arc, position, giver;
  };
  std::vector<Reuse> reuses;
  for (size_t p = 0; p < n; ++p) {
    const uint64_t size = blocks[order[p]].size;
    for (size_t q : candidates[p]) {
      const uint64_t giver_size = blocks[order[q]].size;
      const int64_t growth = static_cast<int64_t>(size > giver_size ? size - giver_size : 0);
      reuses.push_back({flow.add_arc(p, n + q, 1, growth), p, q});
    }
  }
  std::vector<size_t> predecessor(n, kNoPredecessor);
  // Every "needs" node reaches the sink through its own "new object" arc, so solve() cannot fail
  // here; if it ever did, every block would get its own object: wasteful, still valid.
  if (flow.solve()) {
    for (const Reuse& r : reuses) {
      if (flow.flow(r.arc) > 0) predecessor[r.position] = r.giver;
    }
  }

  std::vector<size_t> object_at(n), object_of_block(n);
  size_t objects = 0;
  for (size_t p = 0; p < n; ++p) {
    object_at[p] = predecessor[p] == kNoPredecessor ? objects++ : object_at[predecessor[p]];
    object_of_block[order[p]] = object_at[p];
  }
  return {lay_out_shared_objects(problem, object_of_block)};
}

}  // namespace memoplan::planner
