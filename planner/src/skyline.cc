#include "skyline.h"

#include <algorithm>
#include <limits>

namespace memoplan::planner {

Skyline::Skyline(size_t points)
    : last_point_(points - 1),
      end_of_(points, kNone),
      start_of_(points, kNone),
      height_of_(points, 0) {
  set(0, last_point_, 0);
}

void Skyline::set(size_t from, size_t to, uint64_t height) {
  end_of_[from] = to;
  start_of_[to] = from;
  height_of_[from] = height;
  by_height_.emplace(height, from, to);
}

Skyline::Segment Skyline::lowest() {
  for (;;) {
    const auto [height, from, to] = by_height_.top();
    if (end_of_[from] == to && height_of_[from] == height) return {from, to, height};
    by_height_.pop();  // that segment has since been split, raised or merged
  }
}

void Skyline::merge_equal_neighbours(size_t from) {
  size_t to = end_of_[from];
  const uint64_t height = height_of_[from];
  if (from > 0 && height_of_[start_of_[from]] == height) {
    const size_t left = start_of_[from];
    end_of_[from] = kNone;
    from = left;
  }
  if (to < last_point_ && height_of_[to] == height) {
    const size_t right_end = end_of_[to];
    end_of_[to] = kNone;
    to = right_end;
  }
  set(from, to, height);
}

void Skyline::raise_part(const Segment& segment, size_t from, size_t to, uint64_t height) {
  if (from > segment.from) set(segment.from, from, segment.height);
  if (to < segment.to) set(to, segment.to, segment.height);
  set(from, to, height);
  merge_equal_neighbours(from);
}

bool Skyline::raise_to_lower_neighbour(const Segment& segment) {
  constexpr uint64_t kNoNeighbour = std::numeric_limits<uint64_t>::max();
  const uint64_t left = segment.from > 0 ? height_of_[start_of_[segment.from]] : kNoNeighbour;
  const uint64_t right = segment.to < last_point_ ? height_of_[segment.to] : kNoNeighbour;
  if (left == kNoNeighbour && right == kNoNeighbour) return false;
  set(segment.from, segment.to, std::min(left, right));
  merge_equal_neighbours(segment.from);
  return true;
}

}  // namespace memoplan::planner
