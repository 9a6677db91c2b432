// The skyline of a 2-D strip packing (Burke, Kendall & Whitwell 2004): the height of the highest
// placed item over every x, kept as maximal segments of equal height. x here is a time point index
// (the caller's sorted tick values), height is bytes. Adjacent segments never share a height: a
// flat stretch split in two would hide room from an item spanning the split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <tuple>
#include <vector>

namespace memoplan::planner {

class Skyline {
 public:
  struct Segment {
    size_t from = 0;  // first point index covered
    size_t to = 0;    // first point index not covered (from < to)
    uint64_t height = 0;
  };

  // One segment at height 0 over points [0, points - 1). Needs points >= 2.
  explicit Skyline(size_t points);

  // The lowest segment; ties go to the leftmost. O(log n) amortized.
  Segment lowest();

  // Raises [from, to), which must lie inside `segment` (a current segment), to `height`, which must
  // be above segment.height, splitting the segment and merging with equal neighbours.
  void raise_part(const Segment& segment, size_t from, size_t to, uint64_t height);

  // Raises `segment` to the lower of its neighbours' heights and merges it with the neighbours at
  // that height. Returns false (and changes nothing) when it has no neighbour: it spans everything.
  bool raise_to_lower_neighbour(const Segment& segment);

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  void set(size_t from, size_t to, uint64_t height);
  void merge_equal_neighbours(size_t from);

  size_t last_point_;
  std::vector<size_t> end_of_;       // [from] -> to of the segment starting there, or kNone
  std::vector<size_t> start_of_;     // [to] -> from of the segment ending there
  std::vector<uint64_t> height_of_;  // [from] -> its height
  // Every segment ever set, by (height, from); entries of changed segments are skipped on pop.
  using Entry = std::tuple<uint64_t, size_t, size_t>;  // (height, from, to)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> by_height_;
};

}  // namespace memoplan::planner
