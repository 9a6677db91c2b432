// Heap map rendering. The document stays small for any trace length: allocations too thin to see on
// their own are accumulated into a per-pixel occupancy grid that is emitted as merged runs, and the
// grid coarsens until the runs fit a fixed budget.
#include "memoplan/heapmap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "heapmap_frame.h"
#include "heapmap_layers.h"
#include "svg_text.h"

namespace memoplan {
namespace {

using heapmap_detail::Axes;
using heapmap_detail::Box;
using heapmap_detail::draw_axes;
using heapmap_detail::draw_legend;
using heapmap_detail::draw_level;
using heapmap_detail::kHalo;
using heapmap_detail::kOccupancyLevels;
using heapmap_detail::LegendEntry;
using svg_text::append_escaped;
using svg_text::append_px;
using svg_text::escaped;
using svg_text::three_digits;
using svg_text::with_thousands;

constexpr double kMarginLeft = 80, kMarginRight = 18, kMarginTop = 78, kMarginBottom = 46;
// About 45 bytes per run: the occupancy layer stays under ~1.5 MB.
constexpr size_t kOccupancyRunBudget = 30000;
constexpr const char* kOccupancyOpacity[kOccupancyLevels] = {".3", ".5", ".7", ".9"};
constexpr const char* kOccupancyColor = "#54617f";

// Tableau 20 without its greys, which are kept for allocations without an op name.
constexpr const char* kOpPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
                                      "#9d7660", "#499894", "#d37295", "#b6992d", "#a0cbe8",
                                      "#ffbe7d", "#8cd17d", "#ff9d9a", "#d4a6c8", "#d7b5a6",
                                      "#86bcb6", "#fabfd2", "#f1ce63"};
constexpr int kOpColors = static_cast<int>(std::size(kOpPalette));
constexpr const char* kUnknownOpColor = "#b4b4b4";
// Viridis stops: perceptually ordered, so a bigger block always reads as "more".
constexpr uint32_t kViridis[] = {0x440154, 0x482878, 0x3e4a89, 0x31688e, 0x26828e,
                                 0x1f9e89, 0x35b779, 0x6ece58, 0xb5de2b, 0xfde725};
constexpr int kSizeLevels = 16;

using Out = std::back_insert_iterator<std::string>;

uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return hash;
}

// Each op starts at its hash's palette slot and, while free slots remain, moves to the next free
// one: distinct colours for the ops of one trace, and the same colours in every plan of it.
std::unordered_map<std::string, int> assign_op_colors(const std::vector<std::string>& ops) {
  std::vector<std::pair<uint64_t, const std::string*>> by_hash;
  for (const std::string& op : ops) by_hash.emplace_back(fnv1a(op), &op);
  std::sort(by_hash.begin(), by_hash.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : *a.second < *b.second;
  });
  std::unordered_map<std::string, int> colors;
  std::vector<bool> taken(kOpColors, false);
  int free_slots = kOpColors;
  for (const auto& [hash, op] : by_hash) {
    if (op->empty()) {
      colors[*op] = kOpColors;
      continue;
    }
    int slot = static_cast<int>(hash % kOpColors);
    while (free_slots > 0 && taken[slot]) slot = (slot + 1) % kOpColors;
    if (!taken[slot]) taken[slot] = true, --free_slots;
    colors[*op] = slot;
  }
  return colors;
}

std::string viridis(double t) {
  const double position = std::clamp(t, 0.0, 1.0) * (std::size(kViridis) - 1);
  const size_t low = std::min(static_cast<size_t>(position), std::size(kViridis) - 2);
  const double mix = position - low;
  uint32_t rgb = 0;
  for (int shift : {16, 8, 0}) {
    const double a = (kViridis[low] >> shift) & 0xFF, b = (kViridis[low + 1] >> shift) & 0xFF;
    rgb |= static_cast<uint32_t>(std::lround(a + (b - a) * mix)) << shift;
  }
  return fmt::format("#{:06x}", rgb);
}

// Picks each drawn allocation's colour and describes the colours in the legend.
class Palette {
 public:
  Palette(const Trace& trace, const std::vector<size_t>& rows, HeapmapColoring coloring)
      : coloring_(coloring) {
    std::unordered_map<std::string, double> area;
    for (size_t row : rows) {
      const Allocation& a = trace.allocations[row];
      const double log_size = std::log2(static_cast<double>(a.size));
      log_small_ = std::min(log_small_, log_size), log_big_ = std::max(log_big_, log_size);
      area[a.provenance.op] += static_cast<double>(a.size) * (effective_end(a) - a.begin);
    }
    // The ops covering the most address x time lead the legend: they are what the picture shows.
    for (auto& [op, bytes_ticks] : area) ops_by_area_.emplace_back(-bytes_ticks, op);
    std::sort(ops_by_area_.begin(), ops_by_area_.end());
    std::vector<std::string> ops;
    for (const auto& entry : ops_by_area_) ops.push_back(entry.second);
    op_colors_ = assign_op_colors(ops);
  }

