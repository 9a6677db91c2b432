#include "http_routes.h"

#include <nlohmann/json.hpp>

#include <vector>

#include "http_error.h"
#include "kserve_codec.h"

namespace memoplan::serve {
namespace {

constexpr const char* kJson = "application/json";

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The path of `target` (the query dropped) split at '/', each segment percent-decoded: an
// encoded '/' stays inside its segment. Throws HttpError 400 for an invalid escape.
std::vector<std::string> path_segments(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  std::vector<std::string> segments;
  size_t begin = path.empty() || path[0] != '/' ? 0 : 1;
  while (begin <= path.size()) {
    size_t end = path.find('/', begin);
    if (end == std::string_view::npos) end = path.size();
    std::string segment;
    for (size_t i = begin; i < end; ++i) {
      if (path[i] != '%') {
        segment += path[i];
        continue;
      }
      const int hi = i + 2 < end ? hex_digit(path[i + 1]) : -1;
      const int lo = hi >= 0 ? hex_digit(path[i + 2]) : -1;
      if (lo < 0) throw bad_request("invalid percent-escape in the request path");
      segment += static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    segments.push_back(std::move(segment));
    begin = end + 1;
  }
  return segments;
}

// /v2/models/NAME[/versions/VERSION][/SUFFIX]: name, version and suffix ("" for metadata), or
// false for another path.
struct ModelPath {
  std::string name, version, suffix;
};
bool model_path(const std::vector<std::string>& s, ModelPath& out) {
  if (s.size() < 3 || s[0] != "v2" || s[1] != "models" || s[2].empty()) return false;
  size_t next = 3;
  out.name = s[2];
  if (s.size() >= 5 && s[3] == "versions" && !s[4].empty()) {
    out.version = s[4];
    next = 5;
  }
  if (s.size() == next) return true;
  if (s.size() == next + 1 && (s[next] == "ready" || s[next] == "infer")) {
    out.suffix = s[next];
    return true;
  }
  return false;
}

bool is(const std::vector<std::string>& s, std::initializer_list<const char*> path) {
  if (s.size() != path.size()) return false;
  size_t i = 0;
  for (const char* p : path) {
    if (s[i++] != p) return false;
  }
  return true;
}

HttpReply ok(std::string body = "", const char* content_type = kJson) {
  HttpReply r;
  r.body = std::move(body);
  r.content_type = r.body.empty() ? "" : content_type;
  return r;
}

}  // namespace

HttpRoutes::HttpRoutes(std::string version, ModelRegistry& models, Metrics& metrics,
                       std::function<torch_ext::PlanStats()> plan_stats)
    : version_(std::move(version)),
      models_(models),
      metrics_(metrics),
      plan_stats_(std::move(plan_stats)) {}

HttpReply HttpRoutes::error(int status, const std::string& message) {
  HttpReply r;
  r.status = status;
  r.body = encode_error(message);
  r.content_type = kJson;
  return r;
}

bool HttpRoutes::blocking(std::string_view method, std::string_view target) {
  if (method != "POST") return false;
  const std::string_view path = target.substr(0, target.find('?'));
  auto ends_with = [path](std::string_view tail) {
    return path.size() >= tail.size() && path.substr(path.size() - tail.size()) == tail;
  };
  return ends_with("/infer") || ends_with("/load") || ends_with("/unload");
}

HttpReply HttpRoutes::handle(const HttpRequest& request) const {
  try {
    return route(request);
  } catch (const HttpError& e) {
    return error(e.status(), e.what());
  } catch (const std::exception& e) {
    return error(500, std::string("internal error: ") + e.what());
  } catch (...) {
    return error(500, "internal error");
  }
}

HttpReply HttpRoutes::route(const HttpRequest& request) const {
  const std::vector<std::string> s = path_segments(request.target);
  const bool get = request.method == "GET" || request.method == "HEAD";
  const bool post = request.method == "POST";
  ModelPath m;
  if (get) {
    if (is(s, {"v2", "health", "live"})) return ok();
    if (is(s, {"v2", "health", "ready"})) {
      if (models_.all_ready()) return ok();
      return error(400, "not every model is loaded and planned yet");
    }
    if (is(s, {"v2"})) return ok(encode_server_metadata(version_));
    if (is(s, {"metrics"})) return metrics_text();
    if (model_path(s, m) && m.suffix != "infer") {
      const std::shared_ptr<ServedModel> model = models_.get(m.name, m.version);  // 404
      if (m.suffix == "ready") {
        if (model->ready()) return ok();
        return error(400, "model '" + model->name() + "' is not ready yet");
      }
      const ModelMemory memory = model->memory();
      return ok(encode_model_metadata(model->model().spec(), &memory, model->config().workers));
    }
  } else if (post) {
    if (model_path(s, m) && m.suffix == "infer") {
      const std::shared_ptr<ServedModel> model =
          models_.get(m.name, m.version);  // held till answered
      return model->handler().handle(request.body, request.inference_header_length);
    }
    if (is(s, {"v2", "repository", "index"})) return repository_index(request.body);
    if (s.size() == 5 && is({s[0], s[1], s[2]}, {"v2", "repository", "models"}) &&
        (s[4] == "load" || s[4] == "unload")) {
      if (s[4] == "load") {
        models_.load(s[3]);
      } else {
        models_.unload(s[3]);
      }
      return ok();
    }
  } else if (request.method != "PUT" && request.method != "PATCH" && request.method != "DELETE") {
    return error(405, "method " + request.method + " is not served (GET, HEAD, POST)");
  }
  const std::string_view target = request.target;
  return error(404, "no route for " + request.method + " " +
                        std::string(target.substr(0, target.find('?'))));
}

HttpReply HttpRoutes::repository_index(const std::string& body) const {
  bool ready_only = false;
  if (!body.empty()) {
    const nlohmann::json request = nlohmann::json::parse(body, nullptr, false);
    if (request.is_discarded() || !request.is_object()) {
      return error(400, "malformed JSON: the index request body must be an object");
    }
    if (request.contains("ready")) {
      if (!request["ready"].is_boolean()) return error(400, "\"ready\" must be true or false");
      ready_only = request["ready"].get<bool>();
    }
  }
  nlohmann::json index = nlohmann::json::array();
  for (const ModelRegistry::IndexEntry& e : models_.index()) {
    if (ready_only && e.state != "READY") continue;
    nlohmann::json entry = {{"name", e.name}, {"version", e.version}, {"state", e.state}};
    if (!e.reason.empty()) entry["reason"] = e.reason;
    index.push_back(std::move(entry));
  }
  return ok(index.dump());
}

HttpReply HttpRoutes::metrics_text() const {
  Gauges g;
  g.ready = true;
  std::vector<Metrics::ModelView> views;
  const std::vector<std::shared_ptr<ServedModel>> models = models_.models();
  for (const auto& model : models) {
    const Gauges m = model->gauges();
    g.queue_depth += m.queue_depth;
    g.queue_capacity += m.queue_capacity;
    g.workers += m.workers;
    g.busy_workers += m.busy_workers;
    g.ready = g.ready && m.ready;
    g.charged_bytes += m.charged_bytes;
    views.push_back({model->name(), &model->metrics(), m});
  }
  g.memory_limit_bytes = models_.memory_limit();
  g.ready = g.ready && !models.empty();
  const torch_ext::PlanStats plan = plan_stats_ ? plan_stats_() : torch_ext::PlanStats{};
  return ok(metrics_.render(g, plan) + Metrics::render_models(views),
            "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace memoplan::serve
