#include "server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace k3::server {
namespace {

using Clock = std::chrono::steady_clock;

thread_local int t_sock = -1;        // connection served by this thread
thread_local bool t_refuse = false;  // this thread only refuses connections (overload)
thread_local bool t_close = false;   // close the connection after the current response
class ConnStream;
thread_local const ConnStream* t_stream = nullptr;  // the connection this thread serves

Clock::time_point after(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Waits until `events` are ready on sock, or the deadline passes, or the server stops (httplib
// marks a stopped server by closing its listening socket: *svr == INVALID_SOCKET).
bool wait_io(int sock, short events, Clock::time_point deadline, const std::atomic<socket_t>* svr) {
  for (;;) {
    if (svr && svr->load() == INVALID_SOCKET) return false;
    const auto left_us = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    if (left_us <= 0) return false;
    pollfd p{sock, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>((left_us + 999) / 1000, 200)));
    if (r > 0) return true;  // ready, or an error/hangup that the next recv/send reports
    if (r < 0 && errno != EINTR) return false;
  }
}

std::string addr_string(const sockaddr_storage& ss, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    port = ntohs(a->sin6_port);
  }
  return buf;
}

// A connection as httplib sees it: buffered reads that fail once the request's deadline or byte
// budget is exhausted; writes that fail when the peer stops reading for write_timeout_s.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int sock, const HttpLimits& l, const std::atomic<socket_t>* svr) : sock_(sock), l_(l), stop_(svr) {}

  // Waits for the first byte of the next request.
  bool wait_request(double timeout_s) {
    if (pos_ < buf_.size()) return true;
    if (!wait_io(sock_, POLLIN, after(timeout_s), stop_)) return false;
    return fill() > 0;
  }
  // Byte budget: max_header_bytes for the request line and headers, then (headers_done) the
  // body's own allowance.
  void begin_request() {
    deadline_ = after(l_.request_timeout_s);
    budget_ = l_.max_header_bytes;
    in_headers_ = true;
    body_allowance_exhausted_ = false;
    timed_out_ = false;
    written_ = 0;
  }
  void headers_done(size_t body_allowance) {
    in_headers_ = false;
    budget_ = body_allowance;
  }
  bool expired() const { return timed_out_ || budget_ == 0; }
  bool timed_out() const { return timed_out_; }
  bool headers_too_large() const { return in_headers_ && budget_ == 0; }
  bool body_too_large() const { return !in_headers_ && budget_ == 0 && body_allowance_exhausted_; }
  void mark_body_exhausted() { body_allowance_exhausted_ = true; }
  size_t written() const { return written_; }

  bool is_readable() const override {
    return pos_ < buf_.size() || wait_io(sock_, POLLIN, deadline_, stop_);
  }
  bool is_writable() const override { return wait_io(sock_, POLLOUT, after(l_.write_timeout_s), nullptr); }

  ssize_t read(char* ptr, size_t size) override {
    if (budget_ == 0) {
      if (!in_headers_) body_allowance_exhausted_ = true;
      return -1;
    }
    if (pos_ >= buf_.size()) {
      if (!wait_io(sock_, POLLIN, deadline_, stop_)) {
        timed_out_ = Clock::now() + std::chrono::milliseconds(5) >= deadline_;
        return -1;
      }
      if (fill() <= 0) return -1;
    }
    size_t n = std::min({size, buf_.size() - pos_, budget_});
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    budget_ -= n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!wait_io(sock_, POLLOUT, after(l_.write_timeout_s), nullptr)) return -1;
      ssize_t k = ::send(sock_, ptr + done, size - done, MSG_NOSIGNAL);
      if (k < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        return -1;
      }
      done += static_cast<size_t>(k);
    }
    written_ += done;
    return static_cast<ssize_t>(done);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    port = -1;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip = addr_string(ss, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    port = -1;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip = addr_string(ss, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  ssize_t fill() {
    buf_.resize(16384);
    pos_ = 0;
    for (;;) {
      ssize_t n = ::recv(sock_, buf_.data(), buf_.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      buf_.resize(n > 0 ? static_cast<size_t>(n) : 0);
      return n;
    }
  }

  int sock_;
  const HttpLimits& l_;
  const std::atomic<socket_t>* stop_;
  std::vector<char> buf_;
  size_t pos_ = 0;
  Clock::time_point deadline_ = Clock::now();
  size_t budget_ = 0;
  size_t written_ = 0;
  bool in_headers_ = true, timed_out_ = false, body_allowance_exhausted_ = false;
};

void send_all_quick(int sock, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    if (!wait_io(sock, POLLOUT, after(0.2), nullptr)) return;
    ssize_t k = ::send(sock, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return;
    }
    done += static_cast<size_t>(k);
  }
}

// Half-closes, then discards what the client still sends (up to a limit) before closing, so the
// client reads our response instead of a reset caused by unread data.
void lingering_close(int sock, double max_s) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = after(max_s);
  char buf[16384];
  size_t drained = 0;
  while (drained < (64u << 20) && wait_io(sock, POLLIN, deadline, nullptr)) {
    ssize_t n = ::recv(sock, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  ::close(sock);
}

std::string raw_error(int status, const char* reason, const char* type, const std::string& msg, int retry_after) {
  std::string body = R"({"error":{"message":")" + msg + R"(","type":")" + type + R"(","param":null,"code":null}})";
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: application/json\r\n";
  if (retry_after > 0) h += "Retry-After: " + std::to_string(retry_after) + "\r\n";
  h += "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  return h + body;
}

// Connection threads with a bounded backlog. A connection that would wait behind `backlog`
// others while every thread is busy goes to a single refusing thread instead (503).
class ConnQueue final : public httplib::TaskQueue {
 public:
  ConnQueue(int threads, int backlog) : backlog_(static_cast<size_t>(std::max(0, backlog))) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { work(false); });
    refuser_ = std::thread([this] { work(true); });
  }
  ~ConnQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      // Idle workers are about to take queued jobs; beyond them, `backlog` may wait.
      if (jobs_.size() >= static_cast<size_t>(idle_) + backlog_) refused_.push_back(std::move(fn));
      else jobs_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (down_) return;
      down_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    refuser_.join();
  }

 private:
  void work(bool refuser) {
    t_refuse = refuser;
    std::deque<std::function<void()>>& q = refuser ? refused_ : jobs_;
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (!refuser) ++idle_;
        cv_.wait(lk, [&] { return !q.empty() || down_; });
        if (!refuser) --idle_;
        if (q.empty()) return;  // down_ and drained
        fn = std::move(q.front());
        q.pop_front();
      }
      fn();
    }
  }

  size_t backlog_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_, refused_;
  int idle_ = 0;
  bool down_ = false;
  std::vector<std::thread> workers_;
  std::thread refuser_;
};

}  // namespace

