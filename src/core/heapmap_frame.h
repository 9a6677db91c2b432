// The heap map's frame, apart from what it shows: axes with their labels, dashed levels (slab,
// lower bound) and the legend. SVG text appended to `out`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heapmap_layers.h"

namespace memoplan::heapmap_detail {

// Labels that stay readable over rectangles: a white halo drawn under the glyphs.
inline constexpr const char* kHalo = R"( stroke="#fff" stroke-width="3" paint-order="stroke")";

// Byte offsets on y (power-of-two steps), event ticks on x, both axis titles.
void draw_axes(std::string& out, const Axes& axes);
// A dashed horizontal line across the plot with its label at the right end.
void draw_level(std::string& out, const Axes& axes, const char* id, const char* color,
                const char* dashes, uint64_t address, const std::string& label, bool label_below);

struct LegendEntry {
  std::string color;
  std::string label;  // escaped
  bool is_line = false;
};
// One line of entries from `left`, "+N more" for those that do not fit before `right`.
void draw_legend(std::string& out, const std::vector<LegendEntry>& entries, double left,
                 double right, double y);

}  // namespace memoplan::heapmap_detail
