// The route-handler interface of `k3 serve` (docs/server.md, "Route handlers"): a handler gets
// the whole request (its body already read and de-chunked, within the limits) and fills in a
// Response: a status, headers and a body, or a content provider that writes the body piece by
// piece (SSE, large answers). Handlers run on a handler thread and may block; a provider is called
// on that same thread until it calls sink.done() or returns false. HttpServer::peer_gone() tells a
// handler or provider that its client has gone.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace k3::server {

struct Header {
  std::string name, value;
};

// Case-insensitive header lookup.
bool header_name_equal(std::string_view a, std::string_view b);

struct Request {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // target without the query (and without scheme://authority in absolute form)
  std::vector<Header> headers;  // in arrival order, names as sent
  std::string body;
  std::string remote_addr;

  bool has_header(std::string_view name) const;
  std::string get_header_value(std::string_view name) const;  // the first such header; "" if none
};

// Where a content provider writes the body. write() returns false when the client is gone or
// stopped reading for the write timeout: the provider should then return false.
class DataSink {
 public:
  virtual ~DataSink() = default;
  virtual bool write(const char* data, size_t n) = 0;
  bool write(std::string_view s) { return write(s.data(), s.size()); }
  virtual void done() = 0;  // the body is complete
};

// Called repeatedly until it calls sink.done() (then once more is never needed) or returns false
// (the response is abandoned and the connection closed). It should wait briefly for data rather
// than return at once when it has nothing to write.
using ContentProvider = std::function<bool(DataSink&)>;

struct Response {
  int status = 200;
  std::vector<Header> headers;  // besides Content-Type / Content-Length / Transfer-Encoding / Connection
  std::string content_type;
  std::string body;
  ContentProvider provider;               // set: the body comes from it (chunked transfer coding)
  std::function<void(bool ok)> on_done;   // after the provider ended (ok: done() was called)

  void set_header(std::string name, std::string value);  // replaces one of the same name
  void set_content(std::string body, std::string content_type);
  void set_chunked_content_provider(std::string content_type, ContentProvider p,
                                    std::function<void(bool ok)> done = {});
};

using Handler = std::function<void(const Request&, Response&)>;

}  // namespace k3::server
