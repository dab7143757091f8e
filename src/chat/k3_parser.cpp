#include "chat/k3_parser.h"

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <optional>

#include "chat/chat_template.h"

namespace k3::chat {
namespace {

constexpr std::string_view kMsgStart = "<|open|>message role=\"assistant\"<|sep|>";
constexpr std::string_view kThinkStart = "<|open|>think<|sep|>";
constexpr std::string_view kThinkEnd = "<|close|>think<|sep|>";
constexpr std::string_view kRespStart = "<|open|>response<|sep|>";
constexpr std::string_view kRespEnd = "<|close|>response<|sep|>";
constexpr std::string_view kToolsStart = "<|open|>tools<|sep|>";
constexpr std::string_view kToolsEnd = "<|close|>tools<|sep|>";
constexpr std::string_view kCallStart = "<|open|>call tool=\"";
constexpr std::string_view kCallEnd = "<|close|>call<|sep|>";
constexpr std::string_view kArgStart = "<|open|>argument key=\"";
constexpr std::string_view kArgEnd = "<|close|>argument<|sep|>";
constexpr std::string_view kMsgEnd = "<|close|>message<|sep|>";
constexpr std::string_view kEom = "<|end_of_msg|>";
constexpr std::string_view kSep = "<|sep|>";
constexpr std::string_view kSpecialTokens[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};

bool contains_special_token(std::string_view s) {
  for (auto t : kSpecialTokens)
    if (s.find(t) != std::string_view::npos) return true;
  return false;
}

// Turns bytes into valid UTF-8 (invalid bytes -> U+FFFD), keeping an incomplete sequence at the
// end until more bytes come. The result depends only on the bytes, not on how they were split.
class Utf8Sink {
 public:
  std::string take(std::string_view in, bool flush) {
    pending_.append(in);
    std::string out;
    size_t i = 0, n = pending_.size();
    auto byte = [&](size_t k) { return static_cast<unsigned char>(pending_[k]); };
    while (i < n) {
      unsigned char c = byte(i);
      if (c < 0x80) {
        out += static_cast<char>(c);
        i++;
        continue;
      }
      size_t len = 0;
      unsigned char lo = 0x80, hi = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) len = 2;
      else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
      } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
      }
      if (len == 0) {
        out += "\xEF\xBF\xBD";
        i++;
        continue;
      }
      size_t k = 1;
      bool bad = false;
      for (; k < len && i + k < n; k++) {
        unsigned char d = byte(i + k);
        bool ok = k == 1 ? (d >= lo && d <= hi) : (d >= 0x80 && d <= 0xBF);
        if (!ok) {
          bad = true;
          break;
        }
      }
      if (bad) {
        out += "\xEF\xBF\xBD";
        i += k;  // the lead and the valid continuation bytes before the bad one
        continue;
      }
      if (k < len) {  // incomplete at the end
        if (!flush) break;
        out += "\xEF\xBF\xBD";
        i = n;
        break;
      }
      out.append(pending_, i, len);
      i += len;
    }
    pending_.erase(0, i);
    return out;
  }

 private:
  std::string pending_;
};

void json_escape_to(std::string& out, std::string_view s) {
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
}

// The verbatim rewrite of a non-string argument value (chat.md §5): outside double-quoted
// strings, single-quoted strings become double-quoted and True/False/None (or a prefix of one)
// become true/false/null. A word is held until it ends, so streamed output never changes.
class RawValueWriter {
 public:
  std::string write(std::string_view s) {
    std::string out;
    for (char c : s) put(c, out);
    return out;
  }
  std::string end() {
    std::string out;
    flush_word(out);
    if (sq_escape_) out += '\\';
    sq_escape_ = false;
    return out;
  }

