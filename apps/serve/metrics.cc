#include "metrics.h"

#include <fmt/format.h>

#include <iterator>
#include <tuple>

#include "memoplan/process_status.h"

namespace memoplan::serve {
namespace {

uint64_t nanoseconds(double seconds) { return static_cast<uint64_t>(seconds * 1e9); }

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, const char* name, uint64_t value, const std::string& labels = "") {
  out += fmt::format("{}{} {}\n", name, labels.empty() ? "" : "{" + labels + "}", value);
}

void metric(std::string& out, const char* name, const char* type, const char* help,
            uint64_t value) {
  header(out, name, type, help);
  sample(out, name, value);
}

}  // namespace

void Metrics::count_response(int status) {
  if (status >= 100 && status < static_cast<int>(responses_.size())) {
    responses_[status].fetch_add(1, std::memory_order_relaxed);
  }
}

void Metrics::count_grpc(int code) {
  if (code >= 0 && code < static_cast<int>(grpc_responses_.size())) {
    grpc_responses_[static_cast<size_t>(code)].fetch_add(1, std::memory_order_relaxed);
  }
}

template <size_t N>
void Metrics::Histogram<N>::observe(double value) {
  size_t bucket = 0;
  while (bucket < N && value > bounds[bucket]) ++bucket;
  buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  sum.fetch_add(seconds ? nanoseconds(value) : static_cast<uint64_t>(value),
                std::memory_order_relaxed);
  count.fetch_add(1, std::memory_order_relaxed);
}

template <size_t N>
void Metrics::Histogram<N>::render(std::string& out, const char* name,
                                   const std::string& labels) const {
  const std::string first = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= N; ++i) {
    cumulative += buckets[i].load(std::memory_order_relaxed);
    const std::string le = i == N    ? "+Inf"
                           : seconds ? fmt::format("{}", bounds[i])
                                     : std::to_string(static_cast<uint64_t>(bounds[i]));
    out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, first, le, cumulative);
  }
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  const uint64_t total = sum.load(std::memory_order_relaxed);
  if (seconds) {
    out += fmt::format("{}_sum{} {:.6f}\n", name, braces, total / 1e9);
  } else {
    out += fmt::format("{}_sum{} {}\n", name, braces, total);
  }
  out += fmt::format("{}_count{} {}\n", name, braces, count.load(std::memory_order_relaxed));
}

void Metrics::observe_batch(uint64_t rows) {
  batch_.observe(static_cast<double>(rows));
  if (parent_) parent_->observe_batch(rows);
}

void Metrics::observe_batch_queue_delay(double seconds) {
  delay_.observe(seconds);
  if (parent_) parent_->observe_batch_queue_delay(seconds);
}

void Metrics::observe_infer_latency(double seconds) {
  latency_.observe(seconds);
  if (parent_) parent_->observe_infer_latency(seconds);
}

void Metrics::count_inference(double seconds, bool ok) {
  (ok ? inferences_ : inference_errors_).fetch_add(1, std::memory_order_relaxed);
  inference_ns_.fetch_add(nanoseconds(seconds), std::memory_order_relaxed);
  if (parent_) parent_->count_inference(seconds, ok);
}

