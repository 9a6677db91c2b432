#include "heapmap_layers.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace memoplan::heapmap_detail {
namespace {

std::vector<float> covered_area(const std::vector<Box>& boxes, const Axes& axes, int cell, int cols,
                                int rows) {
  std::vector<float> coverage(static_cast<size_t>(cols) * rows, 0.0f);
  for (const Box& box : boxes) {
    const double x0 = (box.x0 - axes.left) / cell, x1 = (box.x1 - axes.left) / cell;
    const double y0 = (box.y0 - axes.top) / cell, y1 = (box.y1 - axes.top) / cell;
    const int c_end = std::min(cols, static_cast<int>(std::ceil(x1)));
    const int r_end = std::min(rows, static_cast<int>(std::ceil(y1)));
    for (int c = std::max(0, static_cast<int>(x0)); c < c_end; ++c) {
      const double overlap_x = std::min(x1, c + 1.0) - std::max(x0, static_cast<double>(c));
      for (int r = std::max(0, static_cast<int>(y0)); r < r_end; ++r) {
        const double overlap_y = std::min(y1, r + 1.0) - std::max(y0, static_cast<double>(r));
        coverage[static_cast<size_t>(r) * cols + c] += static_cast<float>(overlap_x * overlap_y);
      }
    }
  }
  return coverage;
}

// Returns false as soon as more than max_runs runs are closed: the caller coarsens the grid.
bool merge_runs(const std::vector<float>& coverage, int cols, int rows, size_t max_runs,
                std::vector<Run>& done) {
  // Anything covered at all gets at least the lowest level, so a lone small block stays visible.
  const auto level = [&](int c, int r) {
    const float covered = coverage[static_cast<size_t>(r) * cols + c];
    if (covered <= 1e-6f) return 0;
    return std::min(kOccupancyLevels, static_cast<int>(std::ceil(covered * kOccupancyLevels)));
  };
  done.clear();
  std::vector<Run> open, column, still_open;
  // One column past the last closes every run still open.
  for (int c = 0; c <= cols; ++c) {
    column.clear();
    for (int r = 0; c < cols && r < rows;) {
      const int l = level(c, r);
      int end = r + 1;
      while (end < rows && level(c, end) == l) ++end;
      if (l) column.push_back({c, c + 1, r, end, l});
      r = end;
    }
    // Both lists are sorted by row0 and disjoint within a column, so a merge walk pairs them.
    still_open.clear();
    size_t k = 0;
    for (const Run& run : open) {
      while (k < column.size() && column[k].row0 < run.row0) still_open.push_back(column[k++]);
      if (k < column.size() && column[k].row0 == run.row0 && column[k].row1 == run.row1 &&
          column[k].level == run.level) {
        still_open.push_back({run.col0, c + 1, run.row0, run.row1, run.level});
        ++k;
      } else {
        done.push_back(run);
      }
    }
    while (k < column.size()) still_open.push_back(column[k++]);
    std::swap(open, still_open);
    if (done.size() > max_runs) return false;
  }
  return true;
}

}  // namespace

OccupancyLayer occupancy_layer(const std::vector<Box>& boxes, const Axes& axes, size_t max_runs) {
  OccupancyLayer layer;
  for (;; layer.cell_px *= 2) {
    const int cols = std::max(1, static_cast<int>(std::ceil(axes.width / layer.cell_px)));
    const int rows = std::max(1, static_cast<int>(std::ceil(axes.height / layer.cell_px)));
    const std::vector<float> coverage = covered_area(boxes, axes, layer.cell_px, cols, rows);
    // A 1x1 grid cannot get coarser: it is returned whatever max_runs says.
    if (merge_runs(coverage, cols, rows, max_runs, layer.runs) || (cols == 1 && rows == 1)) {
      return layer;
    }
  }
}

std::vector<uint64_t> live_bytes_per_column(const Trace& trace, const Plan& plan,
                                            const std::vector<size_t>& rows, const Axes& axes) {
  struct Event {
    uint64_t tick;
    bool allocates;
    uint64_t bytes;
  };
  const uint64_t align = std::max<uint64_t>(plan.alignment, 1);
  std::vector<Event> events;
  events.reserve(2 * rows.size());
  for (size_t row : rows) {
    const Allocation& a = trace.allocations[row];
    const uint64_t bytes = (a.size + align - 1) / align * align;
    events.push_back({a.begin, true, bytes});
    events.push_back({effective_end(a), false, bytes});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.tick < b.tick; });
  const int columns = std::max(1, static_cast<int>(std::ceil(axes.width)));
  std::vector<uint64_t> most(columns, 0);
  uint64_t live = 0;
  for (size_t i = 0; i < events.size();) {
    // Every event of a tick applies before the level is recorded: lifetimes are half-open, so a
    // block freed at t and one made at t never count together.
    const uint64_t tick = events[i].tick;
    for (; i < events.size() && events[i].tick == tick; ++i) {
      live = events[i].allocates ? live + events[i].bytes : live - events[i].bytes;
    }
    if (i == events.size()) break;
    // `live` holds over [tick, next tick): every column that interval touches.
    const int first = static_cast<int>(axes.x(static_cast<double>(tick)) - axes.left);
    const int last =
        static_cast<int>(std::ceil(axes.x(static_cast<double>(events[i].tick)) - axes.left)) - 1;
    for (int c = std::max(first, 0); c <= std::min(std::max(last, first), columns - 1); ++c) {
      most[c] = std::max(most[c], live);
    }
  }
  return most;
}

}  // namespace memoplan::heapmap_detail
