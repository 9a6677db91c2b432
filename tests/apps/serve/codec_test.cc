// The torch-free protocol parts of memoplan-serve: datatypes and 16-bit floats, JSON tensor data,
// the KServe v2 request/response codec with the binary extension, the input checks and --input.
#include <gtest/gtest.h>

#include <simdjson.h>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "http_error.h"
#include "input_spec.h"
#include "json_tensor.h"
#include "kserve_codec.h"
#include "request_check.h"
#include "status_of.h"
#include "tensor_names.h"

namespace memoplan::serve {
namespace {

using nlohmann::json;

// decode_json_data reads simdjson elements; each parser keeps its document alive.
simdjson::dom::element parsed(const std::string& text) {
  static std::vector<std::unique_ptr<simdjson::dom::parser>> parsers;
  parsers.push_back(std::make_unique<simdjson::dom::parser>());
  return parsers.back()->parse(text);
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

TEST(Datatype, NamesAndSizes) {
  for (const char* name :
       {"BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "BF16", "FP32", "FP64"}) {
    ASSERT_TRUE(parse_datatype(name)) << name;
    EXPECT_STREQ(datatype_name(*parse_datatype(name)), name);
  }
  EXPECT_FALSE(parse_datatype("BYTES"));
  EXPECT_FALSE(parse_datatype("UINT64"));
  EXPECT_EQ(element_size(DataType::kInt64), 8u);
  EXPECT_EQ(element_size(DataType::kBf16), 2u);
}

TEST(Datatype, HalfRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);         // tie: even (zero)
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);         // tie: even (2)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: even
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie: even
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::nanf("")))));
  // Every half that is not a NaN survives half -> float -> half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_half(f), h) << std::hex << h;
    }
  }
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
}

TEST(Datatype, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie: even
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie: even
  EXPECT_EQ(bfloat16_to_float(0xc000), -2.0f);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::nanf("")))));
}

TEST(JsonTensor, NestedAndFlatDataAreTheSame) {
  HostTensor flat{"x", DataType::kInt32, {2, 2}, ""};
  HostTensor nested = flat;
  decode_json_data(parsed("[1, 2, 3, 4]"), flat);
  decode_json_data(parsed("[[1, 2], [3, 4]]"), nested);
  EXPECT_EQ(flat.bytes, bytes_of(std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(nested.bytes, flat.bytes);
}

TEST(JsonTensor, RefusesWrongTypesRangesAndCounts) {
  auto decode = [](const char* data, DataType type, std::vector<int64_t> shape) {
    return status_of([&] {
      HostTensor t{"x", type, shape, ""};
      decode_json_data(parsed(data), t);
    });
  };
  EXPECT_EQ(decode("[1, 2]", DataType::kInt8, {2}), 0);
  EXPECT_EQ(decode("[1, 200]", DataType::kInt8, {2}), 400);
  EXPECT_EQ(decode("[-1]", DataType::kUint8, {1}), 400);
  EXPECT_EQ(decode("[1.5]", DataType::kInt64, {1}), 400);
  EXPECT_EQ(decode("[\"1\"]", DataType::kFp32, {1}), 400);
  EXPECT_EQ(decode("[1e39]", DataType::kFp32, {1}), 400);
  EXPECT_EQ(decode("[1e39]", DataType::kFp64, {1}), 0);
  EXPECT_EQ(decode("[true, 1]", DataType::kBool, {2}), 400);
  EXPECT_EQ(decode("[1, 2, 3]", DataType::kFp32, {2}), 400);
  EXPECT_EQ(decode("[1]", DataType::kFp32, {2}), 400);
  EXPECT_EQ(decode("[18446744073709551615]", DataType::kInt64, {1}), 400);
}

TEST(JsonTensor, FloatsRoundTripBitForBit) {
  std::mt19937 rng(7);
  std::vector<float> values = {0.1f,
                               -0.0f,
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               1.0f / 3};
  for (int i = 0; i < 2000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isfinite(f)) values.push_back(f);
  }
  HostTensor t{"y", DataType::kFp32, {static_cast<int64_t>(values.size())}, bytes_of(values)};
  std::string text;
  append_json_data(t, text);
  HostTensor back{"y", DataType::kFp32, t.shape, ""};
  decode_json_data(parsed(text), back);
  EXPECT_EQ(back.bytes, t.bytes);

  HostTensor d{"d", DataType::kFp64, {2}, bytes_of(std::vector<double>{0.1, 1e-310})};
  text.clear();
  append_json_data(d, text);
  EXPECT_EQ(text, "[0.1,1e-310]");
  HostTensor nan{"n", DataType::kFp32, {1}, bytes_of(std::vector<float>{std::nanf("")})};
  text.clear();
  append_json_data(nan, text);
  EXPECT_EQ(text, "[null]");
}

TEST(Codec, DecodesJsonAndBinaryInputs) {
  const std::string header = R"({"id": "7", "inputs": [
      {"name": "a", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
      {"name": "b", "shape": [1, 2], "datatype": "INT64", "data": [[5, 6]]},
      {"name": "c", "shape": [3], "datatype": "UINT8", "parameters": {"binary_data_size": 3}}],
      "outputs": [{"name": "out", "parameters": {"binary_data": true}}]})";
  const std::string binary = bytes_of(std::vector<float>{1.5f, -2.0f}) + "xyz";
  const InferRequest r = decode_infer_request(header + binary, header.size());
  EXPECT_EQ(r.id, "7");
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[0].bytes, bytes_of(std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(r.inputs[1].bytes, bytes_of(std::vector<int64_t>{5, 6}));
  EXPECT_EQ(r.inputs[2].bytes, "xyz");
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].binary, true);
  EXPECT_FALSE(r.binary_outputs);
}

