// Boost.Beast 1.74 probe for bench/http/transport.mjs (docs/server.md, "Why Boost.Beast"): one io
// thread, a coroutine per connection, one 2 s deadline per request, header limit 64 KiB, body
// limit 8 MiB; Beast's parser as it is, nothing added. GET /health, POST anything (body length).
// Built by hand, not by CMake:  g++ -std=c++20 -O2 bench/http/beast_probe.cpp -o /tmp/beast_probe -lpthread
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <cstdio>
namespace asio = boost::asio; namespace beast = boost::beast; namespace http = beast::http;
using tcp = asio::ip::tcp;
asio::awaitable<void> session(tcp::socket s) {
  beast::tcp_stream st(std::move(s));
  beast::flat_buffer buf(64 << 10);
  for (;;) {
    http::request_parser<http::string_body> p;
    p.header_limit(64 << 10);
    p.body_limit(8 << 20);
    st.expires_after(std::chrono::seconds(2));
    beast::error_code ec;
    co_await http::async_read(st, buf, p, asio::redirect_error(asio::use_awaitable, ec));
    http::response<http::string_body> r;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout && !p.got_some()) break;
    if (ec) { r.result(ec == http::error::body_limit ? 413 : ec == beast::error::timeout ? 408 : 400); r.keep_alive(false); }
    else if (p.get().target() == "/health") r.body() = "{\"status\":\"ok\"}";
    else r.body() = "{\"bytes\":" + std::to_string(p.get().body().size()) + "}";
    if (!ec) r.keep_alive(p.get().keep_alive());
    r.set(http::field::content_type, "application/json");
    r.prepare_payload();
    co_await http::async_write(st, r, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !r.keep_alive()) break;
  }
  beast::error_code ec2;
  st.socket().shutdown(tcp::socket::shutdown_send, ec2);
}
asio::awaitable<void> listener(tcp::acceptor a) {
  for (;;) {
    tcp::socket s = co_await a.async_accept(asio::use_awaitable);
    asio::co_spawn(a.get_executor(), session(std::move(s)), asio::detached);
  }
}
int main(int argc, char** argv) {
  int port = argc > 1 ? atoi(argv[1]) : 18082;
  asio::io_context io(1);
  tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), (unsigned short)port});
  a.listen(1024);
  fprintf(stderr, "listening on http://127.0.0.1:%d\n", port);
  asio::co_spawn(io, listener(std::move(a)), asio::detached);
  io.run();
}
