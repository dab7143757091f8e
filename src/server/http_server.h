// The HTTP transport of `k3 serve`: cpp-httplib's router and request parser, with k3's own
// connection handling around it:
//  * every request must arrive completely (request line, headers, body) within a deadline, and
//    each request may read at most a fixed number of bytes, so slow or endless senders
//    (slowloris, unbounded chunked bodies) lose their connection instead of holding a thread;
//  * a fixed pool of connection threads with a bounded backlog: a connection that finds no thread
//    and a full backlog gets an immediate 503 with Retry-After;
//  * lingering close, so an early error response (413, 400) reaches a client still sending;
//  * no response compression (Accept-Encoding is ignored), so SSE events are never buffered;
//  * handlers can ask whether their client is still connected (peer_gone());
//  * a connection is closed after an error response (its body may not have been read).
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include <httplib.h>

namespace k3::server {

struct HttpLimits {
  size_t max_body = 8u << 20;       // bytes of a request body (Content-Length above: 413)
  size_t max_header_bytes = 64u << 10;  // bytes of request line + headers (per request)
  double request_timeout_s = 10.0;  // to receive a whole request, from its first byte
  double idle_timeout_s = 5.0;      // keep-alive: wait for the next request
  double write_timeout_s = 10.0;    // a write that cannot proceed for this long fails
  int keep_alive_max = 100;         // requests per connection
  int threads = 64;                 // connection threads
  int backlog = 64;                 // accepted connections waiting for a thread
  int retry_after_s = 1;            // Retry-After of the connection-level 503
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& limits);
  ~HttpServer() override;

  const HttpLimits& limits() const { return limits_; }
  // After bind: a deeper accept queue than httplib's compiled-in 5, so a burst of connections
  // does not overflow it (the kernel would drop handshakes and clients would stall for seconds).
  void widen_accept_queue(int backlog);
  // Connections being served and connections refused with 503 so far.
  int open_connections() const { return open_.load(); }
  long long refused_connections() const { return refused_.load(); }

  // For handlers: true when the client of the request this thread serves has closed its end or
  // the connection failed. Cheap (one non-blocking peek); false outside a handler.
  static bool peer_gone();
  // For the error handler: whether the request this thread serves failed because it did not
  // arrive in time (408) or exceeded its byte budget (413).
  static bool request_timed_out();
  static bool request_too_large();
  static bool headers_too_large();  // 431

  // Called after each response is written (status, route) — for metrics. Set before listening.
  void set_observer(std::function<void(const httplib::Request&, const httplib::Response&)> fn) {
    observer_ = std::move(fn);
  }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void serve_connection(int sock);
  void refuse_connection(int sock);

  HttpLimits limits_;
  std::function<void(const httplib::Request&, const httplib::Response&)> observer_;
  std::atomic<int> open_{0};
  std::atomic<long long> refused_{0};
};

}  // namespace k3::server