HttpServer::HttpServer(const HttpLimits& limits) : limits_(limits) {
  new_task_queue = [this] { return new ConnQueue(limits_.threads, limits_.backlog); };
  set_payload_max_length(limits_.max_body);
  // Only for the Keep-Alive response header (the connection loop below enforces both), so that
  // clients close idle connections before the server does.
  set_keep_alive_timeout(static_cast<time_t>(std::max(1.0, limits_.idle_timeout_s)));
  set_keep_alive_max_count(static_cast<size_t>(std::max(1, limits_.keep_alive_max)));
  set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (res.status >= 400) t_close = true;
    if (observer_) observer_(req, res);
  });
}

HttpServer::~HttpServer() = default;

void HttpServer::widen_accept_queue(int backlog) {
  const socket_t s = svr_sock_;
  if (s != INVALID_SOCKET) ::listen(s, backlog);
}

bool HttpServer::peer_gone() {
  if (t_sock < 0) return false;
  char c;
  ssize_t n = ::recv(t_sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
  return false;
}

bool HttpServer::request_timed_out() { return t_stream && t_stream->timed_out(); }
bool HttpServer::request_too_large() { return t_stream && t_stream->body_too_large(); }
bool HttpServer::headers_too_large() { return t_stream && t_stream->headers_too_large(); }

bool HttpServer::process_and_close_socket(socket_t sock) {
  if (t_refuse) {
    refuse_connection(sock);
    return true;
  }
  ++open_;
  serve_connection(sock);
  --open_;
  return true;
}

void HttpServer::refuse_connection(int sock) {
  ++refused_;
  send_all_quick(sock, raw_error(503, "Service Unavailable", "overloaded_error",
                                 "the server is overloaded (all connection threads busy); retry later",
                                 limits_.retry_after_s));
  // No lingering here: one thread refuses every overflow connection. Discard what the client has
  // already sent (so close does not reset the connection over unread data) and close.
  ::shutdown(sock, SHUT_WR);
  char buf[16384];
  for (int i = 0; i < 64 && ::recv(sock, buf, sizeof buf, MSG_DONTWAIT) > 0; ++i) {
  }
  ::close(sock);
}

void HttpServer::serve_connection(int sock) {
  int one = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ConnStream strm(sock, limits_, &svr_sock_);
  t_sock = sock;
  t_stream = &strm;
  bool first = true;
  for (int count = limits_.keep_alive_max; count > 0; --count) {
    if (svr_sock_ == INVALID_SOCKET) break;
    if (!strm.wait_request(first ? limits_.request_timeout_s : limits_.idle_timeout_s)) break;
    first = false;
    strm.begin_request();
    bool closed = false;
    t_close = false;
    const bool last = count == 1 || svr_sock_ == INVALID_SOCKET;
    const bool ok = process_request(strm, last, closed, [&](httplib::Request& req) {
      // The body may use max_body bytes (plus chunk framing). A body that is too large by its
      // Content-Length, or that has no framing at all (a POST without Content-Length or chunked
      // encoding would be read until the client closes), gets no bytes, so httplib fails it at
      // once instead of waiting for the deadline.
      const std::string cl = req.get_header_value("Content-Length");
      const bool chunked = req.has_header("Transfer-Encoding");
      size_t allowance = limits_.max_body + limits_.max_body / 8 + 4096;  // chunk framing
      if (!cl.empty() && std::strtoull(cl.c_str(), nullptr, 10) > limits_.max_body) allowance = 0;
      if (cl.empty() && !chunked && (req.method == "POST" || req.method == "PUT" || req.method == "PATCH"))
        allowance = 0;
      strm.headers_done(allowance);
      // Responses are never compressed (SSE must not be buffered by a compressor).
      req.headers.erase("Accept-Encoding");
      // Bodies are JSON whatever the client says (curl -d sends a form type, which httplib would
      // parse and cap at 8 KiB).
      if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0)
        req.headers.erase("Content-Type");
    });
    if (!ok) {
      if (strm.written() == 0 && strm.expired())
        send_all_quick(sock, raw_error(408, "Request Timeout", "invalid_request_error",
                                       "the request did not arrive completely in time", 0));
      break;
    }
    if (closed || t_close) break;
  }
  t_sock = -1;
  t_stream = nullptr;
  lingering_close(sock, 2.0);
}

}  // namespace k3::server
