#include "server/http_framing.h"

#include <algorithm>

namespace k3::server {

static Refusal refuse(int status, std::string message) { return Refusal{status, std::move(message)}; }

size_t HeadScanner::leading_empty_lines(std::string_view buf) {
  size_t i = 0;
  while (i + 1 < buf.size() && buf[i] == '\r' && buf[i + 1] == '\n') i += 2;
  return i;
}

size_t HeadScanner::scan(std::string_view buf, Refusal& why) {
  for (size_t i = pos_; i < buf.size(); ++i) {
    const char c = buf[i];
    if (c == '\r') {
      if (i + 1 == buf.size()) break;  // decide when the next byte is here
      if (buf[i + 1] != '\n') {
        why = refuse(400, "malformed HTTP request: a CR not followed by LF");
        return 0;
      }
      continue;
    }
    if (c != '\n') continue;
    if (i == 0 || buf[i - 1] != '\r') {
      why = refuse(400, "malformed HTTP request: a line ends in a bare LF (CRLF required)");
      return 0;
    }
    if (line_end_ == 0) {
      line_end_ = i + 1;
      if (line_end_ > max_line_ + 2) break;
    } else if (i >= 3 && buf[i - 2] == '\n') {
      pos_ = i + 1;
      if (i + 1 > max_head_) break;
      return i + 1;
    }
  }
  pos_ = buf.size();
  // A trailing CR was not scanned as a line end yet.
  if (!buf.empty() && buf.back() == '\r') pos_ = buf.size() - 1;
  if ((line_end_ == 0 && buf.size() > max_line_ + 2) || line_end_ > max_line_ + 2)
    why = refuse(414, "the request line is longer than " + std::to_string(max_line_) + " bytes");
  else if (buf.size() > max_head_ || pos_ > max_head_)
    why = refuse(431, "the request line and headers are larger than " + std::to_string(max_head_) + " bytes");
  return 0;
}

Refusal check_head_lines(std::string_view head) {
  const size_t eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const size_t sp = line.rfind(' ');
  if (sp != std::string_view::npos) {
    const std::string_view v = line.substr(sp + 1);
    // HTTP-version = "HTTP/" DIGIT "." DIGIT; other shapes are Beast's to reject (400).
    if (v.size() == 8 && v.compare(0, 5, "HTTP/") == 0 && v[6] == '.' && v[5] >= '0' && v[5] <= '9' && v[5] != '1' &&
        v[7] >= '0' && v[7] <= '9')
      return refuse(505, "HTTP version " + std::string(v.substr(5)) + " is not supported (HTTP/1.1 only)");
  }
  for (size_t i = eol; i != std::string_view::npos && i + 2 < head.size(); i = head.find("\r\n", i + 2))
    if (head[i + 2] == ' ' || head[i + 2] == '\t')
      return refuse(400, "malformed HTTP request: obsolete line folding (a header line starting with whitespace)");
  return {};
}

static std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Refusal check_fields(const std::vector<Header>& headers, unsigned version) {
  int n_length = 0, n_host = 0;
  for (const Header& h : headers) {
    if (header_name_equal(h.name, "Content-Length")) {
      const std::string_view v = trim(h.value);
      if (++n_length > 1) return refuse(400, "malformed HTTP request: more than one Content-Length header");
      // Digits only (Beast refuses one that overflows 64 bits).
      if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return refuse(400, "malformed HTTP request: Content-Length must be a decimal number");
    } else if (header_name_equal(h.name, "Transfer-Encoding")) {
      if (version < 11) return refuse(400, "malformed HTTP request: Transfer-Encoding in an HTTP/1.0 request");
      const std::string_view v = trim(h.value);
      if (!header_name_equal(v, "chunked"))
        return refuse(501, "transfer coding '" + std::string(v.substr(0, 64)) + "' is not supported (only chunked)");
    } else if (header_name_equal(h.name, "Host")) {
      ++n_host;
    }
  }
  if (n_host > 1) return refuse(400, "malformed HTTP request: more than one Host header");
  if (version >= 11 && n_host == 0) return refuse(400, "malformed HTTP request: an HTTP/1.1 request needs a Host header");
  return {};
}

std::string target_path(std::string_view target, std::string_view method, Refusal& why) {
  if (target == "*") {
    if (method == "OPTIONS") return "*";
    why = refuse(400, "malformed HTTP request: the target '*' is only for OPTIONS");
    return {};
  }
  if (!target.empty() && target[0] != '/') {
    // absolute-form: scheme "://" authority [path]
    const size_t scheme = target.find("://");
    std::string_view s = target.substr(0, scheme);
    if (scheme == std::string_view::npos || !(header_name_equal(s, "http") || header_name_equal(s, "https"))) {
      why = refuse(400, "malformed HTTP request: the target must be a path or an http URL");
      return {};
    }
    const size_t slash = target.find_first_of("/?", scheme + 3);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
    if (target[0] == '?') return "/";
  }
  return std::string(target.substr(0, target.find('?')));
}

}  // namespace k3::server
