#include "http_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "http_error.h"
#include "kserve_codec.h"

namespace memoplan::serve {
namespace {

constexpr const char* kJson = "application/json";
// /v2/models/NAME and /v2/models/NAME/versions/VERSION, then the route's own suffix.
constexpr const char* kModelPath = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(encode_error(message), kJson);
}

// Reads the body through the content reader, keeping at most max_body bytes: Content-Length
// bodies over the limit are refused by httplib itself (set_payload_max_length), chunked ones
// here. Either way the rest is read and dropped, so the connection stays usable. False, with the
// error reply set, when the body is too large or could not be read.
bool read_body(const httplib::ContentReader& reader, size_t max_body, httplib::Response& res,
               std::string& body) {
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t n) {
    if (!too_large && n <= max_body - body.size()) {
      body.append(data, n);
    } else if (!too_large) {
      too_large = true;
      std::string().swap(body);
    }
    return true;
  });
  if (too_large || res.status == 413) {
    reply_error(res, 413,
                "request body larger than the server's limit of " + std::to_string(max_body) +
                    " bytes (--max-body)");
    return false;
  }
  if (!read) {
    reply_error(res, 400, "the request body could not be read");
    return false;
  }
  return true;
}

const char* reason(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 404:
      return "not found";
    case 405:
      return "method not allowed";
    case 413:
      return "request body too large";
    case 414:
      return "request URI too long";
    default:
      return "error";
  }
}

}  // namespace

HttpServer::HttpServer(const HttpOptions& options, ModelRegistry& models, Metrics& metrics)
    : options_(options),
      models_(models),
      metrics_(metrics),
      server_(std::make_unique<httplib::Server>()) {
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body);
  // Without it, Nagle's algorithm holds the body segment after the header segment for the
  // client's delayed ACK: 40 ms on every response.
  server_->set_tcp_nodelay(true);
  server_->set_keep_alive_max_count(1000);
  add_routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind(const std::string& host, int port) {
  if (port == 0) return server_->bind_to_any_port(host);
  return server_->bind_to_port(host, port) ? port : -1;
}

bool HttpServer::run() { return server_->listen_after_bind(); }
bool HttpServer::running() const { return server_->is_running(); }
void HttpServer::stop() { server_->stop(); }

void HttpServer::add_routes() {
  httplib::Server& s = *server_;
  // The model the path names (and its one version), or null with 404 answered.
  auto served = [this](const httplib::Request& req,
                       httplib::Response& res) -> std::shared_ptr<ServedModel> {
    try {
      return models_.get(req.matches[1], req.matches.size() > 2 ? req.matches[2].str() : "");
    } catch (const HttpError& e) {
      reply_error(res, e.status(), e.what());
      return nullptr;
    }
  };

  s.Get("/v2/health/live",
        [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  s.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
    if (models_.all_ready()) {
      res.status = 200;
    } else {
      reply_error(res, 400, "not every model is loaded and planned yet");
    }
  });
  s.Get("/v2", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(encode_server_metadata(options_.version), kJson);
  });
  s.Get(std::string(kModelPath) + "/ready",
        [served](const httplib::Request& req, httplib::Response& res) {
          const std::shared_ptr<ServedModel> model = served(req, res);
          if (!model) return;
          if (model->ready()) {
            res.status = 200;
          } else {
            reply_error(res, 400, "model '" + model->name() + "' is not ready yet");
          }
        });
  s.Get(kModelPath, [served](const httplib::Request& req, httplib::Response& res) {
    if (const auto model = served(req, res)) {
      const ModelMemory memory = model->memory();
      res.set_content(encode_model_metadata(model->model().spec(), &memory,
                                            model->config().workers),
                      kJson);
    }
  });
  s.Post(std::string(kModelPath) + "/infer", [this, served](const httplib::Request& req,
                                                            httplib::Response& res,
                                                            const httplib::ContentReader& reader) {
    std::string body;
    if (!read_body(reader, options_.max_body, res, body)) return;
    const std::shared_ptr<ServedModel> model = served(req, res);  // held until answered
    if (!model) return;
    const InferReply reply =
        model->handler().handle(body, req.get_header_value("Inference-Header-Content-Length"));
    res.status = reply.status;
    if (reply.header_length) {
      res.set_header("Inference-Header-Content-Length", std::to_string(*reply.header_length));
    }
    res.set_content(reply.body, reply.content_type.c_str());
  });

  // The repository extension: index, load, unload.
  s.Post("/v2/repository/index", [this](const httplib::Request&, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
    std::string body;
    if (!read_body(reader, options_.max_body, res, body)) return;
    bool ready_only = false;
    if (!body.empty()) {
      const nlohmann::json request = nlohmann::json::parse(body, nullptr, false);
      if (request.is_discarded() || !request.is_object()) {
        reply_error(res, 400, "malformed JSON: the index request body must be an object");
        return;
      }
      if (request.contains("ready")) {
        if (!request["ready"].is_boolean()) {
          reply_error(res, 400, "\"ready\" must be true or false");
          return;
        }
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
    res.set_content(index.dump(), kJson);
  });
  auto repository_call = [this](bool load) {
    return [this, load](const httplib::Request& req, httplib::Response& res,
                        const httplib::ContentReader& reader) {
      std::string body;
      if (!read_body(reader, options_.max_body, res, body)) return;
      try {
        if (load) {
          models_.load(req.matches[1]);
        } else {
          models_.unload(req.matches[1]);
        }
        res.status = 200;
      } catch (const HttpError& e) {
        reply_error(res, e.status(), e.what());
      }
    };
  };
  s.Post(R"(/v2/repository/models/([^/]+)/load)", repository_call(true));
  s.Post(R"(/v2/repository/models/([^/]+)/unload)", repository_call(false));

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
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
    const torch_ext::PlanStats plan =
        options_.plan_stats ? options_.plan_stats() : torch_ext::PlanStats{};
    res.set_content(metrics_.render(g, plan) + Metrics::render_models(views),
                    "text/plain; version=0.0.4; charset=utf-8");
  });

  // Bodies sent to any other path are read under the same limit (a chunked upload would
  // otherwise be read whole into memory first), then answered 404.
  auto drain = [this](const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader& reader) {
    std::string body;
    if (read_body(reader, options_.max_body, res, body)) {
      reply_error(res, 404, "no route for " + req.method + " " + req.path);
    }
  };
  s.Post(".*", drain);
  s.Put(".*", drain);
  s.Patch(".*", drain);
  s.Delete(".*", drain);

  // Every error the handlers did not describe (unknown paths, httplib's own 400/413) gets the
  // protocol's JSON body too.
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = reason(res.status);
        if (res.status == 404) message = "no route for " + req.method + " " + req.path;
        res.set_content(encode_error(message), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          message += std::string(": ") + e.what();
        } catch (...) {
        }
        reply_error(res, 500, message);
      });
  s.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    metrics_.count_response(res.status);
  });
}

}  // namespace memoplan::serve
