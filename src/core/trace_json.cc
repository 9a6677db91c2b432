// The memoplan-trace JSON format (docs/FORMATS.md): rows stored column by column.
#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "json_fields.h"
#include "memoplan/trace_io.h"

namespace memoplan {
namespace {

using json_fields::get_u64;
using nlohmann::json;

constexpr int kTraceVersion = 1;
constexpr const char* kTraceFormat = "memoplan-trace";

// Reads columns[name] into `out` (one value per row). Absent optional column -> empty vector.
template <typename T>
std::string read_column(const json& columns, const char* name, bool required, size_t rows,
                        const std::string& origin, std::vector<T>& out) {
  auto it = columns.find(name);
  if (it == columns.end()) {
    return required ? origin + ": missing required column \"" + name + "\"" : std::string{};
  }
  if (!it->is_array()) return origin + ": column \"" + name + "\" must be an array";
  if (it->size() != rows) {
    return origin + ": column \"" + name + "\" has " + std::to_string(it->size()) +
           " values, column \"size\" has " + std::to_string(rows);
  }
  out.resize(rows);
  for (size_t row = 0; row < rows; ++row) {
    if constexpr (std::is_signed_v<T>) {
      if (!json_fields::get_i64((*it)[row], out[row])) {
        return origin + ": " + name + "[" + std::to_string(row) + "] must be an integer, got " +
               (*it)[row].dump();
      }
    } else if (!get_u64((*it)[row], out[row])) {
      return origin + ": " + name + "[" + std::to_string(row) +
             "] must be a non-negative integer, got " + (*it)[row].dump();
    }
  }
  return {};
}

// Index of `name` in the string table, adding it when new.
uint64_t intern(const std::string& name, std::vector<std::string>& table,
                std::unordered_map<std::string, uint64_t>& index) {
  auto [it, inserted] = index.emplace(name, table.size());
  if (inserted) table.push_back(name);
  return it->second;
}

// The name at ops[index], or an error naming the row.
std::string op_name(const std::vector<std::string>& ops, const char* column, size_t row,
                    uint64_t index, const std::string& origin, std::string& out) {
  if (index >= ops.size()) {
    return origin + ": " + column + "[" + std::to_string(row) + "] = " + std::to_string(index) +
           " is past the end of \"ops\" (" + std::to_string(ops.size()) + " names)";
  }
  out = ops[index];
  return {};
}

}  // namespace

Result<Trace> parse_trace_json(const std::string& text, const std::string& origin) {
  std::string error;
  std::optional<json> root = json_fields::parse(text, origin, error);
  if (!root) return Error{error};
  if (std::string bad = json_fields::check_header(*root, origin, kTraceFormat, kTraceVersion);
      !bad.empty()) {
    return Error{bad};
  }

  Trace trace;
  if (auto meta = root->find("meta"); meta != root->end() && !meta->is_null()) {
    if (!meta->is_object()) return Error{origin + ": \"meta\" must be an object"};
    const std::string where = origin + ": meta";
    trace.meta.name = json_fields::string_field(*meta, "name", where, error);
    trace.meta.model_fingerprint =
        json_fields::string_field(*meta, "model_fingerprint", where, error);
    trace.meta.input_shapes = json_fields::string_field(*meta, "input_shapes", where, error);
    trace.meta.source = json_fields::string_field(*meta, "source", where, error);
    trace.meta.threads = json_fields::u64_field(*meta, "threads", 0, where, error);
  }
  trace.default_align = json_fields::u64_field(*root, "default_align", 64, origin, error);
  if (!error.empty()) return Error{error};

  std::vector<std::string> ops;
  if (auto it = root->find("ops"); it != root->end()) {
    if (!it->is_array()) return Error{origin + ": \"ops\" must be an array of strings"};
    for (const json& op : *it) {
      if (!op.is_string()) return Error{origin + ": \"ops\" must be an array of strings"};
      ops.push_back(op.get<std::string>());
    }
  }

  auto columns = root->find("columns");
  if (columns == root->end() || !columns->is_object()) {
    return Error{origin + ": missing \"columns\" object"};
  }
  auto size_column = columns->find("size");
  if (size_column == columns->end() || !size_column->is_array()) {
    return Error{origin + ": missing required column \"size\""};
  }
  const size_t rows = size_column->size();
  std::vector<uint64_t> id, size, begin, end, align, escapes, op, outer_op, callsite, thread;
  std::vector<int64_t> node, alias_of, slice_of;
  std::vector<uint64_t> slice_offset;
  for (auto [name, required, out] :
       {std::tuple{"size", true, &size}, std::tuple{"begin", true, &begin},
        std::tuple{"end", true, &end}, std::tuple{"id", false, &id},
        std::tuple{"align", false, &align}, std::tuple{"escapes", false, &escapes},
        std::tuple{"op", false, &op}, std::tuple{"outer_op", false, &outer_op},
        std::tuple{"callsite", false, &callsite}, std::tuple{"thread", false, &thread}}) {
    if (std::string bad = read_column(*columns, name, required, rows, origin, *out); !bad.empty()) {
      return Error{bad};
    }
  }
  for (auto [name, out] : {std::pair{"node", &node}, std::pair{"alias_of", &alias_of},
                           std::pair{"slice_of", &slice_of}}) {
    if (std::string bad = read_column(*columns, name, false, rows, origin, *out); !bad.empty()) {
      return Error{bad};
    }
  }
  if (std::string bad = read_column(*columns, "slice_offset", false, rows, origin, slice_offset);
      !bad.empty()) {
    return Error{bad};
  }
  for (auto& [key, value] : columns->items()) {
    static const char* known[] = {"size",    "begin",    "end",      "id",          "align",
                                  "escapes", "op",       "outer_op", "node",        "callsite",
                                  "thread",  "alias_of", "slice_of", "slice_offset"};
    if (std::find(std::begin(known), std::end(known), key) == std::end(known)) {
      return Error{origin + ": unknown column \"" + key + "\""};
    }
  }

  trace.allocations.resize(rows);
  for (size_t row = 0; row < rows; ++row) {
    Allocation& a = trace.allocations[row];
    a.id = id.empty() ? row : id[row];
    a.size = size[row];
    a.begin = begin[row];
    a.end = end[row];
    a.align = align.empty() ? 0 : align[row];
    a.escapes = !escapes.empty() && escapes[row] != 0;
    if (!op.empty()) {
      if (std::string bad = op_name(ops, "op", row, op[row], origin, a.provenance.op);
          !bad.empty()) {
        return Error{bad};
      }
    }
    if (!outer_op.empty()) {
      if (std::string bad =
              op_name(ops, "outer_op", row, outer_op[row], origin, a.provenance.outer_op);
          !bad.empty()) {
        return Error{bad};
      }
    }
    // A relation is an id, -1 for none.
    a.alias_of = alias_of.empty() || alias_of[row] < 0 ? kNoRow : alias_of[row];
    a.slice_of = slice_of.empty() || slice_of[row] < 0 ? kNoRow : slice_of[row];
    a.slice_offset = slice_offset.empty() ? 0 : slice_offset[row];
    a.provenance.node = node.empty() ? -1 : node[row];
    a.provenance.callsite = callsite.empty() ? 0 : callsite[row];
    a.provenance.thread = thread.empty() ? 0 : static_cast<uint32_t>(thread[row]);
  }
  if (std::string bad = check_trace(trace); !bad.empty()) return Error{origin + ": " + bad};
  return trace;
}

std::string write_trace(const Trace& trace, const std::string& path) {
  json meta = {{"name", trace.meta.name},
               {"model_fingerprint", trace.meta.model_fingerprint},
               {"input_shapes", trace.meta.input_shapes},
               {"source", trace.meta.source},
               {"threads", trace.meta.threads}};
  std::vector<std::string> ops;
  std::unordered_map<std::string, uint64_t> op_index;
  const size_t rows = trace.allocations.size();
  std::vector<uint64_t> id(rows), size(rows), begin(rows), end(rows), align(rows), escapes(rows),
      op(rows), outer_op(rows), callsite(rows), thread(rows);
  std::vector<int64_t> node(rows), alias_of(rows), slice_of(rows);
  std::vector<uint64_t> slice_offset(rows);
  // outer_op and node are written only when some row has one, so traces without them (every
  // source but the torch extension) keep the columns older readers know.
  bool any_outer_op = false, any_node = false, any_relation = false;
  for (size_t row = 0; row < rows; ++row) {
    const Allocation& a = trace.allocations[row];
    id[row] = a.id;
    size[row] = a.size;
    begin[row] = a.begin;
    end[row] = a.end;
    align[row] = a.align;
    escapes[row] = a.escapes;
    op[row] = intern(a.provenance.op, ops, op_index);
    any_outer_op |= !a.provenance.outer_op.empty();
    any_node |= a.provenance.node != -1;
    node[row] = a.provenance.node;
    alias_of[row] = a.alias_of == kNoRow ? -1 : static_cast<int64_t>(a.alias_of);
    slice_of[row] = a.slice_of == kNoRow ? -1 : static_cast<int64_t>(a.slice_of);
    slice_offset[row] = a.slice_offset;
    any_relation |= a.alias_of != kNoRow || a.slice_of != kNoRow;
    callsite[row] = a.provenance.callsite;
    thread[row] = a.provenance.thread;
  }
  if (any_outer_op) {
    for (size_t row = 0; row < rows; ++row) {
      outer_op[row] = intern(trace.allocations[row].provenance.outer_op, ops, op_index);
    }
  }
  json root = {{"format", kTraceFormat},
               {"version", kTraceVersion},
               {"meta", meta},
               {"default_align", trace.default_align},
               {"ops", ops},
               {"columns",
                {{"id", id},
                 {"size", size},
                 {"begin", begin},
                 {"end", end},
                 {"align", align},
                 {"escapes", escapes},
                 {"op", op},
                 {"callsite", callsite},
                 {"thread", thread}}}};
  if (any_outer_op) root["columns"]["outer_op"] = outer_op;
  if (any_node) root["columns"]["node"] = node;
  if (any_relation) {
    root["columns"]["alias_of"] = alias_of;
    root["columns"]["slice_of"] = slice_of;
    root["columns"]["slice_offset"] = slice_offset;
  }
  return write_file_text(path, root.dump() + "\n");
}

Result<Trace> read_trace(const std::string& path) {
  Result<std::string> text = read_file_text(path);
  if (!text) return Error{text.error()};
  const size_t first = text->find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return Error{path + ": file is empty"};
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  const bool csv_name = ends_with(".csv") || ends_with(".csv.gz");
  const bool json_name = ends_with(".json") || ends_with(".json.gz");
  const char c = (*text)[first];
  if (!csv_name && (json_name || c == '{' || c == '[')) return parse_trace_json(*text, path);
  return parse_trace_csv(*text, path);
}

}  // namespace memoplan
