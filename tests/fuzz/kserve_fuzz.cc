// Fuzz target: KServe v2 infer request bodies, as memoplan-serve's /v2/models/M/infer receives
// them (decode_infer_request, then the input checks and the response encoder, all torch-free).
// Input: an optional first line "H<digits>" standing for the Inference-Header-Content-Length
// header (the binary tensor extension), then the body.
//
// Checks: a bad request is an HttpError 400, never another exception (which the server would
// answer with 500) nor a crash; a decoded tensor has exactly the bytes its shape and datatype
// need; the response (the inputs echoed as outputs) is valid JSON with a header length inside the
// body, and its JSON tensor data decodes back to the same bytes.
#include <simdjson.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "http_error.h"
#include "json_tensor.h"
#include "kserve_codec.h"
#include "request_check.h"

namespace {

using namespace memoplan::serve;

bool is_bad_request(const std::function<void()>& f) {
  try {
    f();
  } catch (const HttpError& e) {
    FUZZ_CHECK(e.status() == 400, "status %d: %s", e.status(), e.what());
    return true;
  }
  return false;
}

// What a JSON round trip may change: BOOL bytes other than 0 and 1 (binary inputs) read back as 1.
std::string normalized(const HostTensor& t) {
  if (t.datatype != DataType::kBool) return t.bytes;
  std::string bytes = t.bytes;
  for (char& c : bytes) c = c ? 1 : 0;
  return bytes;
}

void check_response(const InferRequest& request) {
  InferResponseBody response;
  if (is_bad_request([&] { response = encode_infer_response("fuzz", request, request.inputs); })) {
    return;  // an output the "model" does not have
  }
  const size_t json_length = response.header_length.value_or(response.body.size());
  FUZZ_CHECK(json_length <= response.body.size(), "header length %zu, body %zu", json_length,
             response.body.size());
  const std::string header = response.body.substr(0, json_length);
  FUZZ_CHECK(nlohmann::json::accept(header), "response is not JSON: %.200s", header.c_str());

  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  FUZZ_CHECK(!parser.parse(header).get(doc), "simdjson cannot read the response");
  for (const simdjson::dom::element out : doc["outputs"].get_array()) {
    simdjson::dom::element data;
    if (out["data"].get(data)) continue;  // sent binary
    const std::string_view name = out["name"].get_string();
    const HostTensor* original = nullptr;
    for (const HostTensor& t : request.inputs) {
      if (t.name == name) original = &t;
    }
    FUZZ_CHECK(original, "response output without its input");
    HostTensor back;
    back.name = original->name;
    back.datatype = original->datatype;
    back.shape = original->shape;
    if (is_bad_request([&] { decode_json_data(data, back); })) {
      // Only NaN and infinities (written as null) may fail to read back.
      FUZZ_CHECK(is_floating(original->datatype), "%s data did not read back",
                 datatype_name(original->datatype));
      continue;
    }
    FUZZ_CHECK(back.bytes == normalized(*original), "%s data changed in the JSON round trip",
               datatype_name(original->datatype));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  std::optional<size_t> header_length;
  if (body.size() > 1 && body[0] == 'H') {
    const size_t newline = body.find('\n');
    if (newline == std::string_view::npos) return 0;
    size_t n = 0;
    for (const char c : body.substr(1, newline - 1)) {
      if (c < '0' || c > '9' || n > (size_t{1} << 40)) return 0;  // the server refuses these
      n = n * 10 + static_cast<size_t>(c - '0');
    }
    header_length = n;
    body.remove_prefix(newline + 1);
  }

  InferRequest request;
  if (is_bad_request([&] { request = decode_infer_request(body, header_length); })) return 0;
  for (const HostTensor& t : request.inputs) {
    FUZZ_CHECK(
        t.bytes.size() == static_cast<size_t>(element_count(t.shape)) * element_size(t.datatype),
        "input '%s': %zu bytes for shape %s of %s", t.name.c_str(), t.bytes.size(),
        shape_text(t.shape).c_str(), datatype_name(t.datatype));
  }
  check_response(request);

  // The checks against a model's signature (one fixed input, one unchecked).
  const std::vector<TensorSpec> expected = {{"x", DataType::kFp32, {-1, 3}, false},
                                            {"y", DataType::kInt64, {}, true}};
  is_bad_request([&] { match_inputs(expected, request.inputs); });
  is_bad_request([&] { check_requested_outputs({{"z", DataType::kFp32, {-1}}}, request.outputs); });
  return 0;
}
