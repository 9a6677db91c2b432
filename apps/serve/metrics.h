// The server's counters and the Prometheus text exposition (format 0.0.4) of GET /metrics:
// responses by status code, the infer latency histogram, inferences, queue gauges, resident
// memory and the LibTorch extension's plan statistics. Lock-free counters: every request
// updates them, /metrics only reads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "memoplan/torch/plan.h"

namespace memoplan::serve {

// What the pool and the model report at the moment /metrics is read.
struct Gauges {
  uint64_t queue_depth = 0;
  uint64_t queue_capacity = 0;
  int workers = 0;
  int busy_workers = 0;
  bool ready = false;
  // Per model (ModelMemory): plain weights resident, packed forms, slabs held by its workers, what
  // the memory limits charge it, and its memory_limit (0: none).
  uint64_t weights_plain_bytes = 0;
  uint64_t weights_packed_bytes = 0;
  uint64_t slab_bytes = 0;
  uint64_t charged_bytes = 0;
  uint64_t memory_limit_bytes = 0;
};

// Why the HTTP front end closed a connection (http_server.h lists the limits).
enum class ConnectionEnd {
  kClient,          // the client closed it, or asked to (Connection: close), or sent nothing more
  kIdleTimeout,     // no next request within the keep-alive timeout
  kHeaderTimeout,   // the request header was not complete by its deadline
  kBodyTimeout,     // the body came slower than the minimum rate
  kWriteTimeout,    // the client did not read its response at the minimum rate
  kEvicted,         // closed, idle or still without a request, to make room at the connection cap
  kRefused,         // closed at once: the connection cap, with nothing to evict
  kRefusedAddress,  // closed at once: the cap on connections from one client address
  kBadRequest,      // after an error answer that ends the connection (400, 413, 431)
  kStopped,         // the server was stopping
  kCount
};

class Metrics {
 public:
  // A model's metrics pass every inference, latency and batch observation on to the server's
  // (`parent`), which keeps the totals the unlabeled series show.
  explicit Metrics(Metrics* parent = nullptr) : parent_(parent) {}
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Upper bounds (seconds) of the latency histogram's buckets; +Inf is implied.
  static constexpr std::array<double, 14> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,    1,     2.5,  5,     10,   30};

  void count_response(int status);
  // A gRPC call answered, by its status code (grpc::StatusCode: 0 OK .. 16 UNAUTHENTICATED).
  void count_grpc(int code);
  // An infer request, from its body read to its response encoded, whatever its status.
  void observe_infer_latency(double seconds);
  // A forward call of a worker: its duration and whether it returned.
  void count_inference(double seconds, bool ok);
  // Dynamic batching: the rows of a batch sent to a worker, and each request's wait before it.
  void observe_batch(uint64_t rows);
  void observe_batch_queue_delay(double seconds);

  // HTTP connections: one accepted, one closed and why (the open ones are the difference).
  void connection_opened() { connections_opened_.fetch_add(1, std::memory_order_relaxed); }
  void connection_closed(ConnectionEnd why) {
    connections_closed_[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed);
  }

  std::string render(const Gauges& gauges, const torch_ext::PlanStats& plan) const;

  // Per model, labeled model="NAME": readiness, queue and workers, inferences, the infer latency
  // and batch size histograms (memoplan_model_* series), appended after render()'s.
  struct ModelView {
    std::string name;
    const Metrics* metrics;
    Gauges gauges;
  };
  static std::string render_models(const std::vector<ModelView>& models);

 private:
  Metrics* const parent_;
  std::array<std::atomic<uint64_t>, 600> responses_{};      // by status code (100-599)
  std::array<std::atomic<uint64_t>, 17> grpc_responses_{};  // by gRPC status code
  // A Prometheus histogram: counts per bucket (the last one +Inf), their number and their sum.
  // A histogram of seconds keeps its sum in nanoseconds and prints it in seconds; one of counts
  // (rows) keeps and prints integers.
  template <size_t N>
  struct Histogram {
    const std::array<double, N>& bounds;
    bool seconds;
    std::array<std::atomic<uint64_t>, N + 1> buckets{};
    std::atomic<uint64_t> count{0}, sum{0};
    void observe(double value);
    // The _bucket, _sum and _count samples of `name`, with `labels` ("" or `model="x"`) first.
    void render(std::string& out, const char* name, const std::string& labels) const;
  };
  static constexpr std::array<double, 8> kBatchBuckets = {1, 2, 3, 4, 8, 16, 32, 64};
  static constexpr std::array<double, 9> kDelayBuckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                          0.0025,  0.005,  0.01,    0.05};
  Histogram<kBuckets.size()> latency_{kBuckets, true};
  Histogram<kBatchBuckets.size()> batch_{kBatchBuckets, false};
  Histogram<kDelayBuckets.size()> delay_{kDelayBuckets, true};
  std::atomic<uint64_t> connections_opened_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(ConnectionEnd::kCount)>
      connections_closed_{};
  std::atomic<uint64_t> inferences_{0};
  std::atomic<uint64_t> inference_errors_{0};
  std::atomic<uint64_t> inference_ns_{0};
};

// VmRSS of this process in bytes (0 when /proc cannot be read).
uint64_t resident_bytes();

}  // namespace memoplan::serve
