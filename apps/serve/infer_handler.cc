#include "infer_handler.h"

#include <charconv>
#include <chrono>
#include <future>
#include <memory>

#include "http_error.h"
#include "kserve_codec.h"
#include "request_check.h"

namespace memoplan::serve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::optional<size_t> parse_header_length(const std::string& field) {
  if (field.empty()) return std::nullopt;
  size_t value = 0;
  const auto r = std::from_chars(field.data(), field.data() + field.size(), value);
  if (r.ec != std::errc() || r.ptr != field.data() + field.size()) {
    throw bad_request("Inference-Header-Content-Length must be a byte count, got \"" + field +
                      "\"");
  }
  return value;
}

}  // namespace

InferReply InferHandler::handle(std::string_view body, const std::string& header_length_field) {
  const Clock::time_point start = Clock::now();
  InferReply reply;
  try {
    reply = run(body, header_length_field);
  } catch (const HttpError& e) {
    reply.status = e.status();
    reply.body = encode_error(e.what());
  } catch (const std::exception& e) {
    reply.status = 500;
    reply.body = encode_error(std::string("internal error: ") + e.what());
  }
  metrics_.observe_infer_latency(seconds_since(start));
  return reply;
}

void InferHandler::check_ready() const {
  if (!ready_.load(std::memory_order_acquire)) {
    throw HttpError(503, "model '" + model_.spec().name + "' is not ready yet");
  }
}

InferReply InferHandler::run(std::string_view body, const std::string& header_length_field) {
  check_ready();  // before decoding a body that could not run anyway
  InferRequest request = decode_infer_request(body, parse_header_length(header_length_field));
  ModelSpec spec;
  const std::vector<HostTensor> outputs = infer(request, spec);
  InferResponseBody encoded = encode_infer_response(spec.name, request, outputs);
  InferReply reply;
  reply.body = std::move(encoded.body);
  reply.header_length = encoded.header_length;
  if (reply.header_length) reply.content_type = "application/octet-stream";
  return reply;
}

std::vector<HostTensor> InferHandler::infer(InferRequest& request, ModelSpec& spec) {
  check_ready();
  spec = model_.spec();
  std::vector<HostTensor> inputs = match_inputs(spec.inputs, std::move(request.inputs));
  if (!spec.outputs.empty()) check_requested_outputs(spec.outputs, request.outputs);
  for (size_t i = 0; i < inputs.size() && i < max_dims_.size(); ++i) {
    const std::vector<int64_t>& max = max_dims_[i];
    if (max.empty()) continue;
    bool fits = inputs[i].shape.size() == max.size();
    for (size_t d = 0; fits && d < max.size(); ++d) {
      fits = max[d] < 0 || inputs[i].shape[d] <= max[d];
    }
    if (!fits) {
      throw bad_request("input '" + inputs[i].name + "': shape " + shape_text(inputs[i].shape) +
                        " exceeds the model's max_dims " + shape_text(max) + " (config.json)");
    }
  }
  if (batcher_) return batcher_->infer(std::move(inputs));

  // The worker runs the forward into `state`, then fulfils the promise the HTTP thread waits on.
  // shared_ptr: std::function needs a copyable callable.
  struct State {
    std::vector<HostTensor> inputs, outputs;
    std::exception_ptr error;
    std::promise<std::vector<HostTensor>> promise;
  };
  auto state = std::make_shared<State>();
  state->inputs = std::move(inputs);
  std::future<std::vector<HostTensor>> result = state->promise.get_future();
  WorkerPool::Job job;
  job.run = [this, state] {
    const Clock::time_point begin = Clock::now();
    try {
      state->outputs = model_.infer(state->inputs);
    } catch (...) {
      state->error = std::current_exception();
    }
    metrics_.count_inference(seconds_since(begin), !state->error);
  };
  job.finish = [state] {
    if (state->error) {
      state->promise.set_exception(state->error);
    } else {
      state->promise.set_value(std::move(state->outputs));
    }
  };
  if (!pool_.try_submit(std::move(job))) {
    throw HttpError(503, "server busy: " + std::to_string(pool_.workers()) + " worker(s) and " +
                             std::to_string(pool_.capacity()) +
                             " queue slot(s) taken; retry later");
  }
  return result.get();  // rethrows the worker's HttpError
}

}  // namespace memoplan::serve