 private:
  static bool word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  void flush_word(std::string& out) {
    static const std::pair<std::string_view, std::string_view> map[] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
    for (const auto& [py, js] : map)
      if (!word_.empty() && word_.size() <= py.size() && py.compare(0, word_.size(), word_) == 0) {
        out += js.substr(0, word_.size());
        word_.clear();
        return;
      }
    out += word_;
    word_.clear();
  }
  void put(char c, std::string& out) {
    switch (mode_) {
      case Mode::Normal:
        if (word_char(c)) {
          word_ += c;
          return;
        }
        flush_word(out);
        if (c == '"') mode_ = Mode::Double;
        if (c == '\'') {
          mode_ = Mode::Single;
          c = '"';
        }
        out += c;
        return;
      case Mode::Double:
        out += c;
        if (dq_escape_) dq_escape_ = false;
        else if (c == '\\') dq_escape_ = true;
        else if (c == '"') mode_ = Mode::Normal;
        return;
      case Mode::Single:
        if (sq_escape_) {
          sq_escape_ = false;
          if (c == '\'') out += '\'';
          else (out += '\\') += c;
          return;
        }
        if (c == '\\') sq_escape_ = true;
        else if (c == '\'') {
          out += '"';
          mode_ = Mode::Normal;
        } else if (c == '"') out += "\\\"";
        else out += c;
        return;
    }
  }
  enum class Mode { Normal, Double, Single } mode_ = Mode::Normal;
  std::string word_;
  bool dq_escape_ = false, sq_escape_ = false;
};

struct FunctionSpec {
  std::map<std::string, bool> string_typed;  // property -> value is a JSON string
};

enum class St {
  MsgStart, ThinkOpen, ThinkBody, RespOpen, Content, AfterResp, ToolsFirst, CallName, CallRest,
  ArgOrCallEnd, ArgKey, ArgRest, ArgValue, NextCall, Trailer, Done, Failed,
};

enum class Match { Yes, No, More, Cut };

}  // namespace

struct K3StreamParser::Impl {
  K3ParserOptions opts;
  std::map<std::string, FunctionSpec> functions;
  bool tools_allowed = false, tools_required = false;

  std::string buf;
  size_t pos = 0;
  bool final = false;
  St st = St::MsgStart;
  ChatMessage msg;
  ChatDelta cur;

  Utf8Sink u_reasoning, u_content, u_value;
  std::string ws_hold;       // leading whitespace of the reasoning, until something else comes
  bool reasoning_started = false;
  size_t matched = 0;        // index of the marker a Match::Yes consumed
  size_t tools_pos = 0, call_pos = 0, arg_pos = 0, fail_pos = 0;
  bool first_arg = true, value_is_string = false, msg_end_seen = false;
  const FunctionSpec* fn = nullptr;
  RawValueWriter raw;

  explicit Impl(const K3ParserOptions& o) : opts(o) {
    for (const auto& t : opts.tools) {
      if (!t.is_object()) continue;
      const auto& f = (t.contains("function") && t["function"].is_object()) ? t["function"] : t;
      if (!f.contains("name") || !f["name"].is_string()) continue;
      FunctionSpec spec;
      if (f.contains("parameters") && f["parameters"].is_object() && f["parameters"].contains("properties") &&
          f["parameters"]["properties"].is_object()) {
        for (auto it = f["parameters"]["properties"].begin(); it != f["parameters"]["properties"].end(); ++it) {
          const auto& schema = it.value();
          bool raw_typed = schema.is_object() && schema.contains("type") && schema["type"].is_string() && schema["type"] != "string";
          spec.string_typed[it.key()] = !raw_typed;
        }
      }
      functions[f["name"].get<std::string>()] = std::move(spec);
    }
    bool choice_none = opts.tool_choice == "none";
    tools_allowed = !functions.empty() && !choice_none;
    tools_required = tools_allowed && opts.tool_choice != "auto";
    buf = k3_generation_prompt(opts.thinking);
  }

  // ---- emission ----

  void emit_content(std::string_view text, bool flush = false) {
    std::string s = u_content.take(text, flush);
    msg.content += s;
    cur.content += s;
  }

  void emit_reasoning(std::string_view text, bool flush = false) {
    if (!opts.extract_reasoning) return emit_content(text, flush);
    std::string s = u_reasoning.take(text, flush);
    if (!reasoning_started) {
      size_t k = s.find_first_not_of(" \t\r\n");
      if (k == std::string::npos) {
        ws_hold += s;
        return;
      }
      reasoning_started = true;
      s = ws_hold + s;
      ws_hold.clear();
    }
    msg.reasoning_content += s;
    cur.reasoning_content += s;
  }

  void end_reasoning() {
    emit_reasoning("", true);
    ws_hold.clear();
  }

