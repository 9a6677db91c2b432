// The gRPC codec (apps/serve/grpc_codec.h): typed contents and raw bytes to HostTensors,
// every refusal with HTTP's 400 (the service answers INVALID_ARGUMENT), outputs to
// raw_output_contents under the names the request asked for.
#include "grpc_codec.h"

#include <gtest/gtest.h>

#include <cstring>

#include "http_error.h"
#include "status_of.h"

namespace memoplan::serve {
namespace {

template <typename T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  size_t at = 0;
  for (T v : values) {
    std::memcpy(bytes.data() + at, &v, sizeof(T));
    at += sizeof(T);
  }
  return bytes;
}

TEST(GrpcCodec, DecodesContentsOfEveryDatatype) {
  inference::ModelInferRequest m;
  m.set_id("r1");
  auto* f = m.add_inputs();
  f->set_name("f");
  f->set_datatype("FP32");
  f->add_shape(2);
  f->mutable_contents()->add_fp32_contents(1.5f);
  f->mutable_contents()->add_fp32_contents(-2.0f);
  auto* i8 = m.add_inputs();
  i8->set_name("i8");
  i8->set_datatype("INT8");
  i8->add_shape(3);
  for (int v : {-128, 0, 127}) i8->mutable_contents()->add_int_contents(v);
  auto* b = m.add_inputs();
  b->set_name("b");
  b->set_datatype("BOOL");
  b->add_shape(1);
  b->add_shape(2);
  b->mutable_contents()->add_bool_contents(true);
  b->mutable_contents()->add_bool_contents(false);
  auto* i64 = m.add_inputs();
  i64->set_name("i64");
  i64->set_datatype("INT64");
  i64->add_shape(1);
  i64->mutable_contents()->add_int64_contents(int64_t{1} << 40);
  m.add_outputs()->set_name("OUTPUT__0");

  const InferRequest r = decode_grpc_infer_request(m);
  EXPECT_EQ(r.id, "r1");
  ASSERT_EQ(r.inputs.size(), 4u);
  EXPECT_EQ(r.inputs[0].bytes, bytes_of<float>({1.5f, -2.0f}));
  EXPECT_EQ(r.inputs[1].bytes, bytes_of<int8_t>({-128, 0, 127}));
  EXPECT_EQ(r.inputs[2].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r.inputs[2].bytes, bytes_of<bool>({true, false}));
  EXPECT_EQ(r.inputs[3].bytes, bytes_of<int64_t>({int64_t{1} << 40}));
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].name, "OUTPUT__0");
}

TEST(GrpcCodec, DecodesRawContents) {
  inference::ModelInferRequest m;
  auto* h = m.add_inputs();
  h->set_name("h");
  h->set_datatype("FP16");
  h->add_shape(2);
  m.add_raw_input_contents(bytes_of<uint16_t>({0x3c00, 0xc000}));
  const InferRequest r = decode_grpc_infer_request(m);
  EXPECT_EQ(r.inputs[0].datatype, DataType::kFp16);
  EXPECT_EQ(r.inputs[0].bytes, bytes_of<uint16_t>({0x3c00, 0xc000}));
}

TEST(GrpcCodec, RefusesWhatDoesNotFit) {
  auto one = [](const char* datatype, std::initializer_list<int64_t> shape) {
    inference::ModelInferRequest m;
    auto* t = m.add_inputs();
    t->set_name("t");
    t->set_datatype(datatype);
    for (int64_t d : shape) t->add_shape(d);
    return m;
  };
  auto status = [](const inference::ModelInferRequest& m) {
    return status_of([&] { decode_grpc_infer_request(m); });
  };
  inference::ModelInferRequest m = one("INT8", {1});
  m.mutable_inputs(0)->mutable_contents()->add_int_contents(128);
  EXPECT_EQ(status(m), 400) << "out of INT8's range";
  m = one("UINT8", {1});
  m.mutable_inputs(0)->mutable_contents()->add_uint_contents(256);
  EXPECT_EQ(status(m), 400) << "out of UINT8's range";
  m = one("FP32", {2});
  m.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  EXPECT_EQ(status(m), 400) << "one element for two";
  m = one("FP32", {1});
  m.mutable_inputs(0)->mutable_contents()->add_fp64_contents(1);
  EXPECT_EQ(status(m), 400) << "the wrong field for the datatype";
  m = one("FP16", {1});
  EXPECT_EQ(status(m), 400) << "FP16 has no contents field";
  m = one("STRING", {1});
  EXPECT_EQ(status(m), 400);
  m = one("FP32", {-1});
  m.add_raw_input_contents("");
  EXPECT_EQ(status(m), 400) << "a negative dimension";
  m = one("FP32", {2});
  m.add_raw_input_contents(bytes_of<float>({1.0f}));
  EXPECT_EQ(status(m), 400) << "raw bytes for one element of two";
  m = one("FP32", {1});
  m.add_raw_input_contents(bytes_of<float>({1.0f}));
  m.add_raw_input_contents(bytes_of<float>({1.0f}));
  EXPECT_EQ(status(m), 400) << "two raw entries for one input";
  m = one("FP32", {1});
  m.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  m.add_raw_input_contents(bytes_of<float>({1.0f}));
  EXPECT_EQ(status(m), 400) << "contents beside raw";
  m = one("FP32", {1u << 31, 1u << 31, 1u << 31});
  m.add_raw_input_contents("");
  EXPECT_EQ(status(m), 400) << "a shape whose element count overflows";
}

TEST(GrpcCodec, EncodesSelectedOutputsRaw) {
  const std::vector<HostTensor> outputs = {
      {"output__0", DataType::kFp32, {1}, bytes_of<float>({1})},
      {"output__1", DataType::kInt64, {1, 1}, bytes_of<int64_t>({7})}};
  InferRequest request;
  request.id = "abc";
  request.outputs = {{"OUTPUT__1", std::nullopt}};
  inference::ModelInferResponse response;
  encode_grpc_infer_response("m", request, outputs, &response);
  EXPECT_EQ(response.model_name(), "m");
  EXPECT_EQ(response.id(), "abc");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "OUTPUT__1");
  EXPECT_EQ(response.outputs(0).datatype(), "INT64");
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), bytes_of<int64_t>({7}));
  request.outputs = {{"nope", std::nullopt}};
  inference::ModelInferResponse unused;
  EXPECT_EQ(status_of([&] { encode_grpc_infer_response("m", request, outputs, &unused); }), 400);
}

}  // namespace
}  // namespace memoplan::serve
