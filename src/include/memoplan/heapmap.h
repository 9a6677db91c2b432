// Heap maps: a plan drawn as an SVG picture. Time (event ticks) runs left to right, slab address
// (bytes) bottom to top, one rectangle per allocation, with the slab top, the offset lower bound
// and the live-bytes curve on the same axes, so a reader sees at a glance where the slab is wasted.
#pragma once

#include <cstddef>
#include <string>

#include "memoplan/planner/plan.h"
#include "memoplan/planner/trace.h"

namespace memoplan {

enum class HeapmapColoring {
  kByOp,    // a stable hash of the op name picks the colour, so one op looks alike in every plan
  kBySize,  // log2(size) on a sequential ramp: big blocks stand out
};

struct HeapmapOptions {
  int width = 1200;   // whole picture, px
  int height = 720;   // whole picture, px
  std::string title;  // empty: the trace's name
  HeapmapColoring coloring = HeapmapColoring::kByOp;
  bool show_lower_bound = true;  // dashed line at the offset lower bound
  bool show_live_bytes = true;   // thin curve of the bytes live at each tick
  // Allocations that cover less than a pixel in either direction, and the smallest ones once more
  // than max_rects remain, are merged into a per-pixel occupancy layer: the picture keeps its size
  // bounded (a few MB) however long the trace is.
  size_t max_rects = 20000;
  // Hover tooltips (op, size, lifetime, offset) are emitted only while this few rectangles are
  // drawn: they cost ~100 bytes each.
  size_t max_tooltips = 5000;
};

// Renders `plan` (made for `trace`: one offset per row) as a standalone SVG document. Rows without
// an offset and zero-byte rows are not drawn. All text from the trace is escaped.
std::string render_heapmap_svg(const Trace& trace, const Plan& plan,
                               const HeapmapOptions& options = {});

// Byte counts the way the heap map labels them: "512 B", "1.5 KiB", "24 MiB", "1.02 GiB".
std::string format_bytes(uint64_t bytes);

}  // namespace memoplan
