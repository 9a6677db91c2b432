#include "http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memoplan::serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Clock = std::chrono::steady_clock;
using Queue = ConnectionTable::Queue;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The lingering close reads for at most this long, and at most this much.
constexpr double kLingerSeconds = 2;
constexpr size_t kLingerBytes = 1u << 20;
// A keep-alive wait reads the next request's first bytes into this much buffer.
constexpr size_t kIdleRead = 1024;
// A body is read this much at a time.
constexpr size_t kBodyRead = 64u << 10;

}  // namespace

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(FrontEnd& front, asio::ip::tcp::socket socket, const asio::ip::address& address)
      : front_(front), stream_(std::move(socket)), address_(address) {}

  const asio::ip::address& address() const { return address_; }
  beast::tcp_stream::executor_type executor() { return stream_.get_executor(); }
  // The table's, under its lock.
  std::list<Connection*>::iterator queue_position;
  Queue queue = Queue::kNone;
  bool in_table = false;

  void start() {
    front_.table.add(this);
    header_deadline_ = Clock::now() + seconds(front_.limits.header_timeout_s);
    read_header();
  }

  // Closed from outside the connection's own steps (to make room at the cap, or the server
  // stops): on its strand, once the step running there now is done.
  void close_soon(ConnectionEnd why) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), why] { self->close(why); });
  }

 private:
  void read_header() {
    front_.table.set_queue(this, Queue::kWaiting);
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(front_.limits.max_header));
    parser_->body_limit(front_.limits.max_body);
    stream_.expires_at(header_deadline_);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (closed_) return;
    front_.table.set_queue(this, Queue::kNone);
    if (ec) return read_failed(ec, ConnectionEnd::kHeaderTimeout);
    const auto& request = parser_->get();
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    if (parser_->is_done()) return dispatch();
    if (const auto length = parser_->content_length(); length && !charge(*length)) return busy();
    body_start_ = Clock::now();
    body_bytes_ = 0;
    // Beast reads at most the buffer's free capacity at a time (at least 512 bytes): without
    // this, a body came in 1 KiB reads after a keep-alive wait (a 3 MB body: 3,000 of them).
    buffer_.reserve(kBodyRead);
    if (version_ >= 11 && beast::iequals(request[http::field::expect], "100-continue")) {
      // The client waits for this before it sends the body (curl does for large bodies).
      auto next =
          std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
      stream_.expires_after(seconds(front_.limits.header_timeout_s));
      http::async_write(
          stream_, *next, [self = shared_from_this(), next](beast::error_code e, size_t) {
            if (self->closed_) return;
            if (e) {
              return self->close(e == beast::error::timeout ? ConnectionEnd::kWriteTimeout
                                                            : ConnectionEnd::kClient);
            }
            self->read_body();
          });
      return;
    }
    read_body();
  }

  void read_body() {
    const HttpLimits& l = front_.limits;
    if (l.min_rate > 0) {
      stream_.expires_at(body_start_ +
                         seconds(l.header_timeout_s + static_cast<double>(body_bytes_) /
                                                          static_cast<double>(l.min_rate)));
    } else {
      stream_.expires_never();
    }
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            if (self->closed_) return;
                            if (ec) return self->read_failed(ec, ConnectionEnd::kBodyTimeout);
                            self->body_bytes_ += n;
                            // A chunked body is charged as it comes.
                            if (!self->parser_->content_length() && !self->charge(n)) {
                              return self->busy();
                            }
                            if (self->parser_->is_done()) return self->dispatch();
                            self->read_body();
                          });
  }

  // A read that failed: the client went away, was too slow (`timeout`), or sent what cannot be
  // answered but with an error.
  void read_failed(beast::error_code ec, ConnectionEnd timeout) {
    if (ec == beast::error::timeout) return close(timeout);
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
        ec == http::error::partial_message) {
      return close(ConnectionEnd::kClient);
    }
    keep_alive_ = false;
    lingering_ = true;
    // The request line may be the bad part: answer in its version where it was read, else 1.1.
    const unsigned version = parser_ ? parser_->get().version() : 0;
    version_ = version == 10 || version == 11 ? version : 11;
    if (ec == http::error::header_limit) {
      return answer(HttpRoutes::error(431, "request header larger than the server's limit of " +
                                               std::to_string(front_.limits.max_header) +
                                               " bytes (--max-header)"));
    }
    if (ec == http::error::body_limit) {
      return answer(HttpRoutes::error(413, "request body larger than the server's limit of " +
                                               std::to_string(front_.limits.max_body) +
                                               " bytes (--max-body)"));
    }
    answer(HttpRoutes::error(400, "malformed HTTP request: " + ec.message()));
  }

  void dispatch() {
    http::request<http::string_body> message = parser_->release();
    parser_.reset();
    head_ = message.method() == http::verb::head;
    auto request = std::make_shared<HttpRequest>();
    request->method = std::string(message.method_string());
    request->target = std::string(message.target());
    request->inference_header_length = std::string(message["Inference-Header-Content-Length"]);
    request->body = std::move(message.body());
    if (!HttpRoutes::blocking(request->method, request->target)) {
      return answer(front_.routes.handle(*request));
    }
    // The reply is made on a handler thread and written from the event loop.
    auto reply = std::make_shared<HttpReply>();
    const HttpRoutes& routes = front_.routes;
    WorkerPool::Job job;
    job.run = [&routes, request, reply] { *reply = routes.handle(*request); };
    job.finish = [self = shared_from_this(), reply] {
      asio::post(self->stream_.get_executor(), [self, reply] {
        if (!self->closed_) self->answer(std::move(*reply));
      });
    };
    if (!front_.handlers.try_submit(std::move(job))) {
      answer(HttpRoutes::error(
          503, "server busy: every one of the " + std::to_string(front_.handlers.workers()) +
                   " HTTP handler threads is taken and as many requests wait; retry later"));
    }
  }

  // Takes `bytes` of the server's allowance for request bodies; false when they do not fit.
  bool charge(uint64_t bytes) {
    if (bytes == 0) return true;
    const uint64_t before = front_.buffered.fetch_add(bytes);
    if (before + bytes > front_.max_buffered) {
      front_.buffered.fetch_sub(bytes);
      return false;
    }
    charged_ += bytes;
    return true;
  }
  void release_charge() {
    if (charged_ == 0) return;
    front_.buffered.fetch_sub(charged_);
    charged_ = 0;
  }
  // The request's body does not fit the allowance: 503, and the connection ends.
  void busy() {
    keep_alive_ = false;
    lingering_ = true;
    answer(HttpRoutes::error(
        503, "server busy: the request bodies being received or handled hold up to " +
                 std::to_string(front_.max_buffered) + " bytes (--max-buffered); retry later"));
  }

  void answer(HttpReply reply) {
    release_charge();  // the body has been handled (or refused)
    const bool keep = keep_alive_ && !front_.stopping;
    response_.emplace();
    auto& r = *response_;
    r.version(version_);
    r.result(static_cast<unsigned>(reply.status));
    if (!reply.content_type.empty()) r.set(http::field::content_type, reply.content_type);
    if (reply.header_length) {
      r.set("Inference-Header-Content-Length", std::to_string(*reply.header_length));
    }
    r.body() = std::move(reply.body);
    r.keep_alive(keep);
    r.prepare_payload();
    if (head_) r.body().clear();  // Content-Length stays the GET answer's
    status_ = reply.status;
    const HttpLimits& l = front_.limits;
    stream_.expires_after(
        seconds(l.header_timeout_s +
                (l.min_rate ? static_cast<double>(r.body().size()) / static_cast<double>(l.min_rate)
                            : l.idle_timeout_s)));
    http::async_write(stream_, r, [self = shared_from_this(), keep](beast::error_code ec, size_t) {
      self->on_written(ec, keep);
    });
  }

  void on_written(beast::error_code ec, bool keep) {
    if (closed_) return;
    response_.reset();
    if (ec) {
      return close(ec == beast::error::timeout ? ConnectionEnd::kWriteTimeout
                                               : ConnectionEnd::kClient);
    }
    front_.metrics.count_response(status_);
    if (!keep) {
      if (lingering_) return linger();
      beast::error_code ignored;
      stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
      return close(front_.stopping ? ConnectionEnd::kStopped : ConnectionEnd::kClient);
    }
    head_ = false;
    header_deadline_ = Clock::now() + seconds(front_.limits.header_timeout_s);
    if (buffer_.size() > 0) return read_header();  // pipelined: the next one is here already
    wait_idle();
  }

  // Keep-alive: the buffer is given back while idle; the next request's first bytes end the wait.
  void wait_idle() {
    buffer_.clear();
    buffer_.shrink_to_fit();
    front_.table.set_queue(this, Queue::kIdle);
    stream_.expires_after(seconds(front_.limits.idle_timeout_s));
    stream_.async_read_some(
        buffer_.prepare(kIdleRead), [self = shared_from_this()](beast::error_code ec, size_t n) {
          if (self->closed_) return;
          self->front_.table.set_queue(self.get(), Queue::kNone);
          if (ec) {
            return self->close(ec == beast::error::timeout ? ConnectionEnd::kIdleTimeout
                                                           : ConnectionEnd::kClient);
          }
          self->buffer_.commit(n);
          self->header_deadline_ = Clock::now() + seconds(self->front_.limits.header_timeout_s);
          self->read_header();
        });
  }

  // After an answer that ends the connection while the client may still be sending: stop
  // sending, read and drop for a moment, then close.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    buffer_.clear();
    stream_.expires_after(seconds(kLingerSeconds));
    stream_.async_read_some(buffer_.prepare(16u << 10),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (self->closed_) return;
                              self->lingered_ += n;
                              if (ec || self->lingered_ >= kLingerBytes) {
                                return self->close(ConnectionEnd::kBadRequest);
                              }
                              self->buffer_.clear();
                              self->linger();
                            });
  }

  void close(ConnectionEnd why) {
    if (closed_) return;
    closed_ = true;
    // Counted before the socket closes: a client that sees the close and then reads the metrics
    // (from another loop thread) finds it counted.
    front_.metrics.connection_closed(why);
    stream_.close();  // its timer too; a pending step completes with operation_aborted
    release_charge();
    const size_t left = front_.table.remove(this);
    if (left == 0 && front_.stopping && front_.on_last_closed) front_.on_last_closed();
  }

  FrontEnd& front_;
  beast::tcp_stream stream_;
  const asio::ip::address address_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  Clock::time_point header_deadline_, body_start_;
  size_t body_bytes_ = 0;
  size_t lingered_ = 0;
  uint64_t charged_ = 0;  // of front_.buffered, for the request being read or handled
  unsigned version_ = 0;
  int status_ = 0;
  bool keep_alive_ = false;
  bool head_ = false;
  bool lingering_ = false;
  bool closed_ = false;
};

