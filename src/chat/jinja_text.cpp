#include "chat/jinja_text.h"

#include <algorithm>
#include <cstdio>

#include "chat/jinja_error.h"

namespace k3::jinja::text {
namespace {

uint32_t to_lower(uint32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x178) return 0xFF;
    bool even_upper = (c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if (even_upper) return (c % 2 == 0) ? c + 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

uint32_t to_upper(uint32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    bool even_upper = (c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if (even_upper) return (c % 2 == 1) ? c - 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    return c;
  }
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3C9) return c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

bool is_cased(uint32_t c) { return to_lower(c) != c || to_upper(c) != c || c == 0xDF; }

template <class F>
std::string map_chars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (auto ch : utf8_chars(s)) {
    uint32_t c = utf8_decode(ch);
    if (c == 0xFFFD && ch != "\xEF\xBF\xBD") {
      out += ch;  // keep invalid bytes as they are
      continue;
    }
    utf8_append(out, f(c));
  }
  return out;
}

}  // namespace

std::string lower(std::string_view s) { return map_chars(s, to_lower); }
std::string upper(std::string_view s) { return map_chars(s, to_upper); }
std::string swapcase(std::string_view s) {
  return map_chars(s, [](uint32_t c) { return to_lower(c) != c ? to_lower(c) : to_upper(c); });
}

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_chars(s, [&](uint32_t c) {
    uint32_t r = first ? to_upper(c) : to_lower(c);
    first = false;
    return r;
  });
}

std::string title(std::string_view s) {
  bool prev_cased = false;
  return map_chars(s, [&](uint32_t c) {
    uint32_t r = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = is_cased(c);
    return r;
  });
}

