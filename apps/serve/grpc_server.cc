#include "grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "grpc_codec.h"
#include "http_error.h"
#include "kserve_v2.grpc.pb.h"

namespace memoplan::serve {
namespace {

using Clock = std::chrono::steady_clock;

grpc::StatusCode code_of(int http_status) {
  switch (http_status) {
    case 400:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 413:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

}  // namespace

// The service: every call checks the model name and version as the HTTP routes do.
class KserveService final : public inference::GRPCInferenceService::Service {
 public:
  KserveService(const GrpcOptions& options, ModelRegistry& models, Metrics& metrics)
      : options_(options), models_(models), metrics_(metrics) {}

  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return counted(grpc::Status::OK);
  }

  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* response) override {
    response->set_ready(models_.all_ready());
    return counted(grpc::Status::OK);
  }

  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override {
    return answer(
        [&] { response->set_ready(models_.get(request->name(), request->version())->ready()); });
  }

  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* response) override {
    response->set_name("memoplan-serve");
    response->set_version(options_.version);
    return counted(grpc::Status::OK);
  }

  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override {
    return answer([&] {
      encode_grpc_model_metadata(models_.get(request->name(), request->version())->model().spec(),
                                 response);
    });
  }

  grpc::Status ModelInfer(grpc::ServerContext*, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override {
    const Clock::time_point start = Clock::now();
    std::shared_ptr<ServedModel> model;  // held until answered
    const grpc::Status status = answer([&] {
      model = models_.get(request->model_name(), request->model_version());
      InferRequest decoded = decode_grpc_infer_request(*request);
      ModelSpec spec;
      const std::vector<HostTensor> outputs = model->handler().infer(decoded, spec);
      encode_grpc_infer_response(spec.name, decoded, outputs, response);
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (model) model->metrics().observe_infer_latency(seconds);
    return status;
  }

 private:
  // Runs `fill`; an HttpError becomes the protocol's status code with its message.
  template <typename Fill>
  grpc::Status answer(Fill&& fill) {
    try {
      fill();
      return counted(grpc::Status::OK);
    } catch (const HttpError& e) {
      return counted(grpc::Status(code_of(e.status()), e.what()));
    } catch (const std::exception& e) {
      return counted(
          grpc::Status(grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what()));
    }
  }

  grpc::Status counted(grpc::Status status) {
    metrics_.count_grpc(static_cast<int>(status.error_code()));
    return status;
  }

  const GrpcOptions& options_;
  ModelRegistry& models_;
  Metrics& metrics_;
};

struct GrpcServer::Impl {
  std::unique_ptr<KserveService> service;
  std::unique_ptr<grpc::Server> server;
};

GrpcServer::GrpcServer(const GrpcOptions& options, ModelRegistry& models, Metrics& metrics)
    : options_(options), models_(models), metrics_(metrics), impl_(std::make_unique<Impl>()) {}

GrpcServer::~GrpcServer() { stop(); }

int GrpcServer::start(const std::string& host, int port) {
  impl_->service = std::make_unique<KserveService>(options_, models_, metrics_);
  grpc::ServerBuilder builder;
  int bound = -1;
  builder.AddListeningPort(host + ":" + std::to_string(port), grpc::InsecureServerCredentials(),
                           &bound);
  builder.RegisterService(impl_->service.get());
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<size_t>(options_.max_message, static_cast<size_t>(INT32_MAX))));
  builder.SetMaxSendMessageSize(-1);  // outputs: as large as the model makes them
  const auto ms = [](double seconds) { return static_cast<int>(seconds * 1000); };
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, ms(options_.header_timeout_s));
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, static_cast<int>(options_.max_header));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(options_.idle_timeout_s));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options_.max_streams);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             ms(options_.min_client_ping_s));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ms(options_.keepalive_s));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  grpc::ResourceQuota quota("memoplan-serve-grpc");
  quota.SetMaxThreads(options_.threads);
  builder.SetResourceQuota(quota);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || bound <= 0) {
    impl_->server.reset();
    return -1;
  }
  return bound;
}

void GrpcServer::stop() {
  if (impl_ && impl_->server) {
    impl_->server->Shutdown();  // waits for the calls in flight
    impl_->server->Wait();
    impl_->server.reset();
  }
}

}  // namespace memoplan::serve
