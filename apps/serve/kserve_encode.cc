// The server's side of the protocol's bodies: infer responses (JSON, or a JSON header and binary
// outputs), metadata and errors. nlohmann escapes the strings; the numbers are written directly.
#include "kserve_codec.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "http_error.h"
#include "json_tensor.h"
#include "request_check.h"

namespace memoplan::serve {
namespace {

using nlohmann::json;

json spec_json(const TensorSpec& spec) {
  return {{"name", spec.name}, {"datatype", datatype_name(spec.datatype)}, {"shape", spec.shape}};
}

}  // namespace

InferResponseBody encode_infer_response(const std::string& model_name, const InferRequest& request,
                                        const std::vector<HostTensor>& outputs) {
  const std::vector<SelectedOutput> selected = select_outputs(request, outputs);

  // Written by hand rather than through a json object: large outputs are mostly numbers, and
  // std::to_chars writes them several times faster than building a DOM first.
  std::string text = "{\"model_name\":" + json(model_name).dump();
  if (request.id) text += ",\"id\":" + json(*request.id).dump();
  text += ",\"outputs\":[";
  size_t binary_bytes = 0;
  for (size_t i = 0; i < selected.size(); ++i) {
    const HostTensor& t = *selected[i].tensor;
    if (i) text += ',';
    text += "{\"name\":" + json(*selected[i].name).dump() + ",\"datatype\":\"" +
            datatype_name(t.datatype) + "\",\"shape\":" + json(t.shape).dump();
    if (selected[i].binary) {
      text += ",\"parameters\":{\"binary_data_size\":" + std::to_string(t.bytes.size()) + "}}";
      binary_bytes += t.bytes.size();
    } else {
      text += ",\"data\":";
      append_json_data(t, text);
      text += '}';
    }
  }
  text += "]}";
  InferResponseBody response;
  if (std::any_of(selected.begin(), selected.end(),
                  [](const SelectedOutput& s) { return s.binary; })) {
    response.header_length = text.size();
    text.reserve(text.size() + binary_bytes);
    for (const SelectedOutput& s : selected) {
      if (s.binary) text += s.tensor->bytes;
    }
  }
  response.body = std::move(text);
  return response;
}

std::string encode_model_metadata(const ModelSpec& spec, const ModelMemory* memory, int workers) {
  json doc = {{"name", spec.name}, {"versions", {spec.version}}, {"platform", spec.platform}};
  doc["inputs"] = json::array();
  for (const TensorSpec& t : spec.inputs) doc["inputs"].push_back(spec_json(t));
  doc["outputs"] = json::array();
  for (const TensorSpec& t : spec.outputs) doc["outputs"].push_back(spec_json(t));
  // Requests may name a tensor as listed here or by Triton's position (INPUT__0, OUTPUT__1).
  doc["parameters"] = {{"tensor_names", "name_or_position"}};
  // What it runs on (once planned).
  const RunsOn& r = spec.runs_on;
  json& p = doc["parameters"];
  if (!r.plan.empty()) p["plan"] = r.plan;
  if (!r.kernels.empty()) p["kernels"] = r.kernels;
  if (!r.memory.empty()) p["memory"] = r.memory;
  if (r.tuned_flops_fraction >= 0) p["tuned_flops_fraction"] = r.tuned_flops_fraction;
  if (r.budget_bytes > 0) p["budget_bytes"] = r.budget_bytes;
  if (!r.kernels_fallback.empty()) p["kernels_fallback"] = r.kernels_fallback;
  if (memory) {
    p["memory_bytes"] = memory->charged(workers);
    p["weights_plain_bytes"] = memory->weights_plain;
    p["weights_packed_bytes"] = memory->weights_packed;
    p["slab_bytes"] = memory->slabs;
    p["slab_per_worker_bytes"] = memory->slab_per_worker;
  }
  return doc.dump();
}

std::string encode_server_metadata(const std::string& version) {
  return json{
      {"name", "memoplan-serve"}, {"version", version}, {"extensions", {"binary_tensor_data"}}}
      .dump();
}

std::string encode_error(const std::string& message) {
  // Replaces invalid UTF-8 (a message may quote the client's bytes) instead of throwing.
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace memoplan::serve
