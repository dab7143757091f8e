// The transport: one Asio I/O thread runs a coroutine per connection (read and check a request,
// hand it to a handler thread, write what the handler produces); handler threads run the routes.
// Everything a connection owns is touched on the I/O thread only, except its current Exchange,
// which the handler thread fills under the exchange's mutex.
#include "server/http_server.h"

#include <malloc.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "server/http_framing.h"
#include "server/worker_pool.h"

namespace k3::server {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

namespace {

constexpr size_t kReadChunk = 64u << 10;       // bytes per socket read
constexpr size_t kMaxPending = 1u << 20;       // response bytes queued for a slow client before write() waits
constexpr size_t kLargeBody = 1u << 20;        // bodies from this size give memory back when done
constexpr size_t kChunkedStep = 64u << 10;     // budget reserved at a time for chunked bodies
constexpr size_t kLingerBytes = 64u << 20;     // discarded at most while closing after an error
constexpr double kLingerS = 2.0;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string reason(int status) {
  if (status == 499) return "Client Closed Request";
  const auto s = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return s.empty() || s[0] == '<' ? std::string("Unknown") : std::string(s);
}

// Status line and headers of a response (Content-Length: body_len, or chunked when body_len is
// npos and the client speaks HTTP/1.1; an HTTP/1.0 client's streamed body ends with the close).
std::string response_head(const Response& res, size_t body_len, bool chunked, bool close, double idle_s) {
  std::string h = "HTTP/1.1 " + std::to_string(res.status) + " " + reason(res.status) + "\r\n";
  if (!res.content_type.empty()) h += "Content-Type: " + res.content_type + "\r\n";
  for (const Header& x : res.headers) h += x.name + ": " + x.value + "\r\n";
  if (chunked) h += "Transfer-Encoding: chunked\r\n";
  else if (body_len != std::string::npos) h += "Content-Length: " + std::to_string(body_len) + "\r\n";
  h += close ? "Connection: close\r\n" : "Keep-Alive: timeout=" + std::to_string(static_cast<int>(idle_s)) + "\r\n";
  return h + "\r\n";
}

}  // namespace

// ---- shared state ----

struct Route {
  Handler get, post;
  bool get_fast = false;
};

class Conn;

struct HttpServer::Impl {
  explicit Impl(const HttpLimits& l) : limits(l) {}

  // Declared before the I/O objects: exchanges that die with the io_context still count here.
  HttpLimits limits;
  std::atomic<int> open{0};
  std::atomic<long long> refused{0};
  std::atomic<size_t> inflight{0};
  std::atomic<int> large_inflight{0};
  std::atomic<bool> stop_requested{false};
  WorkerPool pool;
  std::map<std::string, Route> routes;
  std::function<bool(const Request&, Response&)> pre_routing;
  std::function<void(const Request&, Response&, int, const std::string&)> error_writer;
  std::function<void(const Request&, int)> observer;

  // I/O thread only.
  std::unordered_map<std::string, int> per_ip;
  bool stopping = false;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::unordered_set<std::shared_ptr<Conn>> conns;
  asio::steady_timer drain_end{io};  // stopping: when the responses still in progress are cut off

  bool reserve(size_t n) {
    size_t cur = inflight.load();
    do {
      if (cur + n > limits.max_inflight_bytes) return false;
    } while (!inflight.compare_exchange_weak(cur, cur + n));
    return true;
  }

  void write_error(const Request& req, Response& res, int status, const std::string& msg) {
    res = Response{};
    res.status = status;
    if (error_writer) error_writer(req, res, status, msg);
    else res.set_content(msg, "text/plain");
    if (status == 503) res.set_header("Retry-After", std::to_string(limits.retry_after_s));
  }

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> refuse(tcp::socket s);
};

// One request and its response, shared by the connection (I/O thread) and the handler thread.
struct Exchange {
  Exchange(HttpServer::Impl& s) : srv(s) {}
  ~Exchange() {
    srv.inflight -= reserved;
    // A large body and its working memory are freed: give the pages back once no other large
    // request is in flight (the allocator keeps them otherwise). On a handler thread, never the
    // I/O thread.
    if (reserved >= kLargeBody && --srv.large_inflight == 0) srv.pool.post([] { malloc_trim(0); });
  }
  bool reserve_more(size_t total) {  // the body budget must cover `total` bytes
    if (total <= reserved) return true;
    const size_t add = std::max(total - reserved, std::min(kChunkedStep, srv.limits.max_body));
    if (!srv.reserve(add)) return false;
    if (reserved < kLargeBody && reserved + add >= kLargeBody) ++srv.large_inflight;
    reserved += add;
    return true;
  }

