// One infer request from body to response: decode (kserve_codec), check against the model
// (request_check), run on a worker through the bounded queue, encode. The HTTP thread that calls
// handle() waits for its worker; the queue, not the number of connections, bounds the work.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>

#include "batcher.h"
#include "kserve_codec.h"
#include "metrics.h"
#include "model.h"
#include "worker_pool.h"

namespace memoplan::serve {

struct InferReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::optional<size_t> header_length;  // Inference-Header-Content-Length, for binary outputs
};

class InferHandler {
 public:
  InferHandler(Model& model, WorkerPool& pool, Metrics& metrics, const std::atomic<bool>& ready)
      : model_(model), pool_(pool), metrics_(metrics), ready_(ready) {}

  // Never throws: errors become the protocol's {"error": ...} body with their status.
  InferReply handle(std::string_view body, const std::string& header_length_field);

  // The protocol-neutral part, for HTTP and gRPC alike: checks the decoded request against the
  // model (its inputs moved out, in forward's order), runs it on a worker and returns every output
  // of the model in order; `spec` is the model's signature it was checked against. Throws
  // HttpError (400 bad request, 503 busy or not ready).
  std::vector<HostTensor> infer(InferRequest& request, ModelSpec& spec);

  Model& model() { return model_; }
  // Dynamic batching: infer() hands checked requests to `batcher` instead of the pool (null: off).
  void set_batcher(Batcher* batcher) { batcher_ = batcher; }
  // The largest dimensions each input may have (-1: any; an empty entry or list: no limit);
  // larger requests are answered 400 before they take a queue slot.
  void set_max_dims(std::vector<std::vector<int64_t>> max_dims) { max_dims_ = std::move(max_dims); }

 private:
  InferReply run(std::string_view body, const std::string& header_length_field);
  void check_ready() const;  // HttpError 503 until the model is planned

  Model& model_;
  WorkerPool& pool_;
  Metrics& metrics_;
  const std::atomic<bool>& ready_;
  Batcher* batcher_ = nullptr;
  std::vector<std::vector<int64_t>> max_dims_;
};

}  // namespace memoplan::serve
