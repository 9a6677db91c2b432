// Text for SVG documents: escaping of untrusted strings and compact number formatting.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace memoplan::svg_text {

// Appends `text` escaped for XML character data and attribute values. Invalid UTF-8 and control
// characters XML 1.0 forbids become U+FFFD (tab, newline and CR a space), so any byte string yields
// a well-formed document.
void append_escaped(std::string& out, std::string_view text);
std::string escaped(std::string_view text);

// A pixel coordinate to 0.1 px, without a trailing ".0".
void append_px(std::string& out, double value);

// Three significant digits, trailing zeros dropped: "1.5", "24", "1.02", "512".
std::string three_digits(double value);

// "95,064".
std::string with_thousands(size_t n);

}  // namespace memoplan::svg_text
