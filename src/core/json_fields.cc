#include "json_fields.h"

#include <limits>

namespace memoplan::json_fields {

std::optional<json> parse(const std::string& text, const std::string& origin, std::string& error) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond a double (1e400; found by fuzzing).
    // e.what() carries the byte offset; a truncated file ends in "unexpected end of input".
    error = origin + ": not valid JSON (" + e.what() + ")";
    return std::nullopt;
  }
}

std::string check_header(const json& root, const std::string& origin, const char* format,
                         int version) {
  if (!root.is_object()) return origin + ": expected a JSON object at the top level";
  auto f = root.find("format");
  if (f == root.end() || !f->is_string()) {
    return origin + ": no \"format\" field; expected \"" + format + "\"";
  }
  if (f->get<std::string>() != format) {
    return origin + ": format is \"" + f->get<std::string>() + "\", expected \"" + format + "\"";
  }
  auto v = root.find("version");
  if (v == root.end() || !v->is_number_integer()) return origin + ": no integer \"version\" field";
  if (v->get<int64_t>() != version) {
    return origin + ": unsupported " + format + " version " + std::to_string(v->get<int64_t>()) +
           " (this memoplan reads version " + std::to_string(version) + ")";
  }
  return {};
}

bool get_u64(const json& value, uint64_t& out) {
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

bool get_i64(const json& value, int64_t& out) {
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    out = static_cast<int64_t>(value.get<uint64_t>());
    return true;
  }
  return false;
}

uint64_t u64_field(const json& object, const char* key, uint64_t fallback, const std::string& where,
                   std::string& error) {
  auto it = object.find(key);
  if (it == object.end()) return fallback;
  uint64_t value = 0;
  if (!get_u64(*it, value)) {
    if (error.empty()) error = where + ": \"" + key + "\" must be a non-negative integer";
    return fallback;
  }
  return value;
}

std::string string_field(const json& object, const char* key, const std::string& where,
                         std::string& error) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return {};
  if (!it->is_string()) {
    if (error.empty()) error = where + ": \"" + key + "\" must be a string";
    return {};
  }
  return it->get<std::string>();
}

}  // namespace memoplan::json_fields
