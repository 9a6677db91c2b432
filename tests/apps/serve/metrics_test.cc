// memoplan-serve's Prometheus text: responses by code, a cumulative latency histogram, gauges
// and the extension's plan statistics.
#include <gtest/gtest.h>

#include "metrics.h"

namespace memoplan::serve {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(Metrics, RendersPrometheusText) {
  Metrics m;
  m.count_response(200);
  m.count_response(200);
  m.count_response(503);
  m.count_response(42);  // not a status: ignored
  m.observe_infer_latency(0.003);
  m.observe_infer_latency(0.2);
  m.observe_infer_latency(100);
  m.count_inference(0.25, true);
  m.count_inference(0.25, false);
  Gauges g;
  g.queue_depth = 3;
  g.queue_capacity = 8;
  g.workers = 2;
  g.busy_workers = 1;
  g.ready = true;
  torch_ext::PlanStats plan;
  plan.planned_hits = 11;
  plan.fallback_escaping = 2;
  plan.slab_bytes = 4096;
  const std::string text = "\n" + m.render(g, plan);
  EXPECT_TRUE(has_line(text, "# TYPE memoplan_serve_http_responses_total counter"));
  EXPECT_TRUE(has_line(text, R"(memoplan_serve_http_responses_total{code="200"} 2)"));
  EXPECT_TRUE(has_line(text, R"(memoplan_serve_http_responses_total{code="503"} 1)"));
  EXPECT_EQ(text.find(R"(code="42")"), std::string::npos);
  EXPECT_TRUE(
      has_line(text, R"(memoplan_serve_infer_request_duration_seconds_bucket{le="0.001"} 0)"));
  EXPECT_TRUE(
      has_line(text, R"(memoplan_serve_infer_request_duration_seconds_bucket{le="0.005"} 1)"));
  EXPECT_TRUE(
      has_line(text, R"(memoplan_serve_infer_request_duration_seconds_bucket{le="0.25"} 2)"));
  EXPECT_TRUE(has_line(text, R"(memoplan_serve_infer_request_duration_seconds_bucket{le="30"} 2)"));
  EXPECT_TRUE(
      has_line(text, R"(memoplan_serve_infer_request_duration_seconds_bucket{le="+Inf"} 3)"));
  EXPECT_TRUE(has_line(text, "memoplan_serve_infer_request_duration_seconds_count 3"));
  EXPECT_TRUE(has_line(text, "memoplan_serve_infer_request_duration_seconds_sum 100.203000"));
  EXPECT_TRUE(has_line(text, "memoplan_serve_inferences_total 1"));
  EXPECT_TRUE(has_line(text, "memoplan_serve_inference_errors_total 1"));
  EXPECT_TRUE(has_line(text, "memoplan_serve_queue_depth 3"));
  EXPECT_TRUE(has_line(text, "memoplan_serve_workers_busy 1"));
  EXPECT_TRUE(has_line(text, "memoplan_serve_ready 1"));
  EXPECT_TRUE(has_line(text, "memoplan_planned_allocations_total 11"));
  EXPECT_TRUE(has_line(text, R"(memoplan_fallback_allocations_total{reason="escaping"} 2)"));
  EXPECT_TRUE(has_line(text, "memoplan_slab_bytes_total 4096"));
  EXPECT_GT(resident_bytes(), 0u);
}

}  // namespace
}  // namespace memoplan::serve
