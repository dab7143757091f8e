#include "server/api.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

namespace k3::server {

void bad_request(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

static const char* default_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

json error_body(int status, const std::string& message, const std::string& param, const std::string& type) {
  json e;
  e["message"] = message;
  e["type"] = type.empty() ? default_type(status) : type;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = nullptr;
  return json{{"error", std::move(e)}};
}

// Anthropic's names for the same statuses (its API answers overload with 529; k3 keeps 503, which
// its SDKs retry alike).
static const char* anthropic_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

json anthropic_error_body(int status, const std::string& message, const std::string& type) {
  const std::string t = type.empty() || type == "server_error" ? anthropic_type(status) : type;
  return json{{"type", "error"}, {"error", {{"type", t}, {"message", message}}}};
}

json error_body_for(std::string_view path, int status, const std::string& message, const std::string& param,
                    const std::string& type) {
  if (path == "/v1/messages" || path.rfind("/v1/messages/", 0) == 0) return anthropic_error_body(status, message, type);
  return error_body(status, message, param, type);
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += digits[rng() % 62];
  return s;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json parse_body(std::string_view body, int max_depth) {
  size_t first = body.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) bad_request("", "the request body is empty; expected a JSON object");
  // The DOM costs ~16 bytes a value (and up to twice that while arrays grow): a body of 8 MiB of
  // "1," would take ~130 MB. No request needs more values than the 1 Mi token ids /detokenize
  // takes, so more are refused before parsing (one value per ',' and per container, a bound).
  constexpr size_t kMaxValues = (size_t{1} << 20) + (size_t{1} << 16);
  int depth = 0;
  size_t values = 1;
  bool in_str = false, esc = false;
  for (size_t i = first; i < body.size(); ++i) {
    const char c = body[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      ++values;
      if (++depth > max_depth)
        bad_request("", "the request body nests arrays/objects deeper than " + std::to_string(max_depth) +
                            " levels (at byte " + std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && ++values > kMaxValues) {
      bad_request("", "the request body holds more than " + std::to_string(kMaxValues) + " JSON values");
    }
  }
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    std::string m = e.what();
    if (size_t p = m.find("] "); m.rfind("[json.exception.", 0) == 0 && p != std::string::npos) m = m.substr(p + 2);
    bad_request("", "the request body is not valid JSON: " + m);
  }
  if (!j.is_object()) bad_request("", std::string("the request body must be a JSON object, not ") + type_name(j));
  return j;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      unsigned char lo = 0x80, hi = 0xBF;
      if (k == 1 && c == 0xE0) lo = 0xA0;
      if (k == 1 && c == 0xED) hi = 0x9F;
      if (k == 1 && c == 0xF0) lo = 0x90;
      if (k == 1 && c == 0xF4) hi = 0x8F;
      if (d < lo || d > hi) return false;
    }
    i += len;
  }
  return true;
}

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

Fields::Fields(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
  if (!obj_.is_object())
    bad_request(path_, (path_.empty() ? std::string("the request") : std::string("'") + path_ + "'") + " must be an object, not " +
                           type_name(obj_));
}

void Fields::only(std::initializer_list<std::string_view> known) const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    bool ok = false;
    for (auto k : known) ok = ok || it.key() == k;
    if (!ok) {
      const std::string n = path_.empty() ? it.key() : path_ + "." + it.key();
      bad_request(n, "unknown field '" + n + "'");
    }
  }
}

bool Fields::has(const char* key) const {
  auto it = obj_.find(key);
  return it != obj_.end() && !it->is_null();
}

const json& Fields::at(const char* key) const { return obj_.at(key); }

std::string Fields::name(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

static std::string must_be(const std::string& name, const char* what, const json& got) {
  return std::string("'") + name + "' must be " + what + ", not " + type_name(got);
}

std::string Fields::str(const char* key, const std::string& def, bool required) const {
  if (!has(key)) {
    if (required) bad_request(name(key), std::string("'") + name(key) + "' is required");
    return def;
  }
  const json& v = at(key);
  if (!v.is_string()) bad_request(name(key), must_be(name(key), "a string", v));
  return v.get<std::string>();
}

bool Fields::boolean(const char* key, bool def) const {
  if (!has(key)) return def;
  const json& v = at(key);
  if (!v.is_boolean()) bad_request(name(key), must_be(name(key), "a boolean", v));
  return v.get<bool>();
}

static std::string num_str(double x) {
  if (std::fabs(x) < 1e15 && x == std::floor(x)) return std::to_string(static_cast<long long>(x));
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

double Fields::number(const char* key, double def, double lo, double hi) const {
  if (!has(key)) return def;
  const json& v = at(key);
  if (!v.is_number()) bad_request(name(key), must_be(name(key), "a number", v));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    bad_request(name(key), std::string("'") + name(key) + "' must be between " + num_str(lo) + " and " + num_str(hi) + ", got " +
                               num_str(x));
  return x;
}

int64_t Fields::integer(const char* key, int64_t def, int64_t lo, int64_t hi) const {
  if (!has(key)) return def;
  const json& v = at(key);
  int64_t x = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad_request(name(key), std::string("'") + name(key) + "' is out of range");
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
             std::fabs(v.get<double>()) < 9e15) {
    x = static_cast<int64_t>(v.get<double>());
  } else {
    bad_request(name(key), must_be(name(key), "an integer", v));
  }
  if (x < lo || x > hi)
    bad_request(name(key), std::string("'") + name(key) + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                               ", got " + std::to_string(x));
  return x;
}

const json& Fields::object(const char* key) const {
  if (!has(key)) bad_request(name(key), std::string("'") + name(key) + "' is required");
  const json& v = at(key);
  if (!v.is_object()) bad_request(name(key), must_be(name(key), "an object", v));
  return v;
}

const json& Fields::array(const char* key) const {
  if (!has(key)) bad_request(name(key), std::string("'") + name(key) + "' is required");
  const json& v = at(key);
  if (!v.is_array()) bad_request(name(key), must_be(name(key), "an array", v));
  return v;
}

}  // namespace k3::server
