// Request-level errors and JSON checking for the HTTP API: every problem with a request becomes
// an ApiError with an HTTP status and, where it is about one field, the field's path
// ("messages[2].content"), reported in the shape of the route's protocol (OpenAI's, or
// Anthropic's on /v1/messages).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace k3::server {

using json = nlohmann::ordered_json;

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = {}, std::string type = {})
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param;
  std::string type;  // default from the status
};

[[noreturn]] void bad_request(const std::string& param, const std::string& message);

// {"error": {"message", "type", "param", "code"}}
json error_body(int status, const std::string& message, const std::string& param = {}, const std::string& type = {});
// {"type": "error", "error": {"type", "message"}} with Anthropic's type names; the field path,
// which that shape has no place for, is in the message.
json anthropic_error_body(int status, const std::string& message, const std::string& type = {});
// The error body for a request to `path`: Anthropic's shape under /v1/messages, else OpenAI's.
json error_body_for(std::string_view path, int status, const std::string& message, const std::string& param = {},
                    const std::string& type = {});
// Compact JSON; invalid UTF-8 in strings becomes U+FFFD (model output may hold any bytes).
std::string dump(const json& j);

// Parses a request body. Rejects (400) nesting deeper than max_depth and more values than any
// route takes (~1 M) before parsing, so hostile input can exhaust neither the stack nor memory,
// then any syntax error or invalid UTF-8, with its byte offset.
json parse_body(std::string_view body, int max_depth);

// Typed access to the fields of one JSON object, for validation with precise messages. A field
// that is null counts as absent (OpenAI's convention for optional parameters).
class Fields {
 public:
  // `path` names the object in messages ("" for the request itself).
  Fields(const json& obj, std::string path);

  // 400 naming the first key that is not in `known`.
  void only(std::initializer_list<std::string_view> known) const;
  bool has(const char* key) const;
  const json& at(const char* key) const;  // only after has()
  std::string name(const char* key) const;

  std::string str(const char* key, const std::string& def, bool required = false) const;
  bool boolean(const char* key, bool def) const;
  double number(const char* key, double def, double lo, double hi) const;
  int64_t integer(const char* key, int64_t def, int64_t lo, int64_t hi) const;
  const json& object(const char* key) const;  // must be present and an object
  const json& array(const char* key) const;   // must be present and an array

 private:
  const json& obj_;
  std::string path_;
};

bool valid_utf8(std::string_view s);

// prefix + 24 random alphanumerics ("chatcmpl-…", "msg_…", "toolu_…").
std::string random_id(const char* prefix);
int64_t unix_now();

// "array" / "object" / "string" / ... as a client would say it.
const char* type_name(const json& j);

}  // namespace k3::server