  void emit_args(const std::string& s, bool opens = false) {
    size_t idx = msg.tool_calls.size() - 1;
    msg.tool_calls.back().arguments += s;
    if (!opens && !cur.tool_calls.empty() && cur.tool_calls.back().index == idx) {
      cur.tool_calls.back().arguments += s;
      return;
    }
    ToolCallDelta d;
    d.index = idx;
    d.opens = opens;
    if (opens) d.name = msg.tool_calls.back().name;
    d.arguments = s;
    cur.tool_calls.push_back(std::move(d));
  }

  void emit_value(std::string_view text, bool flush) {
    std::string s = u_value.take(text, flush);
    std::string out;
    if (value_is_string) json_escape_to(out, s);
    else out = raw.write(s);
    if (!out.empty()) emit_args(out);
  }

  // ---- matching ----

  std::string_view rest() const { return std::string_view(buf).substr(pos); }

  // Optional markers at pos: Yes (consumed; `matched` = its index), More (a proper prefix and
  // more input may come), Cut (final input ends inside a marker, holding a special token), No.
  Match match(std::initializer_list<std::string_view> markers) {
    std::string_view r = rest();
    bool prefix = false;
    size_t i = 0;
    for (auto m : markers) {
      if (r.substr(0, m.size()) == m) {
        pos += m.size();
        matched = i;
        return Match::Yes;
      }
      if (r.size() < m.size() && m.substr(0, r.size()) == r) prefix = true;
      i++;
    }
    if (!prefix) return Match::No;
    if (!final) return Match::More;
    return contains_special_token(r) ? Match::Cut : Match::No;
  }

  // Free text from pos up to the first terminator. Returns the terminator's index (pos is left
  // at it) or -1 when the input ends first; `text` gets what is certain to be text.
  int scan(std::initializer_list<std::string_view> ends, std::string& text) {
    size_t best = std::string::npos;
    int which = -1, i = 0;
    for (auto e : ends) {
      size_t p = buf.find(e, pos);
      if (p < best) {
        best = p;
        which = i;
      }
      i++;
    }
    if (which >= 0) {
      text = buf.substr(pos, best - pos);
      pos = best;
      return which;
    }
    size_t hold = buf.size();
    size_t longest = 0;
    for (auto e : ends) longest = std::max(longest, e.size());
    for (size_t s = buf.size() > longest ? buf.size() - longest + 1 : 0; s < buf.size(); s++) {
      if (s < pos || buf[s] != '<') continue;
      std::string_view tail = std::string_view(buf).substr(s);
      bool is_prefix = false;
      for (auto e : ends)
        if (tail.size() < e.size() && e.substr(0, tail.size()) == tail) is_prefix = true;
      if (is_prefix) {
        hold = s;
        break;
      }
    }
    if (final && hold < buf.size() && !contains_special_token(std::string_view(buf).substr(hold))) hold = buf.size();
    text = buf.substr(pos, hold - pos);
    pos = final ? buf.size() : hold;
    return -1;
  }

  void fail(size_t at, const std::string& why) {
    if (msg.error.empty()) msg.error = why;
    fail_pos = at;
    st = St::Failed;
  }

  // The text up to the next `"` of a call or argument tag; nullopt while it is incomplete.
  std::optional<std::string> quoted(bool& cut) {
    size_t q = buf.find('"', pos);
    cut = false;
    if (q == std::string::npos) {
      cut = final;
      return std::nullopt;
    }
    std::string s = buf.substr(pos, q - pos);
    pos = q + 1;
    return s;
  }

  bool skip_to_sep(bool& cut) {
    size_t q = buf.find(kSep, pos);
    cut = false;
    if (q == std::string::npos) {
      cut = final;
      return false;
    }
    pos = q + kSep.size();
    return true;
  }

  // Runs the state machine as far as the input allows.
  void run() {
    while (step()) {
    }
  }