  int color_of(const Allocation& a) const {
    if (coloring_ == HeapmapColoring::kByOp) return op_colors_.at(a.provenance.op);
    if (log_big_ <= log_small_) return kSizeLevels / 2;
    const double t =
        (std::log2(static_cast<double>(a.size)) - log_small_) / (log_big_ - log_small_);
    return static_cast<int>(std::lround(t * (kSizeLevels - 1)));
  }

  std::string name(int color) const {
    if (coloring_ == HeapmapColoring::kBySize) {
      return viridis(static_cast<double>(color) / (kSizeLevels - 1));
    }
    return color < kOpColors ? kOpPalette[color] : kUnknownOpColor;
  }

  void add_legend(std::vector<LegendEntry>& legend) const {
    if (coloring_ == HeapmapColoring::kByOp) {
      for (const auto& [negative_area, op] : ops_by_area_) {
        legend.push_back({name(op_colors_.at(op)), escaped(op.empty() ? "(no op)" : op)});
      }
      return;
    }
    if (log_big_ < log_small_) return;
    for (int level = 0; level < kSizeLevels; level += (kSizeLevels - 1) / 3) {
      const double log_size = log_small_ + (log_big_ - log_small_) * level / (kSizeLevels - 1);
      legend.push_back({name(level), format_bytes(static_cast<uint64_t>(std::exp2(log_size)))});
    }
  }

 private:
  HeapmapColoring coloring_;
  double log_small_ = 64, log_big_ = 0;
  std::vector<std::pair<double, std::string>> ops_by_area_;
  std::unordered_map<std::string, int> op_colors_;
};

void append_rect(std::string& out, double x, double y, double width, double height) {
  out += "<rect x=\"", append_px(out, x), out += "\" y=\"", append_px(out, y);
  out += "\" width=\"", append_px(out, width), out += "\" height=\"", append_px(out, height);
  out += '"';
}

void draw_occupancy(std::string& out, const std::vector<Box>& merged, const Axes& axes) {
  const heapmap_detail::OccupancyLayer layer =
      heapmap_detail::occupancy_layer(merged, axes, kOccupancyRunBudget);
  const double cell = layer.cell_px, right = axes.left + axes.width;
  const double bottom = axes.top + axes.height;
  fmt::format_to(Out(out), R"(<g id="occupancy" fill="{}">)", kOccupancyColor);
  for (int level = 1; level <= kOccupancyLevels; ++level) {
    fmt::format_to(Out(out), R"(<g fill-opacity="{}">)", kOccupancyOpacity[level - 1]);
    for (const heapmap_detail::Run& run : layer.runs) {
      if (run.level != level) continue;
      const double x = axes.left + run.col0 * cell, y = axes.top + run.row0 * cell;
      append_rect(out, x, y, std::min((run.col1 - run.col0) * cell, right - x),
                  std::min((run.row1 - run.row0) * cell, bottom - y));
      out += "/>";
    }
    out += "</g>";
  }
  out += "</g>\n";
}

// The row whose bytes `row` shares by a claim the plan honoured (alias_of at its start, slice_of
// at its offset), or kNoRow. Trace ids are usually row indices; otherwise looked up.
uint64_t shares_with(const Trace& trace, const Plan& plan, size_t row,
                     const std::unordered_map<uint64_t, size_t>& by_id) {
  const Allocation& a = trace.allocations[row];
  auto find = [&](uint64_t id) -> size_t {
    auto it = by_id.find(id);
    return it == by_id.end() ? kNoRow : it->second;
  };
  if (a.alias_of != kNoRow) {
    const size_t other = find(a.alias_of);
    if (other != kNoRow && plan.offsets[other] == plan.offsets[row]) return other;
  }
  if (a.slice_of != kNoRow) {
    const size_t other = find(a.slice_of);
    if (other != kNoRow && plan.offsets[other] + a.slice_offset == plan.offsets[row]) return other;
  }
  return kNoRow;
}

// Rows that share bytes (memory min) get a dashed outline over their fill, and say with whom.
void draw_shared(std::string& out, const std::vector<Box>& boxes, const Trace& trace,
                 const Plan& plan, const std::unordered_map<uint64_t, size_t>& by_id) {
  if (by_id.empty()) return;
  out += R"(<g id="shared" fill="none" stroke="#111" stroke-width=".8" stroke-dasharray="3 2">)";
  for (const Box& box : boxes) {
    const size_t other = shares_with(trace, plan, box.row, by_id);
    if (other == kNoRow) continue;
    const Allocation& a = trace.allocations[box.row];
    append_rect(out, box.x0, box.y0, std::max(box.x1 - box.x0, 0.1),
                std::max(box.y1 - box.y0, 0.1));
    fmt::format_to(
        Out(out), "><title>#{} shares bytes with #{} ({})</title></rect>", a.id,
        trace.allocations[other].id,
        a.alias_of == trace.allocations[other].id ? "its dying input" : "a slice of its concat");
  }
  out += "</g>\n";
}