std::string Metrics::render(const Gauges& gauges, const torch_ext::PlanStats& plan) const {
  std::string out;
  header(out, "memoplan_serve_http_responses_total", "counter",
         "HTTP responses sent, by status code.");
  for (size_t code = 100; code < responses_.size(); ++code) {
    const uint64_t n = responses_[code].load(std::memory_order_relaxed);
    if (n) sample(out, "memoplan_serve_http_responses_total", n, fmt::format("code=\"{}\"", code));
  }

  // The protocol's names of gRPC's status codes, by number.
  static constexpr const char* kGrpcCodes[] = {"OK",
                                               "CANCELLED",
                                               "UNKNOWN",
                                               "INVALID_ARGUMENT",
                                               "DEADLINE_EXCEEDED",
                                               "NOT_FOUND",
                                               "ALREADY_EXISTS",
                                               "PERMISSION_DENIED",
                                               "RESOURCE_EXHAUSTED",
                                               "FAILED_PRECONDITION",
                                               "ABORTED",
                                               "OUT_OF_RANGE",
                                               "UNIMPLEMENTED",
                                               "INTERNAL",
                                               "UNAVAILABLE",
                                               "DATA_LOSS",
                                               "UNAUTHENTICATED"};
  static_assert(std::size(kGrpcCodes) == std::tuple_size_v<decltype(grpc_responses_)>);
  header(out, "memoplan_serve_grpc_responses_total", "counter",
         "gRPC calls answered, by status code.");
  for (size_t code = 0; code < grpc_responses_.size(); ++code) {
    const uint64_t n = grpc_responses_[code].load(std::memory_order_relaxed);
    if (n) {
      sample(out, "memoplan_serve_grpc_responses_total", n,
             fmt::format("code=\"{}\"", kGrpcCodes[code]));
    }
  }

  static constexpr const char* kConnectionEnds[] = {
      "client",  "idle_timeout", "header_timeout",  "body_timeout", "write_timeout",
      "evicted", "refused",      "refused_address", "bad_request",  "stopped"};
  static_assert(std::size(kConnectionEnds) == std::tuple_size_v<decltype(connections_closed_)>);
  const uint64_t opened = connections_opened_.load(std::memory_order_relaxed);
  uint64_t closed = 0;
  for (const auto& n : connections_closed_) closed += n.load(std::memory_order_relaxed);
  metric(out, "memoplan_serve_http_connections", "gauge", "HTTP connections open now.",
         opened >= closed ? opened - closed : 0);
  metric(out, "memoplan_serve_http_connections_opened_total", "counter",
         "HTTP connections accepted (those refused at once included).", opened);
  header(out, "memoplan_serve_http_connections_closed_total", "counter",
         "HTTP connections closed, by why (docs/SERVE.md, Limits).");
  for (size_t i = 0; i < connections_closed_.size(); ++i) {
    sample(out, "memoplan_serve_http_connections_closed_total",
           connections_closed_[i].load(std::memory_order_relaxed),
           fmt::format("reason=\"{}\"", kConnectionEnds[i]));
  }

  header(out, "memoplan_serve_infer_request_duration_seconds", "histogram",
         "Infer requests from body received to response encoded (queue wait included).");
  latency_.render(out, "memoplan_serve_infer_request_duration_seconds", "");
  header(out, "memoplan_batch_size", "histogram",
         "Dynamic batching: rows per forward call of a batch sent to a worker.");
  batch_.render(out, "memoplan_batch_size", "");
  header(out, "memoplan_batch_queue_delay_seconds", "histogram",
         "Dynamic batching: how long each request waited for its batch to go to a worker.");
  delay_.render(out, "memoplan_batch_queue_delay_seconds", "");

  metric(out, "memoplan_serve_inferences_total", "counter", "Forward calls that returned.",
         inferences_.load(std::memory_order_relaxed));
  metric(out, "memoplan_serve_inference_errors_total", "counter",
         "Forward calls that threw (answered 400).",
         inference_errors_.load(std::memory_order_relaxed));
  header(out, "memoplan_serve_inference_seconds_total", "counter",
         "Time the workers spent in forward calls.");
  out += fmt::format("memoplan_serve_inference_seconds_total {:.6f}\n",
                     inference_ns_.load(std::memory_order_relaxed) / 1e9);

  metric(out, "memoplan_serve_queue_depth", "gauge", "Infer requests waiting for a worker.",
         gauges.queue_depth);
  metric(out, "memoplan_serve_queue_capacity", "gauge",
         "Requests that may wait before the server answers 503.", gauges.queue_capacity);
  metric(out, "memoplan_serve_workers", "gauge", "Inference worker threads.", gauges.workers);
  metric(out, "memoplan_serve_workers_busy", "gauge", "Workers running a forward call now.",
         gauges.busy_workers);
  metric(out, "memoplan_serve_ready", "gauge", "1 once the model is loaded and planned.",
         gauges.ready ? 1 : 0);
  metric(out, "memoplan_serve_resident_memory_bytes", "gauge", "VmRSS of the server process.",
         resident_bytes());
  metric(out, "memoplan_serve_models_memory_bytes", "gauge",
         "What the memory limit charges the loaded models: their weights, plain and packed, and a "
         "slab per worker (memoplan_model_memory_charged_bytes summed).",
         gauges.charged_bytes);
  metric(out, "memoplan_serve_memory_limit_bytes", "gauge",
         "--memory-limit: what all models together may be charged (0: no limit).",
         gauges.memory_limit_bytes);

  // The LibTorch extension's process-wide counters (memoplan::torch_ext::plan_stats()).
  header(out, "memoplan_passes_total", "counter",
         "Forward passes of the planned module, by how they ran.");
  sample(out, "memoplan_passes_total", plan.planned_passes, "kind=\"planned\"");
  sample(out, "memoplan_passes_total", plan.profiled_passes, "kind=\"profiled\"");
  sample(out, "memoplan_passes_total", plan.unplanned_passes, "kind=\"unplanned\"");
  metric(out, "memoplan_plans_total", "counter", "Plans made (one per input key).", plan.plans);
  metric(out, "memoplan_family_plans_total", "counter",
         "Plans of new input shapes made from their shape family's formulas, without profiling.",
         plan.family_plans);
  metric(out, "memoplan_family_mispredictions_total", "counter",
         "Passes that missed such a plan (the plan dropped, its shape profiled).",
         plan.family_mispredictions);
  metric(out, "memoplan_planned_allocations_total", "counter",
         "Tensor allocations served from a slab at their planned offset.", plan.planned_hits);
  header(out, "memoplan_fallback_allocations_total", "counter",
         "Tensor allocations of planned passes that went to the default allocator, by reason.");
  sample(out, "memoplan_fallback_allocations_total", plan.fallback_not_planned,
         "reason=\"not_planned\"");
  sample(out, "memoplan_fallback_allocations_total", plan.fallback_escaping, "reason=\"escaping\"");
  sample(out, "memoplan_fallback_allocations_total", plan.fallback_overlap, "reason=\"overlap\"");
  metric(out, "memoplan_tensor_mallocs_total", "counter",
         "Non-empty tensor allocations during passes that reached the system allocator.",
         plan.tensor_mallocs);
  metric(out, "memoplan_slabs_total", "counter",
         "Slabs created (one per worker thread and plan; kept while the worker lives).",
         plan.slabs);
  metric(out, "memoplan_slab_bytes_total", "counter", "Bytes of the slabs created.",
         plan.slab_bytes);
  metric(out, "memoplan_slab_bytes_max", "gauge", "The largest slab a worker thread has held.",
         plan.slab_bytes_max);
  return out;
}