bool is_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  auto cs = utf8_chars(s);
  std::vector<std::string_view> set;
  if (chars) set = utf8_chars(*chars);
  auto strip_it = [&](std::string_view ch) {
    if (!chars) return is_space(utf8_decode(ch));
    return std::find(set.begin(), set.end(), ch) != set.end();
  };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strip_it(cs[b])) b++;
  if (right)
    while (e > b && strip_it(cs[e - 1])) e--;
  if (b == e) return "";
  const char* start = cs[b].data();
  const char* end = cs[e - 1].data() + cs[e - 1].size();
  return std::string(start, static_cast<size_t>(end - start));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) render_error("empty separator");
    if (!from_right) {
      size_t p = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t q = s.find(*sep, p);
        if (q == std::string_view::npos) break;
        out.emplace_back(s.substr(p, q - p));
        p = q + sep->size();
      }
      out.emplace_back(s.substr(p));
      return out;
    }
    size_t end = s.size();
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      if (end < sep->size()) break;
      size_t q = s.rfind(*sep, end - sep->size());
      if (q == std::string_view::npos) break;
      out.emplace_back(s.substr(q + sep->size(), end - q - sep->size()));
      end = q;
      n++;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  auto cs = utf8_chars(s);
  auto sp = [&](size_t i) { return is_space(utf8_decode(cs[i])); };
  auto join = [&](size_t b, size_t e) {
    if (b >= e) return std::string();
    return std::string(cs[b].data(), static_cast<size_t>(cs[e - 1].data() + cs[e - 1].size() - cs[b].data()));
  };
  if (!from_right) {
    size_t i = 0, n = cs.size();
    while (true) {
      while (i < n && sp(i)) i++;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(join(i, n));
        break;
      }
      size_t j = i;
      while (j < n && !sp(j)) j++;
      out.push_back(join(i, j));
      i = j;
    }
    return out;
  }
  size_t i = cs.size();
  while (true) {
    while (i > 0 && sp(i - 1)) i--;
    if (i == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(join(0, i));
      break;
    }
    size_t j = i;
    while (j > 0 && !sp(j - 1)) j--;
    out.push_back(join(j, i));
    i = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  auto cs = utf8_chars(s);
  std::string line;
  for (size_t i = 0; i < cs.size(); i++) {
    uint32_t c = utf8_decode(cs[i]);
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      line += cs[i];
      continue;
    }
    std::string end(cs[i]);
    if (c == '\r' && i + 1 < cs.size() && cs[i + 1] == "\n") {
      end += "\n";
      i++;
    }
    out.push_back(keepends ? line + end : line);
    line.clear();
  }
  if (!line.empty()) out.push_back(line);
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` before every character and at the end.
    auto cs = utf8_chars(s);
    int64_t n = 0;
    for (auto c : cs) {
      if (count < 0 || n < count) {
        out += to;
        n++;
      }
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t p = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t q = s.find(from, p);
    if (q == std::string_view::npos) break;
    out.append(s.substr(p, q - p));
    out.append(to);
    p = q + from.size();
    n++;
  }
  out.append(s.substr(p));
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

struct Spec {
  std::string flags;
  int width = -1;
  int prec = -1;
  char type = 's';
};

std::string pad(std::string s, int width, char align, char fill) {
  int len = static_cast<int>(utf8_length(s));
  if (width <= len) return s;
  size_t n = static_cast<size_t>(width - len);
  std::string f;
  for (size_t i = 0; i < n; i++) utf8_append(f, static_cast<unsigned char>(fill));
  if (align == '<') return s + f;
  if (align == '^') {
    std::string l, r;
    for (size_t i = 0; i < n / 2; i++) l += fill;
    for (size_t i = 0; i < n - n / 2; i++) r += fill;
    return l + s + r;
  }
  return f + s;
}

std::string format_number(const Value& v, char type, const std::string& flags, int prec) {
  char fmt[32], buf[512];
  std::string fl;
  for (char c : flags)
    if (c == '+' || c == ' ' || c == '#') fl += c;
  if (type == 'd' || type == 'i' || type == 'x' || type == 'X' || type == 'o') {
    if (!v.is_number()) render_error(std::string("%") + type + " format: a number is required, not " + v.type_name());
    long long n = v.is_float() ? static_cast<long long>(v.as_double()) : static_cast<long long>(v.as_int());
    std::snprintf(fmt, sizeof fmt, "%%%sll%c", fl.c_str(), type == 'i' ? 'd' : type);
    std::snprintf(buf, sizeof buf, fmt, n);
    return buf;
  }
  if (!v.is_number()) render_error(std::string("%") + type + " format: a real number is required, not " + v.type_name());
  std::snprintf(fmt, sizeof fmt, "%%%s.%d%c", fl.c_str(), prec < 0 ? 6 : std::min(prec, 100), type);
  std::snprintf(buf, sizeof buf, fmt, v.as_double());
  return buf;
}

}  // namespace

std::string percent_format(std::string_view fmt, const std::vector<Value>& args) {
  std::string out;
  size_t ai = 0;
  for (size_t i = 0; i < fmt.size(); i++) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) render_error("incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    Spec sp;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) sp.flags += fmt[i++];
    while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') sp.width = std::max(sp.width, 0) * 10 + (fmt[i++] - '0');
    if (i < fmt.size() && fmt[i] == '.') {
      i++;
      sp.prec = 0;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') sp.prec = sp.prec * 10 + (fmt[i++] - '0');
    }
    if (i >= fmt.size()) render_error("incomplete format");
    sp.type = fmt[i];
    if (ai >= args.size()) render_error("not enough arguments for format string");
    const Value& v = args[ai++];
    std::string s;
    switch (sp.type) {
      case 's': s = v.str(); if (sp.prec >= 0) s = s.substr(0, static_cast<size_t>(sp.prec)); break;
      case 'r': s = v.repr(); break;
      case 'c': s = v.is_string() ? v.as_string() : std::string(1, static_cast<char>(v.as_int())); break;
      case 'd': case 'i': case 'x': case 'X': case 'o': case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
        s = format_number(v, sp.type, sp.flags, sp.prec);
        break;
      default: render_error(std::string("unsupported format character '") + sp.type + "'");
    }
    bool left = sp.flags.find('-') != std::string::npos;
    bool zero = sp.flags.find('0') != std::string::npos && sp.type != 's' && !left;
    if (zero && sp.width > static_cast<int>(s.size())) {
      size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) ? 1 : 0;
      s.insert(sign, std::string(static_cast<size_t>(sp.width) - s.size(), '0'));
    }
    out += pad(s, sp.width, left ? '<' : '>', ' ');
  }
  if (ai < args.size()) render_error("not all arguments converted during string formatting");
  return out;
}

std::string brace_format(std::string_view fmt, const Args& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); i++) {
    char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') i++;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      i++;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string_view::npos) render_error("Single '{' encountered in format string");
    std::string field(fmt.substr(i + 1, close - i - 1));
    i = close;
    std::string spec;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_idx < args.pos.size() ? &args.pos[auto_idx] : nullptr;
      auto_idx++;
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t k = std::stoul(field);
      v = k < args.pos.size() ? &args.pos[k] : nullptr;
    } else {
      v = args.kwarg(field);
    }
    if (!v) render_error("format: no value for field '{" + field + "}'");
    // [[fill]align][sign][0][width][.precision][type]
    size_t p = 0;
    char fill = ' ', align = v->is_number() ? '>' : '<';
    if (spec.size() >= 2 && std::string_view("<>^").find(spec[1]) != std::string_view::npos) {
      fill = spec[0];
      align = spec[1];
      p = 2;
    } else if (!spec.empty() && std::string_view("<>^").find(spec[0]) != std::string_view::npos) {
      align = spec[0];
      p = 1;
    }
    std::string flags;
    if (p < spec.size() && (spec[p] == '+' || spec[p] == ' ' || spec[p] == '-')) flags += spec[p++];
    if (p < spec.size() && spec[p] == '0') {
      fill = '0';
      align = '>';
      p++;
    }
    int width = -1, prec = -1;
    while (p < spec.size() && spec[p] >= '0' && spec[p] <= '9') width = std::max(width, 0) * 10 + (spec[p++] - '0');
    if (p < spec.size() && spec[p] == '.') {
      p++;
      prec = 0;
      while (p < spec.size() && spec[p] >= '0' && spec[p] <= '9') prec = prec * 10 + (spec[p++] - '0');
    }
    char type = p < spec.size() ? spec[p] : '\0';
    std::string s;
    if (type == '\0' || type == 's') {
      s = v->str();
      if (prec >= 0 && v->is_string()) s = s.substr(0, static_cast<size_t>(prec));
      if (prec >= 0 && v->is_float()) s = format_number(*v, 'g', flags, prec);
    } else if (type == '%') {
      s = format_number(Value(v->as_double() * 100), 'f', flags, prec) + "%";
    } else {
      s = format_number(*v, type, flags, prec);
    }
    out += pad(s, width, align, fill);
  }
  return out;
}

}  // namespace k3::jinja::text
