#include "svg_text.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>

namespace memoplan::svg_text {
namespace {

// XML 1.0 accepts only well-formed UTF-8 without most control characters. Op names come from
// arbitrary traces, so anything else becomes U+FFFD instead of breaking the document.
size_t valid_utf8_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = 0;
  uint32_t code = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, code = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, code = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, code = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  const uint32_t smallest = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
  const bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  if (code < smallest || code > 0x10FFFF || surrogate || code == 0xFFFE || code == 0xFFFF) return 0;
  return length;
}

}  // namespace

void append_escaped(std::string& out, std::string_view text) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = valid_utf8_length(text, i);
      out.append(length ? text.substr(i, length) : kReplacement);
      i += length ? length : 1;
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += c == '\t' || c == '\n' || c == '\r' ? std::string_view(" ") : kReplacement;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
}

std::string escaped(std::string_view text) {
  std::string out;
  append_escaped(out, text);
  return out;
}

// Most of a heap map is coordinates: dropping ".0" keeps it small.
void append_px(std::string& out, double value) {
  const long long tenths = std::llround(value * 10);
  const long long whole = tenths / 10, fraction = std::llabs(tenths % 10);
  if (tenths < 0 && whole == 0) out += '-';
  fmt::format_to(std::back_inserter(out), "{}", whole);
  if (fraction) fmt::format_to(std::back_inserter(out), ".{}", fraction);
}

std::string three_digits(double value) {
  std::string text = value >= 100  ? fmt::format("{:.0f}", value)
                     : value >= 10 ? fmt::format("{:.1f}", value)
                                   : fmt::format("{:.2f}", value);
  if (text.find('.') != std::string::npos) {
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
  }
  return text;
}

std::string with_thousands(size_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

}  // namespace memoplan::svg_text
