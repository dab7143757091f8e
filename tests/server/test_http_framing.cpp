// The framing rules k3 adds to Beast's parser (server/http_framing.h), as pure functions: where a
// head ends whatever pieces it arrives in, which limit an over-long head breaks, and the checks on
// the request line and fields.
#include <gtest/gtest.h>

#include "server/http_framing.h"

using namespace k3::server;

namespace {

// Feeds `bytes` in pieces of `step` bytes; returns the head length (0: none) and the refusal.
std::pair<size_t, int> scan_in_pieces(const std::string& bytes, size_t step, size_t max_line = 64, size_t max_head = 256) {
  HeadScanner sc(max_line, max_head);
  Refusal why;
  for (size_t n = std::min(step, bytes.size());; n = std::min(n + step, bytes.size())) {
    const size_t len = sc.scan(std::string_view(bytes).substr(0, n), why);
    if (len || why || n == bytes.size()) return {len, why.status};
  }
}

TEST(HttpFraming, HeadEndIsFoundWhateverThePieces) {
  const std::string head = "GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\n";
  for (const std::string& tail : {std::string(), std::string("body"), std::string("GET /next")})
    for (size_t step = 1; step <= head.size() + tail.size(); ++step)
      EXPECT_EQ(scan_in_pieces(head + tail, step), std::make_pair(head.size(), 0)) << "step " << step;
  EXPECT_EQ(scan_in_pieces("GET / HTTP/1.1\r\n\r\n", 1), std::make_pair(size_t(18), 0));
  EXPECT_EQ(scan_in_pieces("GET / HTTP/1.1\r\nHost: x\r\n", 1), std::make_pair(size_t(0), 0));  // not yet
}

TEST(HttpFraming, RefusalsWhateverThePieces) {
  const std::string long_line = "GET /" + std::string(100, 'a') + " HTTP/1.1\r\n\r\n";
  const std::string long_head = "GET / HTTP/1.1\r\nX: " + std::string(300, 'b') + "\r\n\r\n";
  for (size_t step : {size_t(1), size_t(7), size_t(1000)}) {
    EXPECT_EQ(scan_in_pieces(long_line, step).second, 414) << step;
    EXPECT_EQ(scan_in_pieces(long_line.substr(0, 90), step).second, 414) << "unfinished line, step " << step;
    EXPECT_EQ(scan_in_pieces(long_head, step).second, 431) << step;
    EXPECT_EQ(scan_in_pieces("GET / HTTP/1.1\nHost: x\r\n\r\n", step).second, 400) << step;
    EXPECT_EQ(scan_in_pieces("GET / HTTP/1.1\r\nHost: x\n\r\n", step).second, 400) << step;
    EXPECT_EQ(scan_in_pieces("GET / HTTP/1.1\r\nHost:\rx\r\n\r\n", step).second, 400) << step;
  }
  // Exactly at the limits is fine.
  const std::string at_line = "GET /" + std::string(64 - 15, 'a') + " HTTP/1.1\r\n\r\n";
  EXPECT_EQ(scan_in_pieces(at_line, 1).second, 0);
  EXPECT_EQ(HeadScanner::leading_empty_lines("\r\n\r\nGET"), 4u);
  EXPECT_EQ(HeadScanner::leading_empty_lines("\r\nGET"), 2u);
  EXPECT_EQ(HeadScanner::leading_empty_lines("\rGET"), 0u);
}

TEST(HttpFraming, HeadLines) {
  EXPECT_FALSE(check_head_lines("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_FALSE(check_head_lines("GET / HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(check_head_lines("GET / HTTP/2.0\r\nHost: x\r\n\r\n").status, 505);
  EXPECT_EQ(check_head_lines("GET / HTTP/3.0\r\n\r\n").status, 505);
  EXPECT_EQ(check_head_lines("GET / HTTP/1.1\r\nA: 1\r\n 2\r\n\r\n").status, 400);
  EXPECT_EQ(check_head_lines("GET / HTTP/1.1\r\nA: 1\r\n\t2\r\n\r\n").status, 400);
  EXPECT_EQ(check_head_lines("GET / HTTP/1.1\r\n Host: x\r\n\r\n").status, 400);
}

TEST(HttpFraming, Fields) {
  using H = std::vector<Header>;
  EXPECT_FALSE(check_fields(H{{"Host", "x"}, {"Content-Length", "12"}}, 11));
  EXPECT_FALSE(check_fields(H{{"host", "x"}, {"transfer-encoding", "Chunked"}}, 11));
  EXPECT_FALSE(check_fields(H{}, 10));
  EXPECT_EQ(check_fields(H{{"Host", "x"}, {"Content-Length", "1"}, {"content-length", "1"}}, 11).status, 400);
  EXPECT_EQ(check_fields(H{{"Host", "x"}, {"Content-Length", "1,1"}}, 11).status, 400);
  EXPECT_EQ(check_fields(H{{"Host", "x"}, {"Content-Length", ""}}, 11).status, 400);
  EXPECT_EQ(check_fields(H{{"Host", "x"}, {"Transfer-Encoding", "gzip"}}, 11).status, 501);
  EXPECT_EQ(check_fields(H{{"Host", "x"}, {"Transfer-Encoding", "gzip, chunked"}}, 11).status, 501);
  EXPECT_EQ(check_fields(H{{"Transfer-Encoding", "chunked"}}, 10).status, 400);
  EXPECT_EQ(check_fields(H{}, 11).status, 400);
  EXPECT_EQ(check_fields(H{{"Host", "x"}, {"HOST", "y"}}, 11).status, 400);
  EXPECT_EQ(check_fields(H{{"Host", "x"}, {"Host", "y"}}, 10).status, 400);
}

TEST(HttpFraming, TargetPath) {
  Refusal why;
  EXPECT_EQ(target_path("/v1/models?x=1", "GET", why), "/v1/models");
  EXPECT_EQ(target_path("http://host:8080/health?x", "GET", why), "/health");
  EXPECT_EQ(target_path("HTTPS://host", "GET", why), "/");
  EXPECT_EQ(target_path("http://host?q", "GET", why), "/");
  EXPECT_EQ(target_path("*", "OPTIONS", why), "*");
  EXPECT_FALSE(why);
  target_path("*", "GET", why);
  EXPECT_EQ(why.status, 400);
  why = {};
  target_path("ftp://host/x", "GET", why);
  EXPECT_EQ(why.status, 400);
  why = {};
  target_path("health", "GET", why);
  EXPECT_EQ(why.status, 400);
}

}  // namespace
