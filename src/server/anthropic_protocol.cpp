// The Anthropic Messages answer: reasoning -> a thinking block, content -> a text block, each tool
// call -> a tool_use block, in the order the parser gives them. Streaming sends
//   message_start, ping, (content_block_start, content_block_delta*, content_block_stop)*,
//   message_delta {stop_reason, stop_sequence, usage}, message_stop
// and the non-streaming message holds the same blocks, built from the same deltas.
#include "server/chat_protocol.h"

namespace k3::server {

namespace {

class Anthropic final : public ChatProtocol {
 public:
  explicit Anthropic(std::string model) : model_(std::move(model)) {}

  void begin(int32_t n_prompt, int32_t n_cached, SseEvents& out) override {
    json m = message(json::array(), nullptr, nullptr);
    m["usage"] = {{"input_tokens", n_prompt - n_cached},
                  {"cache_creation_input_tokens", 0},
                  {"cache_read_input_tokens", n_cached},
                  {"output_tokens", 0}};
    out.push_back(sse_event("message_start", {{"type", "message_start"}, {"message", std::move(m)}}));
    idle(out);
  }

  void delta(const chat::ChatDelta& d, SseEvents& out) override {
    if (!d.reasoning_content.empty()) append(Kind::Thinking, d.reasoning_content, out);
    if (!d.content.empty()) append(Kind::Text, d.content, out);
    for (const chat::ToolCallDelta& t : d.tool_calls) {
      if (t.opens) {
        close(out);
        blocks_.push_back(Block{Kind::ToolUse, "", random_id("toolu_"), t.name});
        open_ = true;
        out.push_back(block_event("content_block_start", {{"content_block", block_json(blocks_.back(), true)}}));
      }
      // The parser gives a call's arguments before the next call opens: they belong to the last block.
      if (!t.arguments.empty()) append(Kind::ToolUse, t.arguments, out);
    }
  }

  void end(const ChatOutcome& o, SseEvents& out) override {
    close(out);
    json delta = {{"stop_reason", stop_reason(o)}, {"stop_sequence", stop_sequence(o)}};
    out.push_back(sse_event("message_delta", {{"type", "message_delta"}, {"delta", std::move(delta)}, {"usage", usage(o)}}));
    out.push_back(sse_event("message_stop", {{"type", "message_stop"}}));
  }

  void fail(int status, const std::string& message, SseEvents& out) override {
    out.push_back(sse_event("error", anthropic_error_body(status, message)));
  }

  void idle(SseEvents& out) override { out.push_back(sse_event("ping", {{"type", "ping"}})); }

  json body(const ChatOutcome& o) override {
    json content = json::array();
    for (const Block& b : blocks_) content.push_back(block_json(b, false));
    json m = message(std::move(content), stop_reason(o), stop_sequence(o));
    m["usage"] = usage(o);
    return m;
  }

 private:
  enum class Kind { Thinking, Text, ToolUse };
  struct Block {
    Kind kind;
    std::string text;  // thinking, text or the tool's input JSON
    std::string id, name;
  };

  // Adds text to the open block of this kind, or (thinking, text) opens one.
  void append(Kind kind, const std::string& text, SseEvents& out) {
    if (kind != Kind::ToolUse && (!open_ || blocks_.back().kind != kind)) {
      close(out);
      blocks_.push_back(Block{kind, "", "", ""});
      open_ = true;
      out.push_back(block_event("content_block_start", {{"content_block", block_json(blocks_.back(), true)}}));
    }
    blocks_.back().text += text;
    json d = kind == Kind::Thinking ? json{{"type", "thinking_delta"}, {"thinking", text}}
             : kind == Kind::Text   ? json{{"type", "text_delta"}, {"text", text}}
                                    : json{{"type", "input_json_delta"}, {"partial_json", text}};
    out.push_back(block_event("content_block_delta", {{"delta", std::move(d)}}));
  }

  void close(SseEvents& out) {
    if (!open_) return;
    open_ = false;
    out.push_back(block_event("content_block_stop", json::object()));
  }

  // An event about the last block: {"type": name, "index": i, ...fields}.
  SseEvent block_event(const char* name, json fields) const {
    json e = {{"type", name}, {"index", blocks_.size() - 1}};
    e.update(fields);
    return sse_event(name, e);
  }

  // A block as content_block_start announces it (empty) or as the message holds it.
  static json block_json(const Block& b, bool start) {
    switch (b.kind) {
      case Kind::Thinking:  // K3 reasoning carries no signature; clients send it back unchanged
        return {{"type", "thinking"}, {"thinking", start ? "" : b.text}, {"signature", ""}};
      case Kind::Text: return {{"type", "text"}, {"text", start ? "" : b.text}};
      case Kind::ToolUse: break;
    }
    // Arguments the model left incomplete or malformed (cut by max_tokens) are no object: {}.
    json input = start ? json::object() : json::parse(b.text, nullptr, false);
    if (!input.is_object()) input = json::object();
    return {{"type", "tool_use"}, {"id", b.id}, {"name", b.name}, {"input", std::move(input)}};
  }

  json message(json content, const json& stop_reason, const json& stop_sequence) const {
    return {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_},
            {"content", std::move(content)},
            {"stop_reason", stop_reason},
            {"stop_sequence", stop_sequence}};
  }

  json stop_reason(const ChatOutcome& o) const {
    if (o.stop == ChatOutcome::Stop::StopString) return "stop_sequence";
    if (o.stop == ChatOutcome::Stop::Length) return "max_tokens";
    for (const Block& b : blocks_)
      if (b.kind == Kind::ToolUse) return "tool_use";
    return "end_turn";
  }
  static json stop_sequence(const ChatOutcome& o) {
    return o.stop == ChatOutcome::Stop::StopString ? json(o.stop_string) : json(nullptr);
  }
  static json usage(const ChatOutcome& o) {
    return {{"input_tokens", o.n_prompt - o.n_cached},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", o.n_cached},
            {"output_tokens", o.n_gen}};
  }

  std::string id_ = random_id("msg_");
  std::string model_;
  std::vector<Block> blocks_;
  bool open_ = false;  // the last block is open (streaming: started, not stopped)
};

}  // namespace

std::unique_ptr<ChatProtocol> anthropic_protocol(std::string model) { return std::make_unique<Anthropic>(std::move(model)); }

}  // namespace k3::server