  HttpServer::Impl& srv;
  size_t reserved = 0;
  Request req;
  Response res;
  bool head_only = false;  // HEAD: the headers of the GET answer only
  bool http10 = false;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> out;  // framed bytes for the connection to write
  size_t pending = 0;            // bytes in `out` or being written
  bool head_queued = false;
  int status = 0;                // as sent (0: nothing sent)
  bool finished = false;         // every byte of the response is in `out`
  bool close = false;            // close the connection after the response
  std::atomic<bool> broken{false};  // the connection failed or closed: nothing more is written
  std::atomic<bool> gone{false};    // the client closed its end
  std::function<void()> wake;       // tells the connection that `out` or `finished` changed

  void queue_whole_response() {
    std::lock_guard<std::mutex> lk(mu);
    close = close || http10 || res.status >= 400;
    status = res.status;
    std::string head = response_head(res, res.body.size(), false, close, srv.limits.idle_timeout_s);
    pending += head.size() + (head_only ? 0 : res.body.size());
    out.push_back(std::move(head));
    if (!head_only && !res.body.empty()) out.push_back(std::move(res.body));
    head_queued = finished = true;
  }
};

thread_local Exchange* t_exchange = nullptr;  // the exchange this handler thread serves

namespace {

// The sink a content provider writes to: chunks are framed here and queued for the connection;
// write() waits while more than kMaxPending bytes are queued (a client reading slowly), and
// fails when it stays so for the write timeout or the connection broke.
class ExchangeSink final : public DataSink {
 public:
  explicit ExchangeSink(Exchange& ex) : ex_(ex), chunked_(!ex.http10) {}
  bool write(const char* data, size_t n) override {
    if (ex_.broken) return false;
    if (n == 0) return true;
    std::string bytes;
    {
      std::unique_lock<std::mutex> lk(ex_.mu);
      if (!ex_.cv.wait_for(lk, seconds(ex_.srv.limits.write_timeout_s),
                           [&] { return ex_.broken || ex_.pending < kMaxPending; })) {
        ex_.broken = true;
        lk.unlock();
        ex_.wake();
        return false;
      }
      if (ex_.broken) return false;
      head(bytes);
      if (chunked_) {
        char len[20];
        std::snprintf(len, sizeof len, "%zx\r\n", n);
        bytes += len;
      }
      bytes.append(data, n);
      if (chunked_) bytes += "\r\n";
      ex_.pending += bytes.size();
      ex_.out.push_back(std::move(bytes));
    }
    ex_.wake();
    return true;
  }
  void done() override { done_ = true; }
  bool is_done() const { return done_; }

  // After the provider: the last chunk; or, abandoned, a close without it (and without any
  // answer when nothing was written yet).
  void finish(bool ok) {
    std::string bytes;
    {
      std::lock_guard<std::mutex> lk(ex_.mu);
      if (!ok) ex_.close = true;
      if (ok) head(bytes);
      if (ok && chunked_) bytes += "0\r\n\r\n";
      ex_.pending += bytes.size();
      if (!bytes.empty()) ex_.out.push_back(std::move(bytes));
      ex_.finished = true;
    }
    ex_.wake();
  }