TEST(Codec, RefusesMalformedRequests) {
  auto status = [](const std::string& body, std::optional<size_t> header = std::nullopt) {
    return status_of([&] { decode_infer_request(body, header); });
  };
  EXPECT_EQ(status(R"({"inputs": [)"), 400);
  EXPECT_EQ(status(R"({"inputs": {}})"), 400);
  EXPECT_EQ(status(R"({"id": 3, "inputs": []})"), 400);
  EXPECT_EQ(status(R"({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]})"), 400);
  EXPECT_EQ(status(R"({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]})"), 400);
  EXPECT_EQ(status(R"({"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32"}]})"), 400);
  EXPECT_EQ(status(R"({"inputs": [{"name": "x", "shape": [1048576, 1048576, 1048576],
                                   "datatype": "FP32", "data": []}]})"),
            400);
  EXPECT_EQ(status(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]},
                                  {"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]})"),
            400);
  const std::string binary_header =
      R"({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
                      "parameters": {"binary_data_size": 8}}]})";
  EXPECT_EQ(status(binary_header + "12345678", binary_header.size()), 0);
  EXPECT_EQ(status(binary_header + "1234567", binary_header.size()), 400);    // short
  EXPECT_EQ(status(binary_header + "123456789", binary_header.size()), 400);  // left over
  EXPECT_EQ(status(binary_header, binary_header.size() + 1), 400);
}

