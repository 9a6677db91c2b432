// The KServe v2 gRPC protocol's messages (proto/kserve_v2.proto) to and from the server's
// torch-free requests and tensors: what kserve_codec is for the HTTP bodies. Pure data
// conversion: no gRPC calls, no torch.
#pragma once

#include <string>
#include <vector>

#include "kserve_codec.h"
#include "kserve_v2.pb.h"
#include "tensor.h"

namespace memoplan::serve {

// Inputs from `contents` (the datatype's repeated field) or from raw_input_contents (raw
// little-endian bytes, one entry per input, required for FP16 and BF16). Throws HttpError 400
// naming what is wrong: an unsupported datatype, a negative dimension, element counts or byte
// sizes that do not fit the shape, values out of the datatype's range, contents mixed with raw.
InferRequest decode_grpc_infer_request(const inference::ModelInferRequest& message);

// Every selected output (select_outputs: the request's names and order) in raw_output_contents,
// as Triton answers. Throws HttpError 400 for an output the model does not have.
void encode_grpc_infer_response(const std::string& model_name, const InferRequest& request,
                                const std::vector<HostTensor>& outputs,
                                inference::ModelInferResponse* response);

void encode_grpc_model_metadata(const ModelSpec& spec, inference::ModelMetadataResponse* response);

}  // namespace memoplan::serve
