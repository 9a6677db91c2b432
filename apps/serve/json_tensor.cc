#include "json_tensor.h"

#include <simdjson.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "http_error.h"

namespace memoplan::serve {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// A short rendering of an element for messages.
std::string text_of(const element& value) {
  std::string text = simdjson::minify(value);
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

// Nesting deeper than this is not a tensor anyone sends; the bound keeps recursion shallow.
constexpr int kMaxDepth = 64;

class ElementWriter {
 public:
  explicit ElementWriter(HostTensor& tensor)
      : tensor_(tensor),
        size_(element_size(tensor.datatype)),
        expected_(static_cast<size_t>(element_count(tensor.shape))) {
    tensor_.bytes.assign(expected_ * size_, '\0');
  }

  void write(const element& value) {
    if (count_ == expected_) throw error("has more elements than its shape " + shape());
    switch (tensor_.datatype) {
      case DataType::kBool:
        if (!value.is_bool()) throw error("must be true or false for BOOL");
        put<uint8_t>(bool(value) ? 1 : 0);
        break;
      case DataType::kUint8:
        put_integer<uint8_t>(value);
        break;
      case DataType::kInt8:
        put_integer<int8_t>(value);
        break;
      case DataType::kInt16:
        put_integer<int16_t>(value);
        break;
      case DataType::kInt32:
        put_integer<int32_t>(value);
        break;
      case DataType::kInt64:
        put_integer<int64_t>(value);
        break;
      case DataType::kFp16:
        put<uint16_t>(float_to_half(to_float(value)));
        break;
      case DataType::kBf16:
        put<uint16_t>(float_to_bfloat16(to_float(value)));
        break;
      case DataType::kFp32:
        put<float>(to_float(value));
        break;
      case DataType::kFp64:
        put<double>(to_double(value));
        break;
    }
  }

  void finish() const {
    if (count_ != expected_) {
      throw error("has " + std::to_string(count_) + " elements, its shape " + shape() + " needs " +
                  std::to_string(expected_));
    }
  }

  HttpError error(const std::string& what) const {
    return bad_request("input '" + tensor_.name + "': data " + what);
  }

 private:
  template <typename T>
  void put(T value) {
    std::memcpy(tensor_.bytes.data() + count_ * size_, &value, sizeof value);
    ++count_;
  }

  template <typename T>
  void put_integer(const element& value) {
    // simdjson types an integer INT64 when it fits, else UINT64; anything with a fraction or an
    // exponent is a DOUBLE.
    const element_type type = value.type();
    bool in_range = false;
    int64_t v = 0;
    if (type == element_type::INT64) {
      v = int64_t(value);
      in_range = v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                 v <= static_cast<int64_t>(std::numeric_limits<T>::max());
    } else if (type != element_type::UINT64) {
      throw error(std::string("must be integers for ") + datatype_name(tensor_.datatype));
    }
    if (!in_range) {
      throw error("value " + text_of(value) + " is out of range for " +
                  datatype_name(tensor_.datatype));
    }
    put<T>(static_cast<T>(v));
  }

  double to_double(const element& value) const {
    double d;
    if (value.get_double().get(d)) {
      throw error(std::string("must be numbers for ") + datatype_name(tensor_.datatype));
    }
    return d;
  }

  float to_float(const element& value) const {
    const double d = to_double(value);
    const auto f = static_cast<float>(d);
    if (std::isinf(f)) throw error("value " + text_of(value) + " is out of range for FP32");
    return f;
  }

  std::string shape() const { return shape_text(tensor_.shape); }

  HostTensor& tensor_;
  size_t size_;
  size_t expected_;
  size_t count_ = 0;
};

void flatten(const element& value, ElementWriter& writer, int depth) {
  if (!value.is_array()) {
    writer.write(value);
    return;
  }
  if (depth == kMaxDepth) throw writer.error("is nested too deeply");
  for (const element child : simdjson::dom::array(value)) flatten(child, writer, depth + 1);
}

template <typename T>
T load(const std::string& bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof value);
  return value;
}

template <typename T>
void append_number(T value, std::string& out) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) {
      out += "null";
      return;
    }
  }
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, result.ptr);
  if constexpr (std::is_floating_point_v<T>) {
    // An integral value comes out as digits only ("2", "1868500138249605349376"): marked as a
    // float, since JSON readers take digits for an integer, and simdjson refuses integers
    // beyond 64 bits.
    if (std::find_if(buf, result.ptr, [](char c) { return c == '.' || c == 'e'; }) == result.ptr) {
      out += ".0";
    }
  }
}

}  // namespace

void decode_json_data(const element& data, HostTensor& tensor) {
  ElementWriter writer(tensor);
  flatten(data, writer, 0);
  writer.finish();
}

void append_json_data(const HostTensor& tensor, std::string& out) {
  const size_t n = tensor.bytes.size() / element_size(tensor.datatype);
  out += '[';
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    const std::string& b = tensor.bytes;
    switch (tensor.datatype) {
      case DataType::kBool:
        out += load<uint8_t>(b, i) ? "true" : "false";
        break;
      case DataType::kUint8:
        append_number(load<uint8_t>(b, i), out);
        break;
      case DataType::kInt8:
        append_number(load<int8_t>(b, i), out);
        break;
      case DataType::kInt16:
        append_number(load<int16_t>(b, i), out);
        break;
      case DataType::kInt32:
        append_number(load<int32_t>(b, i), out);
        break;
      case DataType::kInt64:
        append_number(load<int64_t>(b, i), out);
        break;
      // Widened to double: the shortest text of the double reads back to it exactly, and its
      // narrowing to the original float is then exact too.
      case DataType::kFp16:
        append_number<double>(half_to_float(load<uint16_t>(b, i)), out);
        break;
      case DataType::kBf16:
        append_number<double>(bfloat16_to_float(load<uint16_t>(b, i)), out);
        break;
      case DataType::kFp32:
        append_number<double>(load<float>(b, i), out);
        break;
      case DataType::kFp64:
        append_number(load<double>(b, i), out);
        break;
    }
  }
  out += ']';
}

}  // namespace memoplan::serve