TEST(Codec, EncodesSelectedOutputsJsonAndBinary) {
  const std::vector<HostTensor> outputs = {
      {"out0", DataType::kFp32, {1, 2}, bytes_of(std::vector<float>{0.5f, 2.0f})},
      {"out1", DataType::kInt64, {1}, bytes_of(std::vector<int64_t>{9})}};
  InferRequest all;
  all.id = "r";
  const InferResponseBody plain = encode_infer_response("m", all, outputs);
  EXPECT_FALSE(plain.header_length);
  EXPECT_EQ(plain.body,
            R"({"model_name":"m","id":"r","outputs":[{"name":"out0","datatype":"FP32",)"
            R"("shape":[1,2],"data":[0.5,2.0]},{"name":"out1","datatype":"INT64","shape":[1],)"
            R"("data":[9]}]})");

  InferRequest one;
  one.outputs = {{"out1", true}};
  const InferResponseBody binary = encode_infer_response("m", one, outputs);
  ASSERT_TRUE(binary.header_length);
  const json header = json::parse(binary.body.substr(0, *binary.header_length));
  EXPECT_EQ(header["outputs"].size(), 1u);
  EXPECT_EQ(header["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_EQ(binary.body.substr(*binary.header_length), outputs[1].bytes);

  InferRequest unknown;
  unknown.outputs = {{"nope", std::nullopt}};
  EXPECT_EQ(status_of([&] { encode_infer_response("m", unknown, outputs); }), 400);
}

TEST(RequestCheck, OrdersInputsAndChecksTypesAndShapes) {
  const std::vector<TensorSpec> spec = {{"a", DataType::kFp32, {-1, 3}, false},
                                        {"b", DataType::kInt64, {}, true}};
  std::vector<HostTensor> in = {{"b", DataType::kInt64, {4, 5}, ""},
                                {"a", DataType::kFp32, {7, 3}, ""}};
  const std::vector<HostTensor> ordered = match_inputs(spec, in);
  EXPECT_EQ(ordered[0].name, "a");
  EXPECT_EQ(ordered[1].name, "b");
  auto status = [&](std::vector<HostTensor> inputs) {
    return status_of([&] { match_inputs(spec, std::move(inputs)); });
  };
  EXPECT_EQ(status({{"a", DataType::kFp32, {7, 4}, ""}, {"b", DataType::kInt64, {}, ""}}), 400);
  EXPECT_EQ(status({{"a", DataType::kFp64, {7, 3}, ""}, {"b", DataType::kInt64, {}, ""}}), 400);
  EXPECT_EQ(status({{"a", DataType::kFp32, {7, 3}, ""}}), 400);
  // No default input for b: any datatype and shape reach forward.
  EXPECT_EQ(status({{"a", DataType::kFp32, {7, 3}, ""}, {"b", DataType::kFp16, {2, 2, 2}, ""}}), 0);
  EXPECT_EQ(status({{"a", DataType::kFp32, {3}, ""}, {"b", DataType::kInt64, {}, ""}}), 400);
  EXPECT_EQ(status({{"a", DataType::kFp32, {1, 3}, ""},
                    {"b", DataType::kInt64, {}, ""},
                    {"c", DataType::kInt64, {}, ""}}),
            400);
}

// Triton's PyTorch-backend names: <prefix>__<index>, any prefix, the position among the model's
// tensors; an exact name comes first.
TEST(TensorNames, TakesNamesAndTritonsPositions) {
  EXPECT_EQ(positional_index("INPUT__0"), 0u);
  EXPECT_EQ(positional_index("input__12"), 12u);
  EXPECT_EQ(positional_index("my_input__3"), 3u);
  EXPECT_EQ(positional_index("a__b__2"), 2u);
  for (const char* not_positional : {"x", "__0", "INPUT__", "INPUT_0", "INPUT__01", "INPUT__0x",
                                     "INPUT__-1", "INPUT__1234567890"}) {
    EXPECT_FALSE(positional_index(not_positional)) << not_positional;
  }
  const std::vector<TensorSpec> spec = {{"a", DataType::kFp32, {-1, 3}, false},
                                        {"b__0", DataType::kInt64, {}, true}};
  EXPECT_EQ(find_tensor(spec, "a"), 0u);
  EXPECT_EQ(find_tensor(spec, "INPUT__1"), 1u);
  EXPECT_EQ(find_tensor(spec, "b__0"), 1u) << "an exact name before a position";
  EXPECT_FALSE(find_tensor(spec, "INPUT__2"));

  std::vector<HostTensor> in = {{"INPUT__1", DataType::kInt64, {4, 5}, ""},
                                {"input__0", DataType::kFp32, {7, 3}, ""}};
  const std::vector<HostTensor> ordered = match_inputs(spec, in);
  EXPECT_EQ(ordered[0].name, "input__0");
  EXPECT_EQ(ordered[1].name, "INPUT__1");
  EXPECT_EQ(status_of([&] {
              match_inputs(spec, {{"a", DataType::kFp32, {7, 3}, ""},
                                  {"INPUT__0", DataType::kFp32, {7, 3}, ""}});
            }),
            400)
      << "the same input by name and by position";
  EXPECT_EQ(status_of([&] { check_requested_outputs(spec, {{"OUTPUT__1", std::nullopt}}); }), 0);
  EXPECT_EQ(status_of([&] { check_requested_outputs(spec, {{"OUTPUT__2", std::nullopt}}); }), 400);

  // A requested output keeps the name the client asked for.
  const std::vector<HostTensor> outputs = {
      {"output__0", DataType::kFp32, {1}, std::string(4, 'a')},
      {"output__1", DataType::kFp32, {1}, std::string(4, 'b')}};
  InferRequest request;
  request.outputs = {{"OUTPUT__1", std::nullopt}};
  const json body = json::parse(encode_infer_response("m", request, outputs).body);
  ASSERT_EQ(body["outputs"].size(), 1u);
  EXPECT_EQ(body["outputs"][0]["name"], "OUTPUT__1");
}

TEST(InputSpec, ParsesShapesAndDatatypes) {
  const InputDefault image = parse_input_default("1x3x224x224");
  EXPECT_EQ(image.shape, (std::vector<int64_t>{1, 3, 224, 224}));
  EXPECT_EQ(image.datatype, DataType::kFp32);
  const InputDefault tokens = parse_input_default("2x128:INT64");
  EXPECT_EQ(tokens.shape, (std::vector<int64_t>{2, 128}));
  EXPECT_EQ(tokens.datatype, DataType::kInt64);
  EXPECT_EQ(to_string(tokens), "2x128:INT64");
  for (const char* bad : {"", "1x", "x1", "1x-3", "1xa", "1x3:FP8", ":FP32"}) {
    EXPECT_THROW(parse_input_default(bad), std::invalid_argument) << bad;
  }
  EXPECT_EQ(datatype_of_torch_name("int64"), DataType::kInt64);
  EXPECT_FALSE(datatype_of_torch_name("complex64"));
}

}  // namespace
}  // namespace memoplan::serve