std::string Metrics::render_models(const std::vector<ModelView>& models) {
  std::string out;
  if (models.empty()) return out;
  auto label = [](const ModelView& m) { return fmt::format("model=\"{}\"", m.name); };
  auto gauge = [&](const char* name, const char* help, auto value_of) {
    header(out, name, "gauge", help);
    for (const ModelView& m : models) sample(out, name, value_of(m), label(m));
  };
  gauge("memoplan_model_ready", "1 once the model is loaded and planned.",
        [](const ModelView& m) { return uint64_t{m.gauges.ready}; });
  gauge("memoplan_model_queue_depth", "Infer requests of the model waiting for a worker or batch.",
        [](const ModelView& m) { return m.gauges.queue_depth; });
  gauge("memoplan_model_workers", "The model's inference worker threads.",
        [](const ModelView& m) { return static_cast<uint64_t>(m.gauges.workers); });
  header(out, "memoplan_model_memory_bytes", "gauge",
         "What the model holds now: part=\"weights_plain\" its weights' resident pages, "
         "\"weights_packed\" the tuned kernels' packed forms, \"slabs\" its workers' slabs.");
  for (const ModelView& m : models) {
    sample(out, "memoplan_model_memory_bytes", m.gauges.weights_plain_bytes,
           label(m) + ",part=\"weights_plain\"");
    sample(out, "memoplan_model_memory_bytes", m.gauges.weights_packed_bytes,
           label(m) + ",part=\"weights_packed\"");
    sample(out, "memoplan_model_memory_bytes", m.gauges.slab_bytes, label(m) + ",part=\"slabs\"");
  }
  gauge("memoplan_model_memory_charged_bytes",
        "What the memory limits charge the model: its weights and a slab per worker.",
        [](const ModelView& m) { return m.gauges.charged_bytes; });
  gauge("memoplan_model_memory_limit_bytes", "The model's memory_limit (0: none).",
        [](const ModelView& m) { return m.gauges.memory_limit_bytes; });
  header(out, "memoplan_model_inferences_total", "counter",
         "The model's forward calls that returned.");
  for (const ModelView& m : models) {
    sample(out, "memoplan_model_inferences_total",
           m.metrics->inferences_.load(std::memory_order_relaxed), label(m));
  }
  header(out, "memoplan_model_inference_errors_total", "counter",
         "The model's forward calls that threw.");
  for (const ModelView& m : models) {
    sample(out, "memoplan_model_inference_errors_total",
           m.metrics->inference_errors_.load(std::memory_order_relaxed), label(m));
  }
  header(out, "memoplan_model_infer_request_duration_seconds", "histogram",
         "The model's infer requests from body received to response encoded.");
  for (const ModelView& m : models) {
    m.metrics->latency_.render(out, "memoplan_model_infer_request_duration_seconds", label(m));
  }
  header(out, "memoplan_model_batch_size", "histogram",
         "Dynamic batching: rows per forward call of the model's batches.");
  for (const ModelView& m : models) {
    m.metrics->batch_.render(out, "memoplan_model_batch_size", label(m));
  }
  return out;
}

uint64_t resident_bytes() { return status_bytes("VmRSS"); }

}  // namespace memoplan::serve