  bool step() {
    std::string text;
    bool cut = false;
    switch (st) {
      case St::MsgStart:
      case St::ThinkOpen:
      case St::RespOpen: {
        std::string_view m = st == St::MsgStart ? kMsgStart : (st == St::ThinkOpen ? kThinkStart : kRespStart);
        Match r = match({m});
        if (r == Match::More) return false;
        if (r == Match::Cut) return done();
        st = st == St::MsgStart ? St::ThinkOpen : (st == St::ThinkOpen ? St::ThinkBody : St::Content);
        return true;
      }
      case St::ThinkBody: {
        int t = tools_allowed ? scan({kThinkEnd, kRespStart, kMsgEnd, kEom, kToolsStart}, text)
                              : scan({kThinkEnd, kRespStart, kMsgEnd, kEom}, text);
        emit_reasoning(text);
        if (t < 0) return false;
        end_reasoning();
        if (t == 0) {
          pos += kThinkEnd.size();
          st = St::RespOpen;
        } else if (t == 1) {
          pos += kRespStart.size();
          st = St::Content;
        } else {
          st = St::Content;  // the terminator also ends the (empty) content
        }
        return true;
      }
      case St::Content: {
        int t = scan({kRespEnd, kToolsStart, kMsgEnd, kEom}, text);
        emit_content(text);
        if (t < 0) return false;
        emit_content("", true);
        if (t == 0) {
          pos += kRespEnd.size();
          st = St::AfterResp;
        } else {
          st = t == 1 ? St::AfterResp : St::Trailer;
        }
        return true;
      }
      case St::AfterResp: {
        if (!tools_allowed) {
          st = St::Trailer;
          return true;
        }
        size_t at = pos;
        Match r = match({kToolsStart});
        if (r == Match::More) return false;
        if (r == Match::Cut) return done();
        if (r == Match::Yes) {
          tools_pos = at;
          st = St::ToolsFirst;
        } else {
          st = St::Trailer;
        }
        return true;
      }
      case St::ToolsFirst:
      case St::NextCall: {
        size_t at = pos;
        Match r = st == St::ToolsFirst ? match({kCallStart}) : match({kCallStart, kToolsEnd});
        if (r == Match::More) return false;
        if (r == Match::Cut) return done();
        if (r == Match::No) {
          fail(st == St::ToolsFirst ? tools_pos : at, "expected a <|open|>call tag in the tools section");
          return true;
        }
        if (matched == 1) {
          st = St::Trailer;
        } else {
          call_pos = at;
          st = St::CallName;
        }
        return true;
      }
      case St::CallName: {
        auto name = quoted(cut);
        if (!name) {
          if (cut) return done();
          if (name_may_match(rest())) return false;
          fail(section_start(), "call of an undeclared tool");
          return true;
        }
        auto it = functions.find(*name);
        if (it == functions.end()) {
          fail(section_start(), "call of an undeclared tool");
          return true;
        }
        fn = &it->second;
        msg.tool_calls.push_back(ToolCall{"", *name, ""});
        first_arg = true;
        emit_args("", true);
        st = St::CallRest;
        return true;
      }
      case St::CallRest:
      case St::ArgRest:
        if (!skip_to_sep(cut)) return cut ? done() : false;
        if (st == St::CallRest) {
          emit_args("{");
          st = St::ArgOrCallEnd;
        } else {
          st = St::ArgValue;
        }
        return true;
      case St::ArgOrCallEnd: {
        size_t at = pos;
        Match r = match({kArgStart, kCallEnd});
        if (r == Match::More) return false;
        if (r == Match::Cut) return done();
        if (r == Match::No) {
          fail(at, "expected an <|open|>argument tag or the end of the call");
          return true;
        }
        if (matched == 0) {
          arg_pos = at;
          st = St::ArgKey;
        } else {
          emit_args("}");
          st = St::NextCall;
        }
        return true;
      }
      case St::ArgKey: {
        auto key = quoted(cut);
        if (!key) {
          if (cut) return done();
          return false;
        }
        auto it = fn->string_typed.find(*key);
        if (it == fn->string_typed.end()) {
          fail(arg_pos, "unknown argument '" + *key + "' of tool '" + msg.tool_calls.back().name + "'");
          return true;
        }
        value_is_string = it->second;
        std::string head = first_arg ? "" : ",";
        first_arg = false;
        json_escape_to(head += '"', *key);
        head += "\":";
        if (value_is_string) head += '"';
        emit_args(head);
        raw = RawValueWriter();
        st = St::ArgRest;
        return true;
      }
      case St::ArgValue: {
        int t = scan({kArgEnd}, text);
        emit_value(text, false);
        if (t < 0) return false;
        pos += kArgEnd.size();
        emit_value("", true);
        std::string tail = value_is_string ? "\"" : raw.end();
        if (!tail.empty()) emit_args(tail);
        st = St::ArgOrCallEnd;
        return true;
      }
      case St::Trailer: {
        Match r = msg_end_seen ? match({kEom}) : match({kMsgEnd, kEom});
        if (r == Match::More) return false;
        if (r == Match::Cut) return done();
        if (r == Match::Yes) {
          if (msg_end_seen || matched == 1) st = St::Done;  // nothing may follow <|end_of_msg|>
          msg_end_seen = true;
          return true;
        }
        if (pos >= buf.size()) return false;
        fail(pos, "unexpected text after the end of the message");
        return true;
      }
      case St::Done:
        if (pos >= buf.size()) return false;
        fail(pos, "unexpected text after the end of the message");
        return true;
      case St::Failed:
        if (fail_pos < buf.size()) {
          emit_content(std::string_view(buf).substr(fail_pos), final);
          fail_pos = pos = buf.size();
        } else if (final) {
          emit_content("", true);
        }
        return false;
    }
    return false;
  }

