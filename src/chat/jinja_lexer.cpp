#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cstdlib>

#include "chat/jinja_error.h"
#include "chat/jinja_value.h"

namespace k3::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void rstrip_ws(std::string& s) {
  while (!s.empty() && is_ws(s.back())) s.pop_back();
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& opts, const std::string& name) : opts_(opts), name_(name) {
    // Jinja2 normalizes newlines and drops one trailing newline.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); i++) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') i++;
      } else {
        src_ += source[i];
      }
    }
    if (!opts_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); i++)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool strip_next = false;  // the previous tag ended with '-'
    while (pos <= src_.size()) {
      size_t start = find_tag(pos);
      size_t text_start = pos;
      std::string text = src_.substr(pos, (start == std::string::npos ? src_.size() : start) - pos);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_ws(text[k])) k++;
        text.erase(0, k);
        text_start += k;
        strip_next = false;
      }
      if (start == std::string::npos) {
        emit_text(text, text_start);
        break;
      }
      char kind = src_[start + 1];
      char mod = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (mod == '-') {
        rstrip_ws(text);
      } else if (opts_.lstrip_blocks && kind != '{' && mod != '+') {
        size_t nl = text.rfind('\n');
        size_t seg = nl == std::string::npos ? 0 : nl + 1;
        bool line_start = nl != std::string::npos || text_start == 0 || src_[text_start - 1] == '\n';
        bool blank = std::all_of(text.begin() + static_cast<std::ptrdiff_t>(seg), text.end(),
                                 [](char c) { return c == ' ' || c == '\t'; });
        if (line_start && blank) text.resize(seg);
      }
      emit_text(text, text_start);
      size_t inner = start + 2 + ((mod == '-' || (mod == '+' && kind != '{')) ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(start, inner, strip_next);
      } else if (kind == '%' && is_raw(inner)) {
        pos = lex_raw(start, inner, strip_next);
      } else {
        pos = lex_tag(start, inner, kind == '{', strip_next);
      }
    }
    Token eof{TokType::Eof, "", 0, 0, 0, 0};
    locate(eof, src_.size());
    toks_.push_back(eof);
    return std::move(toks_);
  }

 private:
  size_t find_tag(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void locate(Token& t, size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    size_t li = static_cast<size_t>(it - line_starts_.begin()) - 1;
    t.line = static_cast<int>(li + 1);
    t.col = static_cast<int>(off - line_starts_[li] + 1);
  }

  [[noreturn]] void error(const std::string& msg, size_t off) const {
    Token t;
    locate(t, off);
    throw TemplateError(TemplateError::Kind::Syntax, msg, t.line, t.col, name_);
  }

  void emit_text(const std::string& text, size_t off) {
    if (text.empty()) return;
    Token t{TokType::Text, text};
    locate(t, off);
    toks_.push_back(std::move(t));
  }

  void push(TokType type, std::string text, size_t off) {
    Token t{type, std::move(text)};
    locate(t, off);
    toks_.push_back(std::move(t));
  }

  // After a block or comment end at `pos` (just past the closing brace): trim_blocks.
  size_t after_block_end(size_t pos, char end_mod) const {
    if (end_mod == '\0' && opts_.trim_blocks && pos < src_.size() && src_[pos] == '\n') return pos + 1;
    return pos;
  }

  size_t lex_comment(size_t start, size_t inner, bool& strip_next) {
    size_t end = src_.find("#}", inner);
    if (end == std::string::npos) error("unterminated comment", start);
    char end_mod = (end > inner && (src_[end - 1] == '-' || src_[end - 1] == '+')) ? src_[end - 1] : '\0';
    strip_next = end_mod == '-';
    return after_block_end(end + 2, end_mod);
  }

  // `{% raw %}` at `inner`?
  bool is_raw(size_t inner) const {
    size_t p = inner;
    while (p < src_.size() && is_ws(src_[p])) p++;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && is_name_char(src_[p])) return false;
    while (p < src_.size() && is_ws(src_[p])) p++;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) p++;
    return src_.compare(p, 2, "%}") == 0;
  }

  size_t lex_raw(size_t start, size_t inner, bool& strip_next) {
    size_t close = src_.find("%}", inner);
    char open_end_mod = (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    size_t body = after_block_end(close + 2, open_end_mod);
    // Find `{%[-+]? endraw [-+]?%}`.
    size_t p = body;
    while (true) {
      size_t q = src_.find("{%", p);
      if (q == std::string::npos) error("missing endraw for raw block", start);
      size_t r = q + 2;
      char mod = (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ? src_[r] : '\0';
      if (mod) r++;
      while (r < src_.size() && is_ws(src_[r])) r++;
      if (src_.compare(r, 6, "endraw") == 0) {
        r += 6;
        while (r < src_.size() && is_ws(src_[r])) r++;
        char end_mod = (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ? src_[r] : '\0';
        if (end_mod) r++;
        if (src_.compare(r, 2, "%}") == 0) {
          std::string text = src_.substr(body, q - body);
          if (open_end_mod == '-') {
            size_t k = 0;
            while (k < text.size() && is_ws(text[k])) k++;
            text.erase(0, k);
          }
          if (mod == '-') {
            rstrip_ws(text);
          } else if (opts_.lstrip_blocks && mod != '+') {
            size_t nl = text.rfind('\n');
            if (nl != std::string::npos &&
                std::all_of(text.begin() + static_cast<std::ptrdiff_t>(nl + 1), text.end(),
                            [](char c) { return c == ' ' || c == '\t'; }))
              text.resize(nl + 1);
          }
          emit_text(text, body);
          strip_next = end_mod == '-';
          return after_block_end(r + 2, end_mod);
        }
      }
      p = q + 2;
    }
  }

  size_t lex_tag(size_t start, size_t pos, bool is_var, bool& strip_next) {
    push(is_var ? TokType::VarBegin : TokType::BlockBegin, "", start);
    int depth = 0;
    while (true) {
      while (pos < src_.size() && is_ws(src_[pos])) pos++;
      if (pos >= src_.size()) error(is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'", start);
      if (depth == 0) {
        const char* close = is_var ? "}}" : "%}";
        char c = src_[pos];
        if ((c == '-' || (c == '+' && !is_var)) && src_.compare(pos + 1, 2, close) == 0) {
          push(is_var ? TokType::VarEnd : TokType::BlockEnd, "", pos);
          strip_next = c == '-';
          pos += 3;
          return is_var ? pos : after_block_end(pos, c);
        }
        if (src_.compare(pos, 2, close) == 0) {
          push(is_var ? TokType::VarEnd : TokType::BlockEnd, "", pos);
          pos += 2;
          return is_var ? pos : after_block_end(pos, '\0');
        }
      }
      char c = src_[pos];
      if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        size_t e = pos;
        while (e < src_.size() && is_name_char(src_[e])) e++;
        push(TokType::Name, src_.substr(pos, e - pos), pos);
        pos = e;
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (src_.compare(pos, 2, t) == 0) op = t;
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
            error(std::string("unexpected character '") + c + "'", pos);
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') depth++;
          if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
        }
        push(TokType::Op, op, pos);
        pos += op.size();
      }
    }
  }

  size_t lex_number(size_t pos) {
    size_t e = pos;
    auto digits = [&] {
      while (e < src_.size() && (is_digit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && is_digit(src_[e + 1]))))
        e++;
    };
    digits();
    bool is_float = false;
    bool after_dot = !toks_.empty() && toks_.back().type == TokType::Op && toks_.back().text == ".";
    if (!after_dot) {
      if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
        is_float = true;
        e++;
        digits();
      }
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t k = e + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) k++;
        if (k < src_.size() && is_digit(src_[k])) {
          is_float = true;
          e = k;
          digits();
        }
      }
    }
    std::string text;
    for (size_t i = pos; i < e; i++)
      if (src_[i] != '_') text += src_[i];
    Token t{is_float ? TokType::Float : TokType::Int, text};
    locate(t, pos);
    if (is_float) {
      t.fval = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.ival = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) error("integer literal out of range", pos);
    }
    toks_.push_back(std::move(t));
    return e;
  }

  // Python string literal with unicode-escape decoding (what Jinja2 applies).
  size_t lex_string(size_t pos) {
    char q = src_[pos];
    std::string out;
    size_t i = pos + 1;
    while (true) {
      if (i >= src_.size()) error("unterminated string", pos);
      char c = src_[i];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        i++;
        continue;
      }
      if (i + 1 >= src_.size()) error("unterminated string", pos);
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (int k = 0; k < n; k++) {
            int h = i < src_.size() ? hex_val(src_[i]) : -1;
            if (h < 0) error(std::string("truncated \\") + e + " escape in string", i);
            cp = cp * 16 + static_cast<uint32_t>(h);
            i++;
          }
          if (cp > 0x10FFFF) error("illegal Unicode character in string", i);
          utf8_append(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; k++)
              cp = cp * 8 + static_cast<uint32_t>(src_[i++] - '0');
            utf8_append(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    push(TokType::String, out, pos);
    return i + 1;
  }

  std::string src_;
  LexOptions opts_;
  const std::string& name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const LexOptions& opts, const std::string& name) {
  return Lexer(source, opts, name).run();
}

}  // namespace k3::jinja
