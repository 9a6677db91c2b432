// The HTTP side: an event-driven HTTP/1.1 front end (Boost.Beast over one Asio event loop) in
// front of the routes (http_routes.h). A connection costs its socket and a few kilobytes, not a
// thread: the event loop reads every request whole under the limits below and answers the cheap
// ones itself; infer and repository calls go to the handler threads, which wait for the model's
// workers. Keep-alive and pipelined requests are answered in order. Torch-free.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "metrics.h"
#include "model_registry.h"

namespace memoplan::serve {

// What bounds a client (docs/SERVE.md, Limits; each has a memoplan-serve flag).
struct HttpLimits {
  // The whole request header (request line and fields) must arrive within this many seconds of
  // the connection's accept or of the first byte after a keep-alive wait; a byte now and then does
  // not extend it. Also the grace before the minimum rate applies to a body or a response.
  double header_timeout_s = 10;
  // A keep-alive connection may wait this long for its next request (nginx: 75 s; above the
  // 60 s idle timeout of the common load balancers, so that they close first).
  double idle_timeout_s = 75;
  // Bytes per second a request body must average, and a client must read its response at, after
  // the header_timeout_s grace; slower ones are closed. 0: no minimum (not recommended).
  size_t min_rate = 4096;
  size_t max_header =
      16u << 10;  // request line and fields; larger get 431 Request Header Fields Too Large
  size_t max_body = 64u << 20;  // larger get 413, Content-Length or chunked
  // Bytes of request bodies held at once, being received or handled (a Content-Length counts
  // when its header arrives); a request past it gets 503. 0: 8 x max_body.
  uint64_t max_buffered = 0;
  // Connections open at once. At the cap a new one closes the oldest idle keep-alive connection,
  // else the oldest that has not sent a whole request header yet, else it is refused.
  size_t max_connections = 10000;
  // From one client address; 0: half of max_connections (one client cannot fill the server).
  size_t max_connections_per_address = 0;
};

struct HttpOptions {
  HttpLimits limits;
  // Handler threads: each runs one infer or repository call at a time (decode, wait for the
  // worker, encode); when all are taken and as many requests again wait, requests get 503.
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

  // Binds host:port (port 0: any free port); returns the port, or -1 when it cannot. Raises the
  // process's open-file limit to its hard limit: every connection is a descriptor.
  int bind(const std::string& host, int port);
  // The connection cap in force: max_connections, lowered to fit the open-file limit.
  size_t max_connections() const;
  // Serves until stop(); false when the listening socket failed.
  bool run();
  bool running() const;
  // Stops accepting and closes connections that wait for a request; run() returns once the
  // requests being handled have been answered. Any thread; idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memoplan::serve