 private:
  void head(std::string& bytes) {  // with ex_.mu held
    if (ex_.head_queued) return;
    ex_.head_queued = true;
    ex_.status = ex_.res.status;
    if (!chunked_) ex_.close = true;  // an HTTP/1.0 stream ends with the connection
    bytes = response_head(ex_.res, std::string::npos, chunked_, ex_.close, ex_.srv.limits.idle_timeout_s);
  }
  Exchange& ex_;
  bool chunked_;
  bool done_ = false;
};

// Runs a handler and its content provider (a handler thread, or the I/O thread for fast routes).
void run_handler(Exchange& ex, const Handler& h) {
  t_exchange = &ex;
  try {
    h(ex.req, ex.res);
  } catch (const std::exception& e) {
    ex.srv.write_error(ex.req, ex.res, 500, std::string("internal error: ") + e.what());
  } catch (...) {
    ex.srv.write_error(ex.req, ex.res, 500, "internal error");
  }
  ex.req.body = std::string();  // the body is the handler's alone; its memory goes now
  if (!ex.res.provider || ex.head_only) {
    if (ex.res.on_done) ex.res.on_done(false);
    ex.res.provider = nullptr;
    ex.queue_whole_response();
    ex.wake();
  } else {
    ExchangeSink sink(ex);
    bool ok = true;
    while (!sink.is_done()) {
      try {
        ok = ex.res.provider(sink) && !ex.broken;
      } catch (...) {
        ok = false;
      }
      if (!ok) break;
    }
    if (ex.res.on_done) ex.res.on_done(ok);
    sink.finish(ok);
  }
  t_exchange = nullptr;
}

}  // namespace

// ---- a connection ----

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(HttpServer::Impl& s, tcp::socket sock, std::string ip)
      : s_(s), sock_(std::move(sock)), deadline_(s.io), wake_(s.io), ip_(std::move(ip)) {}

  asio::awaitable<void> serve();
  // Server stop: wake the coroutine, which closes the connection.
  void abort() {
    aborted_ = true;
    error_code ec;
    sock_.cancel(ec);
    wake_.cancel();
    if (ex_) {
      ex_->broken = true;
      ex_->cv.notify_all();
    }
  }
  const std::string& ip() const { return ip_; }
  bool responding() const { return ex_ != nullptr; }

 private:
  enum class Got { Data, Eof, Timeout, Stop };

  // The one read on the socket: whatever arrives goes to buf_ and wakes the coroutine; EOF marks
  // the current exchange's client as gone. Armed again while buf_ has room.
  void watch() {
    if (watching_ || eof_ || buf_.size() >= buf_limit()) return;
    watching_ = true;
    sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
      self->watching_ = false;
      if (ec) return;  // cancelled
      self->on_readable();
    });
  }
  void on_readable() {
    error_code ec;
    // Small reads until a body is being read: a stalled connection holds 4 KiB, not 64.
    const size_t want = bulk_ ? kReadChunk : std::max<size_t>(4096, buf_.size());
    const size_t room = std::min(want, buf_limit() - buf_.size());
    const size_t n = sock_.read_some(buf_.prepare(room), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) return watch();
    if (ec || n == 0) {
      eof_ = true;
      if (ex_) {
        ex_->gone = true;
        ex_->cv.notify_all();
      }
    } else {
      buf_.commit(n);
      watch();
    }
    wake_.cancel();
  }
  size_t buf_limit() const { return s_.limits.max_header_bytes + 2 * kReadChunk; }

  // Deadline for the current step: when it passes, the coroutine wakes with expired_ set (and a
  // pending write is cancelled).
  void arm(Clock::time_point t) {
    due_ = t;
    expired_ = false;
    deadline_.expires_at(t);
    deadline_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || Clock::now() < self->due_) return;  // re-armed since
      self->expired_ = true;
      error_code e;
      self->sock_.cancel(e);
      self->wake_.cancel();
    });
  }
  void disarm() {
    due_ = Clock::time_point::max();
    deadline_.cancel();
  }

  // Sleeps until something happens: bytes, EOF, the deadline, the server stopping, or news from
  // the handler thread. Callers check their condition first.
  asio::awaitable<void> wait() {
    watch();
    wake_.expires_at(Clock::time_point::max());
    error_code ec;
    co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  // Waits until buf_ holds more than `have` bytes.
  asio::awaitable<Got> more(size_t have) {
    for (;;) {
      if (s_.stopping) co_return Got::Stop;
      if (buf_.size() > have) co_return Got::Data;
      if (eof_) co_return Got::Eof;
      if (expired_) co_return Got::Timeout;
      co_await wait();
    }
  }
  asio::awaitable<bool> write_all(std::string_view bytes, bool own_deadline) {
    while (!bytes.empty()) {
      if (own_deadline) arm(Clock::now() + seconds(s_.limits.write_timeout_s));
      error_code ec;
      const size_t n =
          co_await sock_.async_write_some(asio::buffer(bytes.data(), bytes.size()), asio::redirect_error(asio::use_awaitable, ec));
      if (ec || expired_ || aborted_) co_return false;
      bytes.remove_prefix(n);
    }
    if (own_deadline) disarm();
    co_return true;
  }

  asio::awaitable<bool> read_request(std::shared_ptr<Exchange>& ex);
  asio::awaitable<bool> respond(std::shared_ptr<Exchange> ex);
  asio::awaitable<void> refuse_request(Exchange& ex, int status, const std::string& msg);
  void dispatch(const std::shared_ptr<Exchange>& ex);
  asio::awaitable<void> linger_close();
  std::string late() const {
    return strprintf("the request did not arrive completely within %g s", s_.limits.request_timeout_s);
  }
  std::string_view data() const {
    return {static_cast<const char*>(buf_.data().data()), buf_.size()};
  }

  HttpServer::Impl& s_;
  tcp::socket sock_;
  asio::steady_timer deadline_, wake_;
  Clock::time_point due_ = Clock::time_point::max();
  boost::beast::flat_buffer buf_;
  std::string ip_;
  std::shared_ptr<Exchange> ex_;  // the request being handled
  bool watching_ = false, eof_ = false, expired_ = false, aborted_ = false;
  bool bulk_ = false;  // reading a body
};

