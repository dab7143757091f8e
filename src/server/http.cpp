#include "server/http.h"

#include <algorithm>

namespace k3::server {

static char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool header_name_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

static const Header* find(const std::vector<Header>& hs, std::string_view name) {
  for (const Header& h : hs)
    if (header_name_equal(h.name, name)) return &h;
  return nullptr;
}

bool Request::has_header(std::string_view name) const { return find(headers, name) != nullptr; }

std::string Request::get_header_value(std::string_view name) const {
  const Header* h = find(headers, name);
  return h ? h->value : std::string();
}

void Response::set_header(std::string name, std::string value) {
  for (Header& h : headers)
    if (header_name_equal(h.name, name)) {
      h.value = std::move(value);
      return;
    }
  headers.push_back({std::move(name), std::move(value)});
}

void Response::set_content(std::string b, std::string type) {
  body = std::move(b);
  content_type = std::move(type);
}

void Response::set_chunked_content_provider(std::string type, ContentProvider p, std::function<void(bool)> done) {
  content_type = std::move(type);
  provider = std::move(p);
  on_done = std::move(done);
}

}  // namespace k3::server
