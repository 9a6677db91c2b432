// The gRPC side: the KServe v2 protocol's GRPCInferenceService (ServerLive, ServerReady,
// ModelReady, ServerMetadata, ModelMetadata, ModelInfer; proto/kserve_v2.proto) on a port of its
// own, beside HTTP, on the same models, workers and queues. Errors answer with the protocol's
// status codes: INVALID_ARGUMENT (HTTP's 400), NOT_FOUND (404), UNAVAILABLE (503: busy or not
// ready), RESOURCE_EXHAUSTED (a message over the size limit), INTERNAL. Torch-free.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "metrics.h"
#include "model_registry.h"

namespace memoplan::serve {

struct GrpcOptions {
  size_t max_message = 64u << 20;  // bytes of a request message; larger get RESOURCE_EXHAUSTED
  // Threads that run calls (each ModelInfer call holds one while it waits for its worker).
  int threads = 8;
  std::string version;  // reported by ServerMetadata
  // The HTTP front end's limits where gRPC has them (docs/SERVE.md, Limits): the HTTP/2 handshake
  // and request metadata within header_timeout_s and max_header bytes; a connection without
  // calls for idle_timeout_s is closed (GOAWAY); at most max_streams calls at once per connection.
  double header_timeout_s = 10;
  double idle_timeout_s = 75;
  size_t max_header = 16u << 10;
  int max_streams = 100;
  // Keepalive enforcement: a client that pings more often than this without calls is sent
  // GOAWAY after two strikes; the server pings an idle peer after keepalive_s to find dead ones.
  double min_client_ping_s = 10;
  double keepalive_s = 60;
};

class GrpcServer {
 public:
  GrpcServer(const GrpcOptions& options, ModelRegistry& models, Metrics& metrics);
  ~GrpcServer();

  // Binds host:port (port 0: any free port) and starts serving; returns the port, or -1.
  int start(const std::string& host, int port);
  // Stops accepting calls; returns once the calls in flight have been answered.
  void stop();

 private:
  struct Impl;
  GrpcOptions options_;
  ModelRegistry& models_;
  Metrics& metrics_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memoplan::serve
