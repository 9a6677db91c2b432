// The KServe v2 (Triton) HTTP/REST protocol's bodies: infer requests and responses, with the
// binary tensor data extension (a JSON header of Inference-Header-Content-Length bytes followed
// by raw tensors), model and server metadata, and the error body {"error": "..."}. Pure data
// conversion: no HTTP, no torch.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor.h"

namespace memoplan::serve {

struct RequestedOutput {
  std::string name;
  // parameters.binary_data: sent as raw bytes after the JSON header; unset: the request's default.
  std::optional<bool> binary;
};

struct InferRequest {
  std::optional<std::string> id;  // echoed in the response
  std::vector<HostTensor> inputs;
  std::vector<RequestedOutput> outputs;  // empty: every output, in the model's order
  bool binary_outputs = false;           // parameters.binary_data_output: the default for all
};

// `header_length`: the Inference-Header-Content-Length header's value, when the request has one
// (then the JSON is the body's first header_length bytes and binary_data_size inputs follow).
// Throws HttpError 400 naming what is wrong: malformed JSON, a missing or ill-typed member, an
// unsupported datatype, data that does not fit the shape, binary sizes that do not add up.
InferRequest decode_infer_request(std::string_view body, std::optional<size_t> header_length);

struct InferResponseBody {
  std::string body;
  // Set when any output went binary: the JSON header's length, for Inference-Header-Content-Length
  // (and the content type is then application/octet-stream).
  std::optional<size_t> header_length;
};

// `outputs` are all of the model's outputs in order; the request picks and orders them. Throws
// HttpError 400 when the request names an output the model does not have.
InferResponseBody encode_infer_response(const std::string& model_name, const InferRequest& request,
                                        const std::vector<HostTensor>& outputs);

// With `memory` (not null): its figures among the parameters (memory_bytes: what the limits charge
// with `workers` slabs; weights_plain_bytes, weights_packed_bytes, slab_bytes, slab_per_worker_bytes).
std::string encode_model_metadata(const ModelSpec& spec, const ModelMemory* memory = nullptr,
                                  int workers = 1);
std::string encode_server_metadata(const std::string& version);
std::string encode_error(const std::string& message);

}  // namespace memoplan::serve
