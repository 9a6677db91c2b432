#include "heapmap_frame.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "memoplan/heapmap.h"  // format_bytes
#include "svg_text.h"

namespace memoplan::heapmap_detail {
namespace {

using Out = std::back_insert_iterator<std::string>;
using svg_text::three_digits;

std::string format_ticks(uint64_t tick) {
  if (tick < 10000) return std::to_string(tick);
  if (tick < 10000000) return three_digits(tick / 1e3) + "k";
  return three_digits(tick / 1e6) + "M";
}

}  // namespace

void draw_axes(std::string& out, const Axes& axes) {
  const double bottom = axes.top + axes.height, right = axes.left + axes.width;
  fmt::format_to(Out(out), R"(<g id="axes" font-size="11" fill="#333">)");
  // Power-of-two byte steps give round labels in KiB/MiB/GiB; at most 8 of them, and none closer
  // than 24 px, so small pictures stay legible.
  const double y_labels = std::clamp(std::floor(axes.height / 24), 2.0, 8.0);
  uint64_t step = 1;
  while (axes.top_address / step > y_labels) step *= 2;
  for (uint64_t address = 0; address <= axes.top_address; address += step) {
    const double y = axes.y(static_cast<double>(address));
    fmt::format_to(Out(out), R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#dde0e6"/>)",
                   axes.left, right, y, y);
    fmt::format_to(Out(out), R"(<text x="{}" y="{:.1f}" text-anchor="end">{}</text>)",
                   axes.left - 6, y + 4, format_bytes(address));
  }
  const double span = static_cast<double>(axes.t1 - axes.t0);
  const double x_labels = std::clamp(std::floor(axes.width / 90), 3.0, 10.0);
  const double raw = span / x_labels, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double tick_step = 10 * magnitude;
  for (double m : {5.0, 2.0, 1.0}) {
    if (m * magnitude >= raw) tick_step = m * magnitude;
  }
  const uint64_t x_step = std::max<uint64_t>(1, static_cast<uint64_t>(tick_step));
  for (uint64_t tick = (axes.t0 + x_step - 1) / x_step * x_step; tick <= axes.t1; tick += x_step) {
    const double x = axes.x(static_cast<double>(tick));
    fmt::format_to(Out(out), R"(<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" stroke="#555"/>)", x,
                   x, bottom, bottom + 4);
    fmt::format_to(Out(out), R"(<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)", x,
                   bottom + 16, format_ticks(tick));
  }
  fmt::format_to(Out(out), R"(<path d="M{} {}V{}H{}" fill="none" stroke="#555"/>)", axes.left,
                 axes.top, bottom, right);
  fmt::format_to(Out(out), R"(<text x="{}" y="{}" text-anchor="middle">time (event ticks)</text>)",
                 axes.left + axes.width / 2, bottom + 34);
  fmt::format_to(Out(out),
                 R"svg(<text transform="translate(14 {}) rotate(-90)" text-anchor="middle">)svg"
                 R"(slab offset</text></g>)",
                 axes.top + axes.height / 2);
}

void draw_level(std::string& out, const Axes& axes, const char* id, const char* color,
                const char* dashes, uint64_t address, const std::string& label, bool label_below) {
  const double y = axes.y(static_cast<double>(address)), right = axes.left + axes.width;
  fmt::format_to(Out(out),
                 R"(<g id="{}"><line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="{}" )"
                 R"(stroke-width="1.5" stroke-dasharray="{}"/>)",
                 id, axes.left, right, y, y, color, dashes);
  fmt::format_to(Out(out),
                 R"(<text x="{}" y="{:.1f}" text-anchor="end" font-size="11" fill="{}"{}>{}</text>)"
                 R"(</g>)",
                 right - 4, label_below ? y + 13 : y - 5, color, kHalo, label);
}

void draw_legend(std::string& out, const std::vector<LegendEntry>& entries, double left,
                 double right, double y) {
  size_t hidden = 0;
  fmt::format_to(Out(out), R"(<g id="legend" font-size="11" fill="#333">)");
  double x = left;
  for (size_t i = 0; i < entries.size(); ++i) {
    // Roughly 6.2 px per glyph at 11 px; escaped entities overcount, which only ends it earlier.
    const double needed = 16 + 6.2 * entries[i].label.size() + 14;
    if (x + needed > right - 70) {
      hidden = entries.size() - i;
      break;
    }
    if (entries[i].is_line) {
      fmt::format_to(Out(out), R"(<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" stroke="{}"/>)", x,
                     x + 12, y - 4, y - 4, entries[i].color);
    } else {
      fmt::format_to(Out(out), R"(<rect x="{:.1f}" y="{}" width="12" height="10" fill="{}"/>)", x,
                     y - 9, entries[i].color);
    }
    fmt::format_to(Out(out), R"(<text x="{:.1f}" y="{}">{}</text>)", x + 16, y, entries[i].label);
    x += needed;
  }
  if (hidden) {
    fmt::format_to(Out(out), R"(<text x="{:.1f}" y="{}">+{} more</text>)", x, y, hidden);
  }
  out += "</g>";
}

}  // namespace memoplan::heapmap_detail
