// The HTTP/1.1 transport of `k3 serve` (docs/server.md, "Transport"): Boost.Beast's parser on an
// Asio event loop. One I/O thread owns every socket; handler threads only ever see complete
// requests. So:
//  * a connection that idles or trickles costs a socket and a few KiB, never a thread;
//  * framing is strict (RFC 9112): one Content-Length of digits only, Transfer-Encoding only
//    "chunked" and never with Content-Length, no obsolete line folding, no space before a colon,
//    one Host; a violation is answered 400 (501 for an unknown transfer coding, 505 for another
//    HTTP version) and the connection closed;
//  * each request must arrive whole (request line, headers, body) within request_timeout_s of its
//    first byte (408), within max_request_line (414), max_header_bytes (431) and max_body for
//    every framing (413, checked while reading);
//  * connections above max_connections, or above max_connections_per_ip from one address, and
//    request bodies beyond the in-flight byte budget get an immediate 503 with Retry-After;
//  * the connection is watched while its handler runs, so HttpServer::peer_gone() sees a client
//    that leaves at once; a response is written as its provider produces it (SSE), with
//    back-pressure, and nothing at all is sent before the first byte of the body is ready;
//  * error responses close the connection (with a lingering close, so the client reads them).
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/http.h"

namespace k3::server {

struct HttpLimits {
  size_t max_body = 8u << 20;           // bytes of a request body, any framing (413)
  size_t max_header_bytes = 64u << 10;  // request line + headers (431)
  size_t max_request_line = 8u << 10;   // request line (414)
  double request_timeout_s = 10.0;      // to receive a whole request, from its first byte (408)
  double idle_timeout_s = 5.0;          // keep-alive: wait for the next request
  double write_timeout_s = 10.0;        // a write that cannot proceed for this long fails
  int keep_alive_max = 100;             // requests per connection
  int threads = 64;                     // handler threads
  int backlog = 64;                     // complete requests waiting for a handler thread (beyond: 503)
  int max_connections = 1024;           // open connections in all (beyond: 503)
  int max_connections_per_ip = 512;     // open connections from one address (0: no limit)
  size_t max_inflight_bytes = 64u << 20;  // request bodies being read or handled, summed (beyond: 503)
  int retry_after_s = 1;                // Retry-After of the transport's 503s
};

class HttpServer {
 public:
  explicit HttpServer(const HttpLimits& limits);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes match the path exactly. A `fast` handler runs on the I/O thread: it must not block or
  // set a content provider (/health, /metrics). Register before run().
  void Get(const std::string& path, Handler h, bool fast = false);
  void Post(const std::string& path, Handler h);
  // Runs before routing (authentication); returns true when it answered the request itself.
  void set_pre_routing(std::function<bool(const Request&, Response&)> fn);
  // Fills in the body of an error the transport answers itself (framing, limits, 404, 405); the
  // request is as far as it was parsed (its path may be empty).
  void set_error_writer(std::function<void(const Request&, Response&, int status, const std::string& message)> fn);
  // Called after each response is complete (request as far as it was parsed, status) — metrics.
  void set_observer(std::function<void(const Request&, int status)> fn);

  // Binds host:port (port 0: any free port) and returns the port; throws k3::Error.
  int bind(const std::string& host, int port);
  void run();  // serves until stop(); returns when every connection is closed and handler finished
  // Stops accepting connections and reading requests; responses already in progress get `drain` to
  // be produced and written, then every connection closes. Thread-safe, idempotent.
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(0));

  int open_connections() const;
  long long refused_connections() const;  // 503 for the connection or byte limits, or a full backlog
  size_t inflight_bytes() const;

  // For handlers and content providers: true when their client has closed its end or the
  // connection failed. Cheap; false outside a handler thread.
  static bool peer_gone();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3::server
