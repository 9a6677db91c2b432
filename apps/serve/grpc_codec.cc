#include "grpc_codec.h"

#include <cstring>
#include <limits>

#include "http_error.h"
#include "request_check.h"

namespace memoplan::serve {
namespace {

// Appends `values` converted to T (little-endian host order) to `bytes`; each must fit T.
template <typename T, typename Repeated>
void pack(const Repeated& values, const std::string& input, std::string& bytes) {
  bytes.resize(values.size() * sizeof(T));
  char* out = bytes.data();
  for (const auto value : values) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (value < static_cast<decltype(value)>(std::numeric_limits<T>::min()) ||
          value > static_cast<decltype(value)>(std::numeric_limits<T>::max())) {
        throw bad_request("input '" + input + "': value " + std::to_string(value) +
                          " out of its datatype's range");
      }
    }
    const T converted = static_cast<T>(value);
    std::memcpy(out, &converted, sizeof(T));
    out += sizeof(T);
  }
}

// The contents field of `type`, packed; its element count in *count.
std::string packed_contents(const inference::InferTensorContents& c, DataType type,
                            const std::string& input, size_t* count) {
  std::string bytes;
  switch (type) {
    case DataType::kBool:
      *count = static_cast<size_t>(c.bool_contents_size());
      pack<bool>(c.bool_contents(), input, bytes);
      break;
    case DataType::kUint8:
      *count = static_cast<size_t>(c.uint_contents_size());
      pack<uint8_t>(c.uint_contents(), input, bytes);
      break;
    case DataType::kInt8:
      *count = static_cast<size_t>(c.int_contents_size());
      pack<int8_t>(c.int_contents(), input, bytes);
      break;
    case DataType::kInt16:
      *count = static_cast<size_t>(c.int_contents_size());
      pack<int16_t>(c.int_contents(), input, bytes);
      break;
    case DataType::kInt32:
      *count = static_cast<size_t>(c.int_contents_size());
      pack<int32_t>(c.int_contents(), input, bytes);
      break;
    case DataType::kInt64:
      *count = static_cast<size_t>(c.int64_contents_size());
      pack<int64_t>(c.int64_contents(), input, bytes);
      break;
    case DataType::kFp32:
      *count = static_cast<size_t>(c.fp32_contents_size());
      pack<float>(c.fp32_contents(), input, bytes);
      break;
    case DataType::kFp64:
      *count = static_cast<size_t>(c.fp64_contents_size());
      pack<double>(c.fp64_contents(), input, bytes);
      break;
    case DataType::kFp16:
    case DataType::kBf16:
      throw bad_request("input '" + input + "': " + datatype_name(type) +
                        " has no contents field in the protocol: send it in raw_input_contents");
  }
  return bytes;
}

size_t element_count(const std::vector<int64_t>& shape, const std::string& input) {
  size_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      throw bad_request("input '" + input + "': dimension " + std::to_string(d) +
                        " in its shape; dimensions must be 0 or more");
    }
    if (d != 0 && count > std::numeric_limits<size_t>::max() / static_cast<size_t>(d)) {
      throw bad_request("input '" + input + "': its shape has too many elements");
    }
    count *= static_cast<size_t>(d);
  }
  return count;
}

void fill_metadata(const TensorSpec& spec,
                   inference::ModelMetadataResponse::TensorMetadata* tensor) {
  tensor->set_name(spec.name);
  tensor->set_datatype(datatype_name(spec.datatype));
  for (int64_t d : spec.shape) tensor->add_shape(d);
}

}  // namespace

InferRequest decode_grpc_infer_request(const inference::ModelInferRequest& message) {
  InferRequest request;
  if (!message.id().empty()) request.id = message.id();
  const bool raw = message.raw_input_contents_size() > 0;
  if (raw && message.raw_input_contents_size() != message.inputs_size()) {
    throw bad_request("raw_input_contents has " +
                      std::to_string(message.raw_input_contents_size()) + " entries for " +
                      std::to_string(message.inputs_size()) +
                      " inputs; one per input, in the order of inputs");
  }
  for (int i = 0; i < message.inputs_size(); ++i) {
    const auto& in = message.inputs(i);
    const std::optional<DataType> type = parse_datatype(in.datatype());
    if (!type) {
      throw bad_request("input '" + in.name() + "': unsupported datatype '" + in.datatype() + "'");
    }
    HostTensor tensor;
    tensor.name = in.name();
    tensor.datatype = *type;
    tensor.shape.assign(in.shape().begin(), in.shape().end());
    const size_t count = element_count(tensor.shape, in.name());
    if (raw) {
      if (in.has_contents()) {
        throw bad_request("input '" + in.name() +
                          "': contents given beside raw_input_contents; use one or the other");
      }
      tensor.bytes = message.raw_input_contents(i);
      if (tensor.bytes.size() != count * element_size(*type)) {
        throw bad_request("input '" + in.name() + "': " + std::to_string(tensor.bytes.size()) +
                          " raw bytes, its shape and datatype take " +
                          std::to_string(count * element_size(*type)));
      }
    } else {
      size_t given = 0;
      tensor.bytes = packed_contents(in.contents(), *type, in.name(), &given);
      if (given != count) {
        throw bad_request("input '" + in.name() + "': contents has " + std::to_string(given) +
                          " elements, its shape takes " + std::to_string(count));
      }
    }
    request.inputs.push_back(std::move(tensor));
  }
  for (const auto& out : message.outputs()) request.outputs.push_back({out.name(), std::nullopt});
  return request;
}

void encode_grpc_infer_response(const std::string& model_name, const InferRequest& request,
                                const std::vector<HostTensor>& outputs,
                                inference::ModelInferResponse* response) {
  const std::vector<SelectedOutput> selected = select_outputs(request, outputs);
  response->set_model_name(model_name);
  response->set_model_version("1");
  if (request.id) response->set_id(*request.id);
  for (const SelectedOutput& s : selected) {
    auto* out = response->add_outputs();
    out->set_name(*s.name);
    out->set_datatype(datatype_name(s.tensor->datatype));
    for (int64_t d : s.tensor->shape) out->add_shape(d);
    response->add_raw_output_contents(s.tensor->bytes);
  }
}

void encode_grpc_model_metadata(const ModelSpec& spec, inference::ModelMetadataResponse* response) {
  response->set_name(spec.name);
  response->add_versions(spec.version);
  response->set_platform(spec.platform);
  for (const TensorSpec& t : spec.inputs) fill_metadata(t, response->add_inputs());
  for (const TensorSpec& t : spec.outputs) fill_metadata(t, response->add_outputs());
}

}  // namespace memoplan::serve
