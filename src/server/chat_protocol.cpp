// SSE framing and the OpenAI chat-completions protocol (chat.completion, chat.completion.chunk).
#include "server/chat_protocol.h"

namespace k3::server {

SseEvent sse_event(std::string name, const json& data) { return SseEvent{std::move(name), dump(data)}; }

std::string sse_text(const SseEvent& e) {
  std::string s;
  if (!e.name.empty()) s += "event: " + e.name + "\n";
  return s + "data: " + e.data + "\n\n";
}

namespace {

class OpenAIChat final : public ChatProtocol {
 public:
  OpenAIChat(std::string model, bool include_usage) : model_(std::move(model)), include_usage_(include_usage) {}

  void begin(int32_t, int32_t, SseEvents& out) override {
    out.push_back(sse_event("", chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr)));
  }

  void delta(const chat::ChatDelta& d, SseEvents& out) override {
    json o = d.to_openai();
    if (o.contains("tool_calls"))
      for (auto& tc : o["tool_calls"])
        if (tc.contains("id")) tc["id"] = call_id(tc["index"].get<size_t>());
    out.push_back(sse_event("", chunk(std::move(o), nullptr)));
  }

  void end(const ChatOutcome& o, SseEvents& out) override {
    json last = chunk(json::object(), finish_reason(o));
    if (include_usage_) last.erase("usage");
    out.push_back(sse_event("", last));
    if (include_usage_) {
      json u = {{"id", id_},       {"object", "chat.completion.chunk"}, {"created", created_},
                {"model", model_}, {"system_fingerprint", "k3"},       {"choices", json::array()},
                {"usage", usage(o)}};
      out.push_back(sse_event("", u));
    }
    out.push_back(SseEvent{"", "[DONE]"});
  }

  void fail(int status, const std::string& message, SseEvents& out) override {
    out.push_back(sse_event("", error_body(status, message)));
    out.push_back(SseEvent{"", "[DONE]"});
  }

  json body(const ChatOutcome& o) override {
    chat::ChatMessage m = *o.message;
    for (size_t i = 0; i < m.tool_calls.size(); ++i)
      if (m.tool_calls[i].id.empty()) m.tool_calls[i].id = call_id(i);
    json choice = {{"index", 0}, {"message", m.to_openai()}, {"logprobs", nullptr}, {"finish_reason", finish_reason(o)}};
    return json{{"id", id_},
                {"object", "chat.completion"},
                {"created", created_},
                {"model", model_},
                {"system_fingerprint", "k3"},
                {"choices", json::array({std::move(choice)})},
                {"usage", usage(o)},
                {"timings", timings(o)}};
  }

 private:
  const std::string& call_id(size_t i) {
    while (call_ids_.size() <= i) call_ids_.push_back(random_id("call_"));
    return call_ids_[i];
  }

  static json usage(const ChatOutcome& o) {
    return json{{"prompt_tokens", o.n_prompt},
                {"completion_tokens", o.n_gen},
                {"total_tokens", o.n_prompt + o.n_gen},
                {"prompt_tokens_details", {{"cached_tokens", o.n_cached}}}};
  }
  static json timings(const ChatOutcome& o) {
    const TaskTimes& t = o.times;
    return json{{"queued_ms", t.queued_ms},
                {"cache_n", o.n_cached},
                {"prompt_n", o.n_prompt - o.n_cached},
                {"prompt_ms", t.prompt_ms},
                {"predicted_n", o.n_gen},
                {"predicted_ms", t.gen_ms},
                {"predicted_per_second", t.gen_ms > 0 ? 1000.0 * (o.n_gen - 1) / t.gen_ms : 0.0},
                {"draft_n", t.n_draft},
                {"draft_n_accepted", t.n_draft_accepted}};
  }
  static const char* finish_reason(const ChatOutcome& o) {
    if (o.stop == ChatOutcome::Stop::Length) return "length";
    return o.message->tool_calls.empty() ? "stop" : "tool_calls";
  }

  json chunk(json delta, const json& finish) const {
    json ch = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish}};
    json j = {{"id", id_},
              {"object", "chat.completion.chunk"},
              {"created", created_},
              {"model", model_},
              {"system_fingerprint", "k3"},
              {"choices", json::array({std::move(ch)})}};
    if (include_usage_) j["usage"] = nullptr;
    return j;
  }

  std::string id_ = random_id("chatcmpl-");
  int64_t created_ = unix_now();
  std::string model_;
  bool include_usage_;
  std::vector<std::string> call_ids_;
};

}  // namespace

std::unique_ptr<ChatProtocol> openai_chat_protocol(std::string model, bool include_usage) {
  return std::make_unique<OpenAIChat>(std::move(model), include_usage);
}

}  // namespace k3::server
