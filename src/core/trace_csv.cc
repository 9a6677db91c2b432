// CSV traces from other frameworks: a header row naming columns, one allocation per row.
// MiniMalloc's benchmark files (id,lower,upper,size) read as they are.
#include <charconv>
#include <string_view>

#include "memoplan/trace_io.h"

namespace memoplan {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Splits one line at commas; a field in double quotes may hold commas and "" for a quote.
bool split_fields(std::string_view line, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back(trim(field));
      field.clear();
    } else {
      field += c;
    }
  }
  fields.emplace_back(trim(field));
  return !quoted;
}

bool parse_u64(std::string_view text, uint64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

Result<Trace> parse_trace_csv(const std::string& text, const std::string& origin) {
  enum Column { kSize, kBegin, kEnd, kId, kAlign, kName, kColumns };
  static const char* names[kColumns] = {"size", "begin", "end", "id", "align", "name"};
  // MiniMalloc's benchmark CSVs (id,lower,upper,size; lifetimes half-open like ours).
  struct Alias {
    const char* name;
    Column column;
  };
  static const Alias aliases[] = {{"lower", kBegin}, {"upper", kEnd}, {"alignment", kAlign}};
  int column_of[kColumns] = {-1, -1, -1, -1, -1, -1};

  Trace trace;
  trace.meta.source = "csv";
  std::vector<std::string> fields;
  bool have_header = false;
  size_t line_number = 0, start = 0, header_width = 0;
  while (start <= text.size()) {
    size_t stop = text.find('\n', start);
    if (stop == std::string::npos) stop = text.size();
    std::string_view line = trim(std::string_view(text).substr(start, stop - start));
    start = stop + 1;
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    const std::string where = origin + ":" + std::to_string(line_number);
    if (!split_fields(line, fields)) return Error{where + ": unterminated quoted field"};

    if (!have_header) {
      for (size_t i = 0; i < fields.size(); ++i) {
        int known = -1;
        for (int c = 0; c < kColumns; ++c) {
          if (fields[i] == names[c]) known = c;
        }
        for (const Alias& alias : aliases) {
          if (fields[i] == alias.name) known = alias.column;
        }
        if (known < 0) {
          return Error{where + ": unknown column \"" + fields[i] +
                       "\" (a CSV trace has a header row with size,begin,end and optionally "
                       "id,align,name; lower,upper,alignment are read as begin,end,align)"};
        }
        if (column_of[known] >= 0) {
          return Error{where + ": column \"" + fields[i] + "\" twice (or with its alias)"};
        }
        column_of[known] = static_cast<int>(i);
      }
      for (Column required : {kSize, kBegin, kEnd}) {
        if (column_of[required] < 0) {
          return Error{where +
                       ": the header row must name the columns size, begin and end "
                       "(missing \"" +
                       std::string(names[required]) + "\")"};
        }
      }
      header_width = fields.size();
      have_header = true;
      continue;
    }

    if (fields.size() != header_width) {
      return Error{where + ": " + std::to_string(fields.size()) + " fields, the header has " +
                   std::to_string(header_width)};
    }
    Allocation a;
    a.id = trace.allocations.size();
    for (int c = 0; c < kColumns; ++c) {
      if (column_of[c] < 0 || c == kName) continue;
      const std::string& value = fields[static_cast<size_t>(column_of[c])];
      uint64_t number = 0;
      const bool optional_empty = value.empty() && (c == kId || c == kAlign);
      if (optional_empty) continue;
      if (!parse_u64(value, number)) {
        return Error{where + ": " + names[c] + " \"" + value + "\" is not a non-negative integer"};
      }
      switch (c) {
        case kSize:
          a.size = number;
          break;
        case kBegin:
          a.begin = number;
          break;
        case kEnd:
          a.end = number;
          break;
        case kId:
          a.id = number;
          break;
        case kAlign:
          a.align = number;
          break;
      }
    }
    if (column_of[kName] >= 0) a.provenance.op = fields[static_cast<size_t>(column_of[kName])];
    trace.allocations.push_back(std::move(a));
  }
  if (!have_header) return Error{origin + ": empty CSV (no header row)"};
  if (std::string bad = check_trace(trace); !bad.empty()) return Error{origin + ": " + bad};
  return trace;
}

}  // namespace memoplan
