// Typed access to nlohmann::json values with error messages that name the file and the field, so
// every reader reports "PATH: field: problem" instead of throwing type_error at a user.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace memoplan::json_fields {

using nlohmann::json;

// Parses `text`; on failure sets `error` to "ORIGIN: not valid JSON (...)".
std::optional<json> parse(const std::string& text, const std::string& origin, std::string& error);

// Checks `format` and `version` fields. Returns "" when they are as expected.
std::string check_header(const json& root, const std::string& origin, const char* format,
                         int version);

bool get_u64(const json& value, uint64_t& out);
bool get_i64(const json& value, int64_t& out);  // any integer that fits in int64_t

// Reads root[key] as an unsigned integer; absent -> `fallback`. Sets `error` when it has another
// type.
uint64_t u64_field(const json& object, const char* key, uint64_t fallback, const std::string& where,
                   std::string& error);
std::string string_field(const json& object, const char* key, const std::string& where,
                         std::string& error);

}  // namespace memoplan::json_fields