asio::awaitable<void> Conn::serve() {
  const HttpLimits& L = s_.limits;
  error_code ec;
  sock_.set_option(tcp::no_delay(true), ec);
  sock_.non_blocking(true, ec);
  for (int served = 0; served < L.keep_alive_max && !s_.stopping; ++served) {
    // Wait for the first byte of the next request; an idle connection is closed quietly.
    arm(Clock::now() + seconds(served == 0 ? L.request_timeout_s : L.idle_timeout_s));
    if (co_await more(0) != Got::Data) break;
    arm(Clock::now() + seconds(L.request_timeout_s));  // the whole request, from its first byte
    auto ex = std::make_shared<Exchange>(s_);
    ex->close = served + 1 == L.keep_alive_max;
    if (!co_await read_request(ex)) break;
    disarm();
    if (!co_await respond(ex)) break;
    if (buf_.size() == 0) buf_.shrink_to_fit();  // an idle connection holds no buffer
  }
  co_await linger_close();
}

// Reads one request into `ex`; false when the connection is to be closed (an error was answered,
// or there is nobody to answer).
asio::awaitable<bool> Conn::read_request(std::shared_ptr<Exchange>& ex) {
  const HttpLimits& L = s_.limits;
  Request& req = ex->req;
  req.remote_addr = ip_;

  // The head, delimited and checked here before Beast parses it.
  HeadScanner scanner(L.max_request_line, L.max_header_bytes);
  Refusal why;
  size_t head_len = 0;
  for (;;) {
    buf_.consume(HeadScanner::leading_empty_lines(data()));
    if ((head_len = scanner.scan(data(), why)) > 0 || why) break;
    const Got g = co_await more(buf_.size());
    if (g == Got::Timeout)
      why = {408, late()};
    if (g == Got::Eof && buf_.size() > 0) why = {400, "the connection ended inside the request head"};
    if (g != Got::Data) break;
  }
  if (!why && head_len == 0) co_return false;
  if (!why) why = check_head_lines(data().substr(0, head_len));

  bhttp::request_parser<bhttp::string_body> p;
  p.header_limit(static_cast<std::uint32_t>(L.max_header_bytes + 4));
  // Checked below, once the path is known (for the route's error shape). Not boost::none: Beast
  // 1.74 compares a Content-Length with it as larger than any limit.
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  p.eager(true);
  if (!why) {
    error_code ec;
    p.put(asio::buffer(data().data(), head_len), ec);
    buf_.consume(head_len);
    if (ec) why = {400, "malformed HTTP request: " + ec.message()};
  }
  if (!why) {
    const auto& m = p.get();
    req.method = std::string(m.method_string());
    req.target = std::string(m.target());
    for (const auto& f : m) req.headers.push_back({std::string(f.name_string()), std::string(f.value())});
    ex->http10 = m.version() < 11;
    ex->close = ex->close || !m.keep_alive();
    why = check_fields(req.headers, m.version());
    if (!why) req.path = target_path(req.target, req.method, why);
    if (!why && p.content_length().value_or(0) > L.max_body)
      why = {413, "the request body is larger than " + std::to_string(L.max_body) + " bytes"};
    p.body_limit(L.max_body);
  }
  if (!why && p.is_done() && (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") &&
      !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding"))
    why = {411, "a " + req.method + " request needs a Content-Length header (or chunked transfer coding)"};
  if (!why && !p.is_done()) {
    // The body: counted against the in-flight budget as it is known (Content-Length) or arrives.
    if (!ex->reserve_more(p.content_length().value_or(0)))
      why = {503, "the server is busy: too many request bytes in flight; retry later"};
    const std::string expect = req.get_header_value("Expect");
    if (!why && !expect.empty()) {
      if (!header_name_equal(expect, "100-continue"))
        why = {417, "Expect: " + expect.substr(0, 64) + " is not supported (only 100-continue)"};
      else if (buf_.size() == 0 && !co_await write_all("HTTP/1.1 100 Continue\r\n\r\n", false))
        co_return false;
    }
    bulk_ = true;
    while (!why && !p.is_done()) {
      error_code ec;
      const size_t used = buf_.size() ? p.put(buf_.data(), ec) : 0;
      buf_.consume(used);
      if (ec == bhttp::error::body_limit) {
        why = {413, "the request body is larger than " + std::to_string(L.max_body) + " bytes"};
      } else if (ec && ec != bhttp::error::need_more) {
        why = {400, "malformed HTTP request body: " + ec.message()};
      } else if (!ex->reserve_more(p.get().body().size())) {
        why = {503, "the server is busy: too many request bytes in flight; retry later"};
      } else if (!p.is_done()) {
        if (buf_.size() > 2 * L.max_request_line) {  // a chunk header that never ends
          why = {400, "malformed HTTP request body: a chunk header is too long"};
          break;
        }
        const Got g = co_await more(buf_.size());
        if (g == Got::Timeout)
          why = {408, late()};
        else if (g == Got::Eof)
          why = {400, "the connection ended inside the request body"};
        else if (g == Got::Stop)
          co_return false;
      }
    }
    bulk_ = false;
    if (!why) req.body = std::move(p.get().body());
  }
  if (why) {
    if (why.status == 503) ++s_.refused;
    co_await refuse_request(*ex, why.status, why.message);
    co_return false;
  }
  if (s_.stopping) ex->close = true;
  co_return true;
}

asio::awaitable<void> Conn::refuse_request(Exchange& ex, int status, const std::string& msg) {
  s_.write_error(ex.req, ex.res, status, msg);
  ex.close = true;
  ex.queue_whole_response();
  disarm();
  std::vector<std::string> out;
  out.swap(ex.out);
  for (const std::string& b : out)
    if (!co_await write_all(b, true)) break;
  if (s_.observer) s_.observer(ex.req, status);
}

void Conn::dispatch(const std::shared_ptr<Exchange>& ex) {
  Request& req = ex->req;
  auto it = s_.routes.find(req.path);
  const Route* r = it == s_.routes.end() ? nullptr : &it->second;
  const bool get = req.method == "GET" || req.method == "HEAD";
  ex->head_only = req.method == "HEAD";
  const Handler* h = r ? (get ? &r->get : req.method == "POST" ? &r->post : nullptr) : nullptr;
  if (h && !*h) h = nullptr;
  const bool fast = h && get && r->get_fast;

  std::weak_ptr<Conn> self = shared_from_this();
  asio::io_context& io = s_.io;
  ex->wake = [self, &io] {
    asio::post(io, [self] {
      if (auto c = self.lock()) c->wake_.cancel();
    });
  };
  static const char* const known[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"};
  if (std::none_of(std::begin(known), std::end(known), [&](const char* m) { return req.method == m; })) {
    s_.write_error(ex->req, ex->res, 501, "method " + req.method.substr(0, 32) + " is not implemented");
    ex->queue_whole_response();
    return;
  }
  if (s_.pre_routing && s_.pre_routing(req, ex->res)) {
    ex->queue_whole_response();
    return;
  }
  if (!h) {
    std::string allow;
    if (r && r->get) allow = "GET, HEAD";
    if (r && r->post) allow += allow.empty() ? "POST" : ", POST";
    if (r) {
      s_.write_error(ex->req, ex->res, 405, "method " + req.method + " is not allowed on " + req.path + " (use " + allow + ")");
      ex->res.set_header("Allow", allow);
    } else {
      s_.write_error(ex->req, ex->res, 404, "unknown route: " + req.method + " " + req.path.substr(0, 200));
    }
    ex->queue_whole_response();
    return;
  }
  if (fast) {
    run_handler(*ex, *h);
    return;
  }
  const Handler handler = *h;
  if (!s_.pool.try_post([ex, handler] { run_handler(*ex, handler); }, static_cast<size_t>(std::max(0, s_.limits.backlog)))) {
    ++s_.refused;
    s_.write_error(ex->req, ex->res, 503, "the server is busy: every handler thread is taken and their queue is full; retry later");
    ex->queue_whole_response();
  }
}

// Hands the request over and writes what comes back; false when the connection is to be closed.
asio::awaitable<bool> Conn::respond(std::shared_ptr<Exchange> ex) {
  ex_ = ex;
  dispatch(ex);
  bool ok = true;
  for (;;) {
    std::vector<std::string> batch;
    bool fin;
    {
      std::lock_guard<std::mutex> lk(ex->mu);
      batch.swap(ex->out);
      fin = ex->finished;
    }
    size_t written = 0;
    for (const std::string& b : batch) {
      if (!ok) break;
      ok = co_await write_all(b, true);
      written += b.size();
    }
    if (!batch.empty()) {
      std::lock_guard<std::mutex> lk(ex->mu);
      ex->pending -= std::min(ex->pending, written);
      ex->cv.notify_all();
    }
    if (!ok || ex->broken) break;
    if (batch.empty()) {
      if (fin) break;
      co_await wait();
    }
  }
  if (!ok || ex->broken) {
    ex->broken = true;
    ex->cv.notify_all();
  }
  ex_.reset();
  bool keep;
  int status;
  {
    std::lock_guard<std::mutex> lk(ex->mu);
    keep = ok && ex->finished && !ex->close && !ex->broken;
    status = ex->status ? ex->status : 499;
  }
  if (s_.observer) s_.observer(ex->req, status);
  co_return keep;
}

// Half-closes, then discards what the client still sends (up to a limit), so that it reads our
// last response instead of a reset caused by unread data; then closes.
asio::awaitable<void> Conn::linger_close() {
  error_code ec;
  sock_.shutdown(tcp::socket::shutdown_send, ec);
  arm(Clock::now() + seconds(kLingerS));
  size_t drained = 0;
  while (!ec && drained < kLingerBytes) {
    drained += buf_.size();
    buf_.consume(buf_.size());
    if (co_await more(0) != Got::Data) break;
  }
  disarm();
  sock_.close(ec);
  wake_.cancel();
}

// ---- accepting ----

asio::awaitable<void> HttpServer::Impl::accept_loop() {
  for (;;) {
    error_code ec;
    tcp::socket sock = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (stopping) co_return;
    if (ec) {
      // Out of descriptors (or a transient failure): wait instead of spinning.
      asio::steady_timer t(io, std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    std::string ip = sock.remote_endpoint(ec).address().to_string();
    if (ec) continue;
    int& from_ip = per_ip[ip];
    if (open >= limits.max_connections || (limits.max_connections_per_ip > 0 && from_ip >= limits.max_connections_per_ip)) {
      if (from_ip == 0) per_ip.erase(ip);
      ++refused;
      asio::co_spawn(io, refuse(std::move(sock)), asio::detached);
      continue;
    }
    ++from_ip;
    ++open;
    auto c = std::make_shared<Conn>(*this, std::move(sock), ip);
    conns.insert(c);
    asio::co_spawn(io, c->serve(), [this, c](std::exception_ptr) {
      conns.erase(c);
      if (--per_ip[c->ip()] == 0) per_ip.erase(c->ip());
      --open;
      if (stopping && conns.empty()) drain_end.cancel();
    });
  }
}

// A connection over the limits: a 503, then close (after reading what the client already sent).
asio::awaitable<void> HttpServer::Impl::refuse(tcp::socket s) {
  Response res;
  write_error(Request{}, res, 503, "the server has too many open connections; retry later");
  const std::string bytes = response_head(res, res.body.size(), false, true, 0) + res.body;
  asio::steady_timer t(io, std::chrono::seconds(1));
  t.async_wait([&s](error_code ec) {
    if (!ec) s.cancel(ec);
  });
  error_code ec;
  co_await asio::async_write(s, asio::buffer(bytes), asio::redirect_error(asio::use_awaitable, ec));
  s.shutdown(tcp::socket::shutdown_send, ec);
  char sink[4096];
  while (!ec) co_await s.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
  t.cancel();
  s.close(ec);
}

// ---- HttpServer ----

HttpServer::HttpServer(const HttpLimits& limits) : impl_(std::make_unique<Impl>(limits)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::Get(const std::string& path, Handler h, bool fast) {
  impl_->routes[path].get = std::move(h);
  impl_->routes[path].get_fast = fast;
}

void HttpServer::Post(const std::string& path, Handler h) { impl_->routes[path].post = std::move(h); }

void HttpServer::set_pre_routing(std::function<bool(const Request&, Response&)> fn) { impl_->pre_routing = std::move(fn); }

void HttpServer::set_error_writer(std::function<void(const Request&, Response&, int, const std::string&)> fn) {
  impl_->error_writer = std::move(fn);
}

void HttpServer::set_observer(std::function<void(const Request&, int)> fn) { impl_->observer = std::move(fn); }

int HttpServer::bind(const std::string& host, int port) {
  error_code ec;
  const auto addr = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) fail("--host %s: not an IP address", host.c_str());
  tcp::acceptor& a = impl_->acceptor;
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  // A deep accept queue, so that a burst of connections is not dropped by the kernel (clients would
  // stall for seconds in SYN retransmits).
  if (!ec) a.listen(1024, ec);
  if (ec) fail("cannot bind %s:%d: %s", host.c_str(), port, ec.message().c_str());
  return a.local_endpoint().port();
}

void HttpServer::run() {
  Impl& s = *impl_;
  if (s.stop_requested) return;
  s.pool.start(s.limits.threads);
  asio::co_spawn(s.io, s.accept_loop(), asio::detached);
  s.io.run();
  s.pool.join();
}

void HttpServer::stop(std::chrono::milliseconds drain) {
  Impl& s = *impl_;
  if (s.stop_requested.exchange(true)) return;
  asio::post(s.io, [&s, drain] {
    s.stopping = true;
    error_code ec;
    s.acceptor.close(ec);
    auto abort_all = [&s](bool idle_only) {
      for (const auto& c : s.conns)
        if (!idle_only || !c->responding()) c->abort();
    };
    abort_all(true);
    if (s.conns.empty()) return;
    s.drain_end.expires_after(drain);
    s.drain_end.async_wait([abort_all](error_code e) {
      if (!e) abort_all(false);
    });
  });
}

int HttpServer::open_connections() const { return impl_->open.load(); }
long long HttpServer::refused_connections() const { return impl_->refused.load(); }
size_t HttpServer::inflight_bytes() const { return impl_->inflight.load(); }

bool HttpServer::peer_gone() { return t_exchange && (t_exchange->gone || t_exchange->broken); }

}  // namespace k3::server
