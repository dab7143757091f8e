// A raw HTTP/1.1 client for the transport tests: a loopback TCP socket (optionally from another
// 127.x address, to act as another client for the per-address limit), bytes sent as given, and a
// reader that splits what comes back into responses (Content-Length or chunked). Every wait is
// bounded.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace k3::server::test {

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class RawConn {
 public:
  explicit RawConn(int port, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket");
    if (from) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &a.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("bind");
    }
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &s.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&s), sizeof s) != 0) throw std::runtime_error("connect");
  }
  ~RawConn() { close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  // False when the server has closed (or reset) the connection.
  bool send(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads what arrives within `ms` (returns early once something came); false on timeout.
  bool fill(int ms) {
    if (eof_) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }

  // The next whole response (head_only: the answer to HEAD, without a body); nullopt if the
  // connection closed first or `ms` passed.
  std::optional<Reply> reply(int ms = 5000, bool head_only = false) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      if (auto r = take(head_only)) return r;
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      if (left <= 0 || eof_) return std::nullopt;
      fill(left);
    }
  }

  // Waits up to `ms` for the server to close the connection; what arrives meanwhile is kept.
  bool closed_within(int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!eof_) {
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      if (left <= 0) return false;
      fill(left);
    }
    return true;
  }
  // Bytes received and not yet taken as a response.
  const std::string& rest() const { return in_; }

 private:
  std::optional<Reply> take(bool head_only) {
    const size_t end = in_.find("\r\n\r\n");
    if (end == std::string::npos) return std::nullopt;
    Reply r;
    if (in_.compare(0, 9, "HTTP/1.1 ") != 0) throw std::runtime_error("not an HTTP/1.1 response: " + in_.substr(0, 40));
    r.status = std::stoi(in_.substr(9, 3));
    for (size_t p = in_.find("\r\n") + 2; p < end;) {
      size_t e = in_.find("\r\n", p);
      std::string line = in_.substr(p, e - p);
      size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
      p = e + 2;
    }
    size_t at = end + 4;
    if (r.status == 100 || head_only) {
      in_.erase(0, at);
      return r;
    }
    if (r.header("transfer-encoding") == "chunked") {
      for (;;) {
        size_t e = in_.find("\r\n", at);
        if (e == std::string::npos) return std::nullopt;
        const size_t n = std::stoul(in_.substr(at, e - at), nullptr, 16);
        if (in_.size() < e + 2 + n + 2) return std::nullopt;
        r.body.append(in_, e + 2, n);
        at = e + 2 + n + 2;
        if (n == 0) break;
      }
    } else {
      const size_t n = r.headers.count("content-length") ? std::stoul(r.header("content-length")) : 0;
      if (in_.size() < at + n) return std::nullopt;
      r.body = in_.substr(at, n);
      at += n;
    }
    in_.erase(0, at);
    return r;
  }

  int fd_ = -1;
  std::string in_;
  bool eof_ = false;
};

}  // namespace k3::server::test