  // Where unparsed text starts when a call fails: the whole tools section when none of its
  // calls reached the client, else the failing call.
  size_t section_start() const { return msg.tool_calls.empty() ? tools_pos : call_pos; }

  bool name_may_match(std::string_view partial) const {
    for (const auto& [n, f] : functions)
      if (n.compare(0, partial.size(), partial) == 0 && partial.size() <= n.size()) return true;
    return false;
  }

  bool done() {
    pos = buf.size();
    st = St::Done;
    return false;
  }

  ChatDelta take() {
    ChatDelta d = std::move(cur);
    cur = ChatDelta();
    return d;
  }
};

K3StreamParser::K3StreamParser(const K3ParserOptions& opts) : impl_(std::make_unique<Impl>(opts)) { impl_->run(); }
K3StreamParser::~K3StreamParser() = default;
K3StreamParser::K3StreamParser(K3StreamParser&&) noexcept = default;
K3StreamParser& K3StreamParser::operator=(K3StreamParser&&) noexcept = default;

ChatDelta K3StreamParser::feed(std::string_view text) {
  Impl& p = *impl_;
  if (p.final) return {};
  p.buf.append(text);
  p.run();
  return p.take();
}

ChatDelta K3StreamParser::finish() {
  Impl& p = *impl_;
  if (p.final) return {};
  p.final = true;
  p.run();
  if (p.st == St::ThinkBody) p.end_reasoning();
  if (p.st == St::ArgValue) {
    p.emit_value("", true);
    if (!p.value_is_string) {
      std::string tail = p.raw.end();
      if (!tail.empty()) p.emit_args(tail);
    }
  }
  p.emit_content("", true);
  if (p.tools_required && p.msg.tool_calls.empty() && p.msg.error.empty())
    p.msg.error = "tool_choice requires a tool call but the model made none";
  return p.take();
}

const ChatMessage& K3StreamParser::message() const { return impl_->msg; }

ChatMessage parse_k3_output(std::string_view generated, const K3ParserOptions& opts) {
  K3StreamParser p(opts);
  p.feed(generated);
  p.finish();
  return p.message();
}

nlohmann::ordered_json ChatDelta::to_openai() const {
  nlohmann::ordered_json d = nlohmann::ordered_json::object();
  if (!reasoning_content.empty()) d["reasoning_content"] = reasoning_content;
  if (!content.empty()) d["content"] = content;
  if (!tool_calls.empty()) {
    auto arr = nlohmann::ordered_json::array();
    for (const auto& t : tool_calls) {
      nlohmann::ordered_json c = {{"index", t.index}};
      if (t.opens) {
        c["id"] = "";
        c["type"] = "function";
        c["function"] = {{"name", t.name}, {"arguments", t.arguments}};
      } else {
        c["function"] = {{"arguments", t.arguments}};
      }
      arr.push_back(std::move(c));
    }
    d["tool_calls"] = std::move(arr);
  }
  return d;
}

nlohmann::ordered_json ChatMessage::to_openai() const {
  nlohmann::ordered_json m = {{"role", "assistant"}};
  if (content.empty() && !tool_calls.empty()) m["content"] = nullptr;
  else m["content"] = content;
  if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    auto arr = nlohmann::ordered_json::array();
    for (const auto& t : tool_calls)
      arr.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
    m["tool_calls"] = std::move(arr);
  }
  return m;
}

}  // namespace k3::chat
