// The client's side of the protocol's bodies: infer requests, JSON tensors or the binary tensor
// data extension, parsed with simdjson (see json_tensor.h for why).
#include "kserve_codec.h"

#include <simdjson.h>

#include <set>

#include "http_error.h"
#include "json_tensor.h"

namespace memoplan::serve {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

const char* const kSupportedTypes =
    "BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64";

std::optional<element> find(const object& o, const char* key) {
  element value;
  if (o.at_key(key).get(value)) return std::nullopt;
  return value;
}

element member(const object& o, const char* key, const std::string& where) {
  const std::optional<element> value = find(o, key);
  if (!value) throw bad_request(where + " has no \"" + key + "\"");
  return *value;
}

object as_object(const element& value, const std::string& what) {
  object o;
  if (value.get_object().get(o)) throw bad_request(what + " must be an object");
  return o;
}

std::string as_string(const element& value, const std::string& what) {
  std::string_view s;
  if (value.get_string().get(s)) throw bad_request(what + " must be a string");
  return std::string(s);
}

std::optional<element> parameter(const object& o, const char* key, const std::string& where) {
  const std::optional<element> params = find(o, "parameters");
  if (!params) return std::nullopt;
  return find(as_object(*params, where + ": \"parameters\""), key);
}

std::optional<bool> bool_parameter(const object& o, const char* key, const std::string& where) {
  const std::optional<element> value = parameter(o, key, where);
  if (!value) return std::nullopt;
  bool b;
  if (value->get_bool().get(b)) {
    throw bad_request(where + ": parameter " + key + " must be true or false");
  }
  return b;
}

std::vector<int64_t> parse_shape(const element& value, const std::string& where) {
  array dims;
  if (value.get_array().get(dims)) {
    throw bad_request(where + ": \"shape\" must be an array of integers");
  }
  std::vector<int64_t> shape;
  // Bounds the element count before anything is allocated for it: no request is 2^40 elements.
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  int64_t count = 1;
  for (const element d : dims) {
    int64_t dim;
    if (d.get_int64().get(dim) || dim < 0) {
      throw bad_request(where + ": \"shape\" must be an array of non-negative integers");
    }
    if (dim != 0 && count > kMaxElements / dim) {
      throw bad_request(where + ": shape " + simdjson::minify(value) + " is too large");
    }
    count *= dim;
    shape.push_back(dim);
  }
  return shape;
}

HostTensor parse_input(const element& value, size_t index, std::string_view binary,
                       size_t& binary_offset, size_t json_bytes) {
  std::string where = "inputs[" + std::to_string(index) + "]";
  const object input = as_object(value, where);
  HostTensor tensor;
  tensor.name = as_string(member(input, "name", where), where + ": \"name\"");
  where = "input '" + tensor.name + "'";
  const std::string datatype =
      as_string(member(input, "datatype", where), where + ": \"datatype\"");
  const std::optional<DataType> type = parse_datatype(datatype);
  if (!type) {
    throw bad_request(where + ": unsupported datatype \"" + datatype +
                      "\" (supported: " + kSupportedTypes + ")");
  }
  tensor.datatype = *type;
  tensor.shape = parse_shape(member(input, "shape", where), where);
  const uint64_t count = static_cast<uint64_t>(element_count(tensor.shape));

  if (const std::optional<element> binary_size = parameter(input, "binary_data_size", where)) {
    uint64_t size;
    if (binary_size->get_uint64().get(size)) {
      throw bad_request(where + ": binary_data_size must be a non-negative integer");
    }
    if (size != count * element_size(tensor.datatype)) {
      throw bad_request(where + ": binary_data_size " + std::to_string(size) + " but shape " +
                        shape_text(tensor.shape) + " of " + datatype_name(tensor.datatype) +
                        " needs " + std::to_string(count * element_size(tensor.datatype)));
    }
    if (size > binary.size() - binary_offset) {
      throw bad_request(where + ": binary_data_size " + std::to_string(size) + " but only " +
                        std::to_string(binary.size() - binary_offset) +
                        " bytes of binary data are left");
    }
    tensor.bytes.assign(binary.substr(binary_offset, size));
    binary_offset += size;
    return tensor;
  }
  // Every JSON element takes at least one byte of the header: a larger count is a lie, refused
  // before its buffer is allocated.
  if (count > json_bytes) {
    throw bad_request(where + ": shape " + shape_text(tensor.shape) +
                      " has more elements than the request has bytes");
  }
  decode_json_data(member(input, "data", where), tensor);
  return tensor;
}

std::vector<RequestedOutput> parse_outputs(const element& value) {
  array outputs;
  if (value.get_array().get(outputs)) throw bad_request("\"outputs\" must be an array");
  std::vector<RequestedOutput> requested;
  size_t i = 0;
  for (const element out : outputs) {
    const std::string where = "outputs[" + std::to_string(i++) + "]";
    const object o = as_object(out, where);
    requested.push_back({as_string(member(o, "name", where), where + ": \"name\""),
                         bool_parameter(o, "binary_data", where)});
  }
  return requested;
}

}  // namespace

InferRequest decode_infer_request(std::string_view body, std::optional<size_t> header_length) {
  std::string_view header = body;
  std::string_view binary;
  if (header_length) {
    if (*header_length > body.size()) {
      throw bad_request("Inference-Header-Content-Length " + std::to_string(*header_length) +
                        " exceeds the body's " + std::to_string(body.size()) + " bytes");
    }
    header = body.substr(0, *header_length);
    binary = body.substr(*header_length);
  }
  // One parser per request: it keeps buffers as large as the largest document it read, which
  // per HTTP thread would hold on to max-body-sized memory.
  simdjson::dom::parser parser;
  element doc;
  if (const auto error = parser.parse(header.data(), header.size()).get(doc)) {
    throw bad_request(std::string("malformed JSON: ") + simdjson::error_message(error));
  }
  const object root = as_object(doc, "the request");

  InferRequest request;
  if (const std::optional<element> id = find(root, "id")) request.id = as_string(*id, "\"id\"");
  request.binary_outputs =
      bool_parameter(root, "binary_data_output", "the request").value_or(false);
  array inputs;
  if (member(root, "inputs", "the request").get_array().get(inputs)) {
    throw bad_request("\"inputs\" must be an array");
  }
  size_t binary_offset = 0;
  std::set<std::string> names;
  size_t index = 0;
  for (const element input : inputs) {
    request.inputs.push_back(parse_input(input, index++, binary, binary_offset, header.size()));
    if (!names.insert(request.inputs.back().name).second) {
      throw bad_request("input '" + request.inputs.back().name + "' is given twice");
    }
  }
  if (binary_offset != binary.size()) {
    throw bad_request(std::to_string(binary.size() - binary_offset) +
                      " bytes of binary data follow the inputs' binary_data_size");
  }
  if (const std::optional<element> outputs = find(root, "outputs")) {
    request.outputs = parse_outputs(*outputs);
  }
  return request;
}

}  // namespace memoplan::serve
