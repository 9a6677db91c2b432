// One HTTP/1.1 connection of the front end, from accept to close, and the table of open ones
// with its caps. The event loop runs on a few threads; each connection's steps run in order on
// its own strand, and a blocking request's handling runs on a handler thread, which posts its
// reply back to that strand. The table is shared: its own lock.
//
// A connection's life: waiting for a request header (deadline: header_timeout_s from accept or
// from the first byte after a keep-alive wait), reading its body (at min_rate after the grace),
// handling, writing the answer (at min_rate after the grace), then idle (idle_timeout_s) or
// closed. Answers that end the connection (400, 413, 431) are followed by a lingering close: the
// server stops sending and reads what the client still sends for a moment, so that the client
// reads the answer instead of a reset.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <mutex>

#include "http_routes.h"
#include "http_server.h"
#include "metrics.h"
#include "worker_pool.h"

namespace memoplan::serve {

class Connection;

// Open connections by client address, and the two kinds that may be closed to make room at the
// cap, oldest first: idle keep-alive ones, and ones without a whole request header yet. A
// connection taken out of the table (evicted, or the server stops) is closed on its strand; until
// then its own calls here are no-ops.
class ConnectionTable {
 public:
  ConnectionTable(size_t max_total, size_t max_per_address)
      : max_total_(max_total), max_per_address_(max_per_address) {}

  // Whether a new connection from `address` may open; at the total cap, takes the oldest
  // evictable connection out to make room (closing it). Returns kClient when it may, else why not.
  ConnectionEnd admit(const boost::asio::ip::address& address);
  void add(Connection* c);
  // Takes c out (when still in); returns the connections left in the table.
  size_t remove(Connection* c);
  // A connection's evictable state: idle (kept alive, no request), waiting (no whole header yet)
  // or neither.
  enum class Queue { kNone, kIdle, kWaiting };
  void set_queue(Connection* c, Queue q);
  // The server stops: every idle and waiting connection is taken out and closed.
  void close_waiting();
  size_t size() const;

 private:
  void unlink(Connection* c);  // out of the queues; the lock held

  const size_t max_total_, max_per_address_;
  mutable std::mutex mutex_;
  size_t open_ = 0;
  std::map<boost::asio::ip::address, size_t> per_address_;
  std::list<Connection*> idle_, waiting_;
};

// What every connection shares: the server's limits, routes, handler threads and counters.
struct FrontEnd {
  FrontEnd(const HttpLimits& l, const HttpRoutes& r, WorkerPool& h, Metrics& m, ConnectionTable& t)
      : limits(l), routes(r), handlers(h), metrics(m), table(t) {}
  const HttpLimits& limits;
  const HttpRoutes& routes;
  WorkerPool& handlers;
  Metrics& metrics;
  ConnectionTable& table;
  std::atomic<bool> stopping{false};
  // Request body bytes held now, and how many may be (HttpLimits::max_buffered, resolved).
  std::atomic<uint64_t> buffered{0};
  uint64_t max_buffered = 0;
  std::function<void()> on_last_closed;  // called when stopping and the table became empty
};

// Starts serving an accepted socket (its executor a strand of the loop) that the table admitted.
void open_connection(FrontEnd& front, boost::asio::ip::tcp::socket socket,
                     const boost::asio::ip::address& address);

}  // namespace memoplan::serve
