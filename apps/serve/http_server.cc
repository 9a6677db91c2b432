#include "http_server.h"

#include <sys/resource.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "http_connection.h"
#include "http_routes.h"
#include "worker_pool.h"

namespace memoplan::serve {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Descriptors kept for everything but connections: model files, gRPC, logs, the listener.
constexpr size_t kReservedFiles = 256;

// Raises the soft open-file limit to the hard one; returns the soft limit then in force.
size_t raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<size_t>(limit.rlim_cur);
}

}  // namespace

struct HttpServer::Impl {
  Impl(const HttpOptions& o, ModelRegistry& models, Metrics& m)
      : options(o),
        metrics(m),
        routes(o.version, models, m, o.plan_stats),
        handlers(std::max(1, o.threads), static_cast<size_t>(std::max(1, o.threads)), nullptr),
        io(loop_threads()),
        acceptor(asio::make_strand(io)),
        retry(acceptor.get_executor()) {}

  // The event loop's threads: the CPUs, at most 4 (reading and writing is a small part of a
  // request; decoding, inference and encoding run on the handler threads and the workers).
  static int loop_threads() {
    return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  }

  // Every connection's steps, and accepting, are done: the loop's threads may return.
  void release_work() {
    std::lock_guard<std::mutex> lock(work_mutex);
    work.reset();
  }

  void accept() {
    // Each connection gets its own strand; the acceptor's handler runs on the acceptor's.
    acceptor.async_accept(asio::make_strand(io),
                          [this](boost::system::error_code ec, tcp::socket socket) {
                            if (ec == asio::error::operation_aborted || front->stopping) return;
                            if (ec) {
                              // Out of descriptors or buffers (EMFILE, ENFILE, ENOBUFS): the
                              // pending connections wait in the backlog; try again shortly rather
                              // than spin.
                              retry.expires_after(std::chrono::milliseconds(50));
                              retry.async_wait([this](boost::system::error_code e) {
                                if (!e && !front->stopping) accept();
                              });
                              return;
                            }
                            admit(std::move(socket));
                            accept();
                          });
  }

  void admit(tcp::socket socket) {
    metrics.connection_opened();
    boost::system::error_code ec;
    const tcp::endpoint peer = socket.remote_endpoint(ec);
    if (ec) return metrics.connection_closed(ConnectionEnd::kClient);  // gone already
    const ConnectionEnd refusal = table->admit(peer.address());
    if (refusal != ConnectionEnd::kClient) {
      metrics.connection_closed(refusal);  // counted before the client can see the close
      socket.close(ec);
      return;
    }
    // Without it, Nagle's algorithm holds the body segment after the header segment for the
    // client's delayed ACK: 40 ms on every response.
    socket.set_option(tcp::no_delay(true), ec);
    open_connection(*front, std::move(socket), peer.address());
  }

  void stop_on_loop() {
    if (front->stopping) return;
    front->stopping = true;
    boost::system::error_code ec;
    acceptor.close(ec);
    retry.cancel();
    table->close_waiting();
    if (table->size() == 0) release_work();
  }

  HttpOptions options;
  Metrics& metrics;
  HttpRoutes routes;
  WorkerPool handlers;
  asio::io_context io;
  tcp::acceptor acceptor;  // on a strand: accept, stop and the retry timer run there
  asio::steady_timer retry;
  size_t max_connections = 0;
  std::optional<ConnectionTable> table;
  std::optional<FrontEnd> front;
  std::mutex work_mutex;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::atomic<bool> running{false};
};

HttpServer::HttpServer(const HttpOptions& options, ModelRegistry& models, Metrics& metrics)
    : impl_(std::make_unique<Impl>(options, models, metrics)) {}

HttpServer::~HttpServer() {
  if (impl_) impl_->handlers.stop();
}

int HttpServer::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  const HttpLimits& l = s.options.limits;
  const size_t files = raise_open_file_limit();
  s.max_connections = std::max<size_t>(
      1,
      std::min(l.max_connections, files > kReservedFiles * 2 ? files - kReservedFiles : files / 2));
  const size_t per_address = l.max_connections_per_address
                                 ? l.max_connections_per_address
                                 : std::max<size_t>(1, s.max_connections / 2);
  s.table.emplace(s.max_connections, per_address);
  s.front.emplace(l, s.routes, s.handlers, s.metrics, *s.table);
  s.front->max_buffered = l.max_buffered ? l.max_buffered : uint64_t{8} * l.max_body;
  s.front->on_last_closed = [&s] { s.release_work(); };
  boost::system::error_code ec;
  tcp::resolver resolver(s.io);
  const auto endpoints = resolver.resolve(
      host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) return -1;
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    s.acceptor.close(ec);
    return -1;
  }
  return s.acceptor.local_endpoint().port();
}

size_t HttpServer::max_connections() const { return impl_->max_connections; }

bool HttpServer::run() {
  Impl& s = *impl_;
  if (!s.acceptor.is_open()) return false;
  s.work.emplace(s.io.get_executor());
  asio::post(s.acceptor.get_executor(), [&s] { s.accept(); });
  std::vector<std::thread> threads;
  for (int i = 1; i < Impl::loop_threads(); ++i) threads.emplace_back([&s] { s.io.run(); });
  s.running.store(true, std::memory_order_release);
  s.io.run();
  for (std::thread& t : threads) t.join();
  s.running.store(false, std::memory_order_release);
  return true;
}

bool HttpServer::running() const { return impl_->running.load(std::memory_order_acquire); }

void HttpServer::stop() {
  asio::post(impl_->acceptor.get_executor(), [s = impl_.get()] { s->stop_on_loop(); });
}

}  // namespace memoplan::serve
