// The heap map's pixel geometry, kept apart from the SVG text: the axes' maps, the occupancy layer
// that stands in for allocations too thin to draw, and the live-bytes curve.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/trace.h"

namespace memoplan::heapmap_detail {

// The plot area in px and the maps from ticks and addresses onto it. t1 > t0, top_address > 0.
struct Axes {
  double left, top, width, height;
  uint64_t t0, t1;
  double top_address;  // the address at the plot's top edge
  double x(double tick) const { return left + (tick - t0) * width / (t1 - t0); }
  double y(double address) const { return top + height - address * height / top_address; }
};

// One allocation in px; y0 < y1 because SVG's y grows downwards.
struct Box {
  size_t row;
  double x0, x1, y0, y1;
  int color;
  double area() const { return (x1 - x0) * (y1 - y0); }
};

inline constexpr int kOccupancyLevels = 4;

// A rectangle of grid cells, [col0, col1) x [row0, row1), rows counted from the plot's top, whose
// cells are covered to the same level: level k means a covered fraction in ((k-1)/4, k/4].
struct Run {
  int col0, col1, row0, row1, level;
};

struct OccupancyLayer {
  int cell_px = 1;  // side of a grid cell in px
  std::vector<Run> runs;
};

// Accumulates the boxes' area per grid cell, quantizes it to kOccupancyLevels, merges equal cells
// into vertical runs and equal runs across neighbouring columns, and doubles the cell size until
// at most `max_runs` remain. The result's size is bounded whatever the number of boxes.
OccupancyLayer occupancy_layer(const std::vector<Box>& boxes, const Axes& axes, size_t max_runs);

// The most bytes live at any tick within each pixel column (ceil(axes.width) columns). Sizes are
// rounded up to the plan alignment as the planner rounds them, so the peak is the lower bound.
std::vector<uint64_t> live_bytes_per_column(const Trace& trace, const Plan& plan,
                                            const std::vector<size_t>& rows, const Axes& axes);

}  // namespace memoplan::heapmap_detail
