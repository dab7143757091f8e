// libFuzzer target: arbitrary bytes as a request through what k3 serve's transport does before a
// handler sees it: the head delimited by HeadScanner (fed in two pieces, which must give the
// answer one piece gives), the raw-line and field rules of http_framing, Beast's parser on the
// head and then the body. Nothing may crash; the framing rules must be deterministic.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http_framing.h"

using namespace k3::server;
namespace bhttp = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t split = size ? data[0] % (size + 1) : 0;
  HeadScanner pieces(256, 4096), whole(256, 4096);
  Refusal why_pieces, why_whole;
  size_t head = pieces.scan(in.substr(0, split), why_pieces);
  if (!head && !why_pieces) head = pieces.scan(in, why_pieces);
  const size_t head_whole = whole.scan(in, why_whole);
  if (head != head_whole || why_pieces.status != why_whole.status) {
    std::fprintf(stderr, "HeadScanner: split at %zu gives %zu/%d, whole input %zu/%d\n", split, head,
                 why_pieces.status, head_whole, why_whole.status);
    std::abort();
  }
  if (!head || why_whole) return 0;
  if (check_head_lines(in.substr(0, head))) return 0;

  bhttp::request_parser<bhttp::string_body> p;
  p.header_limit(8192);
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  p.eager(true);
  boost::system::error_code ec;
  p.put(boost::asio::buffer(in.data(), head), ec);
  if (ec) return 0;
  std::vector<Header> headers;
  for (const auto& f : p.get()) headers.push_back({std::string(f.name_string()), std::string(f.value())});
  if (check_fields(headers, p.get().version())) return 0;
  Refusal why;
  target_path(std::string_view(p.get().target().data(), p.get().target().size()),
              std::string_view(p.get().method_string().data(), p.get().method_string().size()), why);
  if (!p.is_done()) {
    p.body_limit(1 << 16);
    p.put(boost::asio::buffer(in.data() + head, size - head), ec);
  }
  return 0;
}
