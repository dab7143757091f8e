// The RFC 9112 rules k3's transport enforces on top of Boost.Beast's request parser (which already
// rejects bare LF, a space before a colon, a line without a colon, invalid characters, conflicting
// or malformed Content-Length and Transfer-Encoding with Content-Length): the head is delimited
// here first, so that over-long request lines (414) and heads (431) are told apart and obsolete
// line folding and other HTTP versions are refused before Beast sees them; then the parsed fields
// are checked for what Beast lets through (a repeated Content-Length, unknown transfer codings,
// Host).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "server/http.h"

namespace k3::server {

struct Refusal {
  int status = 0;  // 0: no objection
  std::string message;
  explicit operator bool() const { return status != 0; }
};

// Finds the end of a request head in bytes that arrive piece by piece (call again with the grown
// buffer; work is proportional to the new bytes).
class HeadScanner {
 public:
  HeadScanner(size_t max_request_line, size_t max_head) : max_line_(max_request_line), max_head_(max_head) {}
  // Empty lines before the request line, which RFC 9112 §2.2 lets a server ignore: drop them first.
  static size_t leading_empty_lines(std::string_view buf);
  // 0: need more bytes; otherwise the head's length including the blank line. A refusal when the
  // request line or head is too long, or a line ends in a bare LF or CR.
  size_t scan(std::string_view buf, Refusal& why);

 private:
  size_t max_line_, max_head_;
  size_t pos_ = 0;           // bytes already scanned
  size_t line_end_ = 0;      // end of the request line once seen (0: not yet)
};

// Checks on the raw head before it is parsed: a supported HTTP version (505), no obsolete line
// folding (400).
Refusal check_head_lines(std::string_view head);

// Checks on the parsed fields (version 10 or 11): at most one Content-Length, of digits only; no
// Transfer-Encoding but "chunked" (501), and none in HTTP/1.0; exactly one Host in HTTP/1.1, at
// most one in 1.0.
Refusal check_fields(const std::vector<Header>& headers, unsigned version);

// The path a request target names: origin form "/p?q" → "/p", absolute form
// "http://host/p?q" → "/p", "*" only for OPTIONS. A refusal for anything else.
std::string target_path(std::string_view target, std::string_view method, Refusal& why);

}  // namespace k3::server