// Grouped by colour, so each rectangle carries only its geometry. Outlines separate neighbours but
// would swallow a thin rectangle, so only roomy ones get one.
void draw_allocations(std::string& out, std::vector<Box>& boxes, const Trace& trace,
                      const Plan& plan, const Palette& palette, bool tooltips) {
  std::stable_sort(boxes.begin(), boxes.end(),
                   [](const Box& a, const Box& b) { return a.color < b.color; });
  out += R"(<g id="allocations">)";
  for (size_t i = 0; i < boxes.size();) {
    const int color = boxes[i].color;
    fmt::format_to(Out(out), R"(<g fill="{}" stroke="#fff" stroke-opacity=".85" stroke-width="0">)",
                   palette.name(color));
    for (; i < boxes.size() && boxes[i].color == color; ++i) {
      const Box& box = boxes[i];
      const double width = box.x1 - box.x0, height = box.y1 - box.y0;
      append_rect(out, box.x0, box.y0, std::max(width, 0.1), std::max(height, 0.1));
      if (width >= 4 && height >= 4) out += R"( stroke-width=".6")";
      if (!tooltips) {
        out += "/>";
        continue;
      }
      const Allocation& a = trace.allocations[box.row];
      out += "><title>";
      append_escaped(out, a.provenance.op.empty() ? "(no op)" : a.provenance.op);
      fmt::format_to(Out(out), " #{}: {}, ticks [{}, {}), offset {}</title></rect>", a.id,
                     format_bytes(a.size), a.begin, effective_end(a),
                     format_bytes(plan.offsets[box.row]));
    }
    out += "</g>";
  }
  out += "</g>\n";
}

void draw_live_bytes(std::string& out, const Trace& trace, const Plan& plan,
                     const std::vector<size_t>& rows, const Axes& axes) {
  const std::vector<uint64_t> most = heapmap_detail::live_bytes_per_column(trace, plan, rows, axes);
  out += R"(<path id="live-bytes" fill="none" stroke="#1b1b1b" stroke-opacity=".7" )"
         R"(stroke-width=".9" d="M)";
  append_px(out, axes.left), out += ' ', append_px(out, axes.y(static_cast<double>(most[0])));
  for (size_t c = 1; c <= most.size(); ++c) {
    if (c < most.size() && most[c] == most[c - 1]) continue;
    out += 'H', append_px(out, std::min(axes.left + c, axes.left + axes.width));
    if (c < most.size()) out += 'V', append_px(out, axes.y(static_cast<double>(most[c])));
  }
  out += "\"/>\n";
}

std::string format_ms(double ms) {
  return ms < 10 ? fmt::format("{:.2f}", ms) : fmt::format("{:.0f}", ms);
}

void draw_header(std::string& out, const std::string& title, const Plan& plan, size_t drawn,
                 size_t merged, double left) {
  fmt::format_to(Out(out),
                 R"(<text x="{}" y="24" font-size="16" font-weight="bold" fill="#222">{}</text>)",
                 left, escaped(title.empty() ? "heap map" : title));
  std::string stats = escaped(plan.strategy.empty() ? "(unnamed strategy)" : plan.strategy);
  stats += fmt::format(" \u00b7 slab {} \u00b7 lower bound {} \u00b7 ratio {:.3f} \u00b7 {} blocks",
                       format_bytes(plan.slab_bytes), format_bytes(plan.lower_bound_bytes),
                       plan.ratio_to_lower_bound(), with_thousands(drawn + merged));
  if (merged) stats += fmt::format(" ({} thinner than a pixel, shaded)", with_thousands(merged));
  if (plan.aliased_rows) {
    stats +=
        fmt::format(" \u00b7 {} share bytes (dashed) \u00b7 offset bound {}",
                    with_thousands(plan.aliased_rows), format_bytes(plan.offset_lower_bound_bytes));
  }
  if (plan.planning_ms > 0) stats += " \u00b7 planned in " + format_ms(plan.planning_ms) + " ms";
  fmt::format_to(Out(out), R"(<text x="{}" y="44" font-size="12" fill="#444">{}</text>)", left,
                 stats);
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  // 1023.5 rather than 1024: three_digits would print 1023.9 KiB as "1024 KiB".
  while (unit + 1 < std::size(kUnits) && value >= 1023.5) value /= 1024, ++unit;
  return three_digits(value) + " " + kUnits[unit];
}