ConnectionEnd ConnectionTable::admit(const asio::ip::address& address) {
  std::shared_ptr<Connection> victim;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = per_address_.find(address);
    if (it != per_address_.end() && it->second >= max_per_address_) {
      return ConnectionEnd::kRefusedAddress;
    }
    if (open_ < max_total_) return ConnectionEnd::kClient;
    std::list<Connection*>& victims = idle_.empty() ? waiting_ : idle_;
    if (!victims.empty()) victim = victims.front()->weak_from_this().lock();
    if (!victim) return ConnectionEnd::kRefused;
  }
  remove(victim.get());
  victim->close_soon(ConnectionEnd::kEvicted);
  return ConnectionEnd::kClient;
}

void ConnectionTable::add(Connection* c) {
  std::lock_guard<std::mutex> lock(mutex_);
  c->in_table = true;
  ++open_;
  ++per_address_[c->address()];
}

size_t ConnectionTable::remove(Connection* c) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (c->in_table) {
    unlink(c);
    c->in_table = false;
    --open_;
    const auto it = per_address_.find(c->address());
    if (--it->second == 0) per_address_.erase(it);
  }
  return open_;
}

size_t ConnectionTable::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return open_;
}

void ConnectionTable::unlink(Connection* c) {
  if (c->queue != Queue::kNone) {
    (c->queue == Queue::kIdle ? idle_ : waiting_).erase(c->queue_position);
  }
  c->queue = Queue::kNone;
}

void ConnectionTable::set_queue(Connection* c, Queue q) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!c->in_table || c->queue == q) return;
  unlink(c);
  if (q == Queue::kNone) return;
  std::list<Connection*>& list = q == Queue::kIdle ? idle_ : waiting_;
  c->queue_position = list.insert(list.end(), c);
  c->queue = q;
}

void ConnectionTable::close_waiting() {
  std::vector<std::shared_ptr<Connection>> waiting;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::list<Connection*>* list : {&idle_, &waiting_}) {
      for (Connection* c : *list) {
        if (auto held = c->weak_from_this().lock()) waiting.push_back(std::move(held));
      }
    }
  }
  for (const auto& c : waiting) {
    remove(c.get());
    c->close_soon(ConnectionEnd::kStopped);
  }
}

void open_connection(FrontEnd& front, asio::ip::tcp::socket socket,
                     const asio::ip::address& address) {
  auto c = std::make_shared<Connection>(front, std::move(socket), address);
  asio::post(c->executor(), [c] { c->start(); });  // on its strand from the first step
}

}  // namespace memoplan::serve
