// The HTTP side: cpp-httplib's server with the KServe v2 routes (health, server and model
// metadata, infer), the repository extension (index, load, unload), GET /metrics, the protocol's
// JSON error body for every error, and the body size limit. Torch-free: the models are reached
// through the registry.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "metrics.h"
#include "model_registry.h"

namespace httplib {
class Server;
}

namespace memoplan::serve {

struct HttpOptions {
  size_t max_body = 64u << 20;  // bytes; larger requests get 413
  // Threads that read requests and wait for their inference; each open connection holds one
  // while it is open (keep-alive included), others wait for a free one.
  int threads = 8;
  std::string version;  // reported by GET /v2
  // The planning runtime's counters for /metrics (main.cc passes torch_ext::plan_stats; this half
  // of the server does not link the extension). Empty: all zero.
  std::function<torch_ext::PlanStats()> plan_stats;
};

class HttpServer {
 public:
  HttpServer(const HttpOptions& options, ModelRegistry& models, Metrics& metrics);
  ~HttpServer();

  // Binds host:port (port 0: any free port); returns the port, or -1 when it cannot.
  int bind(const std::string& host, int port);
  // Serves until stop(); false when the listening socket failed.
  bool run();
  bool running() const;
  // Stops accepting; run() returns once the requests being handled have been answered.
  void stop();

 private:
  void add_routes();

  HttpOptions options_;
  ModelRegistry& models_;
  Metrics& metrics_;
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace memoplan::serve
