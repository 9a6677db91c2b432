// What the HTTP front end answers, apart from how it reads and writes: the KServe v2 routes
// (health, server and model metadata, infer), the repository extension (index, load, unload),
// GET /metrics and the protocol's JSON error body for every error. A request comes in whole (its
// body read under the limits by http_connection); a reply goes out whole. No socket, no HTTP
// library: the event loop (http_server) and the unit tests call it alike. Torch-free: the models
// are reached through the registry.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "infer_handler.h"
#include "metrics.h"
#include "model_registry.h"

namespace memoplan::serve {

struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ... (HEAD is answered as GET, without a body)
  std::string target;  // the request target: percent-encoded path, then an optional ?query
  std::string body;
  std::string inference_header_length;  // the Inference-Header-Content-Length field, or empty
};

// Status, body, content type and the binary extension's header length: an infer reply's fields.
using HttpReply = InferReply;

class HttpRoutes {
 public:
  HttpRoutes(std::string version, ModelRegistry& models, Metrics& metrics,
             std::function<torch_ext::PlanStats()> plan_stats);

  // Whether answering may wait on something slow (an inference, a model's load): such requests
  // go to the handler threads, every other one is answered on the event loop.
  static bool blocking(std::string_view method, std::string_view target);

  // Never throws: every failure becomes the protocol's {"error": ...} body with its status.
  HttpReply handle(const HttpRequest& request) const;

  static HttpReply error(int status, const std::string& message);

 private:
  HttpReply route(const HttpRequest& request) const;
  HttpReply metrics_text() const;
  HttpReply repository_index(const std::string& body) const;

  std::string version_;
  ModelRegistry& models_;
  Metrics& metrics_;
  std::function<torch_ext::PlanStats()> plan_stats_;
};

}  // namespace memoplan::serve