std::string render_heapmap_svg(const Trace& trace, const Plan& plan,
                               const HeapmapOptions& options) {
  const double width = std::max(options.width, 200), height = std::max(options.height, 150);
  std::vector<size_t> rows;
  uint64_t t0 = std::numeric_limits<uint64_t>::max(), t1 = 0;
  uint64_t top_address = std::max<uint64_t>({plan.slab_bytes, plan.lower_bound_bytes, 64});
  const size_t placed = std::min(trace.allocations.size(), plan.offsets.size());
  for (size_t row = 0; row < placed; ++row) {
    const Allocation& a = trace.allocations[row];
    if (a.size == 0 || a.escapes) continue;  // not in the slab
    rows.push_back(row);
    t0 = std::min(t0, a.begin);
    t1 = std::max(t1, effective_end(a));
    top_address = std::max(top_address, plan.offsets[row] + a.size);
  }
  if (rows.empty()) t0 = 0, t1 = 1;
  // 7% headroom above the slab top leaves room for its label.
  const Axes axes{kMarginLeft,
                  kMarginTop,
                  width - kMarginLeft - kMarginRight,
                  std::max(height - kMarginTop - kMarginBottom, 20.0),
                  t0,
                  t1,
                  top_address * 1.07};
  const Palette palette(trace, rows, options.coloring);

  std::vector<Box> boxes, merged;
  for (size_t row : rows) {
    const Allocation& a = trace.allocations[row];
    const double offset = static_cast<double>(plan.offsets[row]);
    boxes.push_back({row, axes.x(static_cast<double>(a.begin)),
                     axes.x(static_cast<double>(effective_end(a))), axes.y(offset + a.size),
                     axes.y(offset), palette.color_of(a)});
  }
  if (boxes.size() > options.max_rects) {
    const auto visible = [](const Box& box) {
      return box.x1 - box.x0 >= 1 && box.y1 - box.y0 >= 1;
    };
    auto split = std::stable_partition(boxes.begin(), boxes.end(), visible);
    if (static_cast<size_t>(split - boxes.begin()) > options.max_rects) {
      split = boxes.begin() + options.max_rects;
      std::nth_element(boxes.begin(), split, boxes.end(),
                       [](const Box& a, const Box& b) { return a.area() > b.area(); });
    }
    merged.assign(split, boxes.end());
    boxes.erase(split, boxes.end());
  }

  std::string out;
  out.reserve(256 * 1024);
  fmt::format_to(Out(out),
                 R"(<?xml version="1.0" encoding="UTF-8"?>)"
                 "\n"
                 R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" )"
                 R"(viewBox="0 0 {0} {1}" font-family="DejaVu Sans,Helvetica,Arial,sans-serif">)"
                 "\n"
                 R"(<rect width="{0}" height="{1}" fill="#fff"/>)"
                 R"(<rect x="{2}" y="{3}" width="{4}" height="{5}" fill="#f5f6f8"/>)",
                 width, height, axes.left, axes.top, axes.width, axes.height);
  draw_axes(out, axes);
  if (!merged.empty()) draw_occupancy(out, merged, axes);
  const size_t drawn = boxes.size();
  draw_allocations(out, boxes, trace, plan, palette, drawn <= options.max_tooltips);
  std::unordered_map<uint64_t, size_t> by_id;
  if (plan.aliased_rows) {
    for (size_t row = 0; row < trace.allocations.size(); ++row) {
      by_id.emplace(trace.allocations[row].id, row);
    }
  }
  draw_shared(out, boxes, trace, plan, by_id);
  if (options.show_live_bytes && !rows.empty()) draw_live_bytes(out, trace, plan, rows, axes);

  // When the two levels nearly coincide, the lower bound's label goes under its line.
  const bool crowded = std::abs(axes.y(static_cast<double>(plan.slab_bytes)) -
                                axes.y(static_cast<double>(plan.lower_bound_bytes))) < 16;
  if (options.show_lower_bound) {
    draw_level(out, axes, "lower-bound", "#c0392b", "3 3", plan.lower_bound_bytes,
               "lower bound " + format_bytes(plan.lower_bound_bytes), crowded);
  }
  draw_level(out, axes, "slab-top", "#1d2b4f", "7 4", plan.slab_bytes,
             "slab " + format_bytes(plan.slab_bytes), false);

  draw_header(out, options.title.empty() ? trace.meta.name : options.title, plan, drawn,
              merged.size(), axes.left);
  std::vector<LegendEntry> legend;
  if (options.show_live_bytes) legend.push_back({"#1b1b1b", "live bytes", true});
  if (!merged.empty()) legend.push_back({kOccupancyColor, "thin blocks, shaded by coverage"});
  palette.add_legend(legend);
  draw_legend(out, legend, axes.left, width, 64);
  out += "</svg>\n";
  return out;
}

}  // namespace memoplan
