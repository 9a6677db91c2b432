// The HTTP side: cpp-httplib's server with the KServe v2 routes (health, server and model
// metadata, infer), GET /metrics, the protocol's JSON error body for every error, and the body
// size limit. Torch-free: the model is reached through model.h and the infer handler.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "infer_handler.h"
#include "metrics.h"
#include "model.h"
#include "worker_pool.h"

namespace httplib {
class Server;
}

namespace memoplan::serve {

struct HttpOptions {
  std::string model_name;
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
  HttpServer(const HttpOptions& options, Model& model, WorkerPool& pool, Metrics& metrics);
  ~HttpServer();

  // Binds host:port (port 0: any free port); returns the port, or -1 when it cannot.
  int bind(const std::string& host, int port);
  // Serves until stop(); false when the listening socket failed.
  bool run();
  bool running() const;
  // Stops accepting; run() returns once the requests being handled have been answered.
  void stop();
  void set_ready() { ready_.store(true, std::memory_order_release); }
  InferHandler& infer_handler() { return infer_; }

 private:
  void add_routes();

  HttpOptions options_;
  Model& model_;
  WorkerPool& pool_;
  Metrics& metrics_;
  std::atomic<bool> ready_{false};
  InferHandler infer_;
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace memoplan::serve
