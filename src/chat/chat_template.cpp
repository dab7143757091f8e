#include "chat/chat_template.h"

namespace k3::chat {

const jinja::Template& builtin_kimi_k3_template() {
  static const jinja::Template t(kKimiK3Template, "kimi-k3.jinja");
  return t;
}

std::string k3_generation_prompt(bool thinking) {
  return std::string("<|open|>message role=\"assistant\"<|sep|>") + (thinking ? "<|open|>think<|sep|>" : "<|open|>response<|sep|>");
}

bool k3_thinking_enabled(const nlohmann::ordered_json& inputs) {
  if (!inputs.is_object() || !inputs.contains("thinking")) return true;
  const auto& t = inputs["thinking"];
  if (t.is_null()) return false;
  return jinja::Value::from_json(t).truthy();
}

std::string render_chat(const jinja::Template& t, const nlohmann::ordered_json& inputs) { return t.render(inputs); }

std::vector<size_t> message_starts(const jinja::Template& t, const nlohmann::ordered_json& inputs,
                                   std::string_view prompt, size_t recent) {
  std::vector<size_t> out;
  if (!inputs.contains("messages") || !inputs["messages"].is_array()) return out;
  const auto& msgs = inputs["messages"];
  const size_t n = msgs.size();
  nlohmann::ordered_json in = inputs;
  in["add_generation_prompt"] = false;
  for (size_t i = 0; i <= n; ++i) {
    if (i > 1 && i + recent < n) continue;
    in["messages"] = nlohmann::ordered_json(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(i));
    try {
      const std::string head = t.render(in);
      if (!head.empty() && head.size() <= prompt.size() && prompt.compare(0, head.size(), head) == 0 &&
          (out.empty() || out.back() < head.size()))
        out.push_back(head.size());
    } catch (const jinja::TemplateError&) {
      // e.g. a tool result whose call is not among the first i messages
    }
  }
  return out;
}

nlohmann::ordered_json normalize_openai_messages(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = messages;
  if (!out.is_array()) return out;
  for (auto& m : out) {
    if (!m.is_object()) continue;
    if (m.contains("role") && m["role"] == "developer") m["role"] = "system";
    if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (auto& call : m["tool_calls"]) {
      if (!call.is_object()) continue;
      auto& fn = (call.contains("function") && call["function"].is_object()) ? call["function"] : call;
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      auto parsed = nlohmann::ordered_json::parse(fn["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) fn["arguments"] = std::move(parsed);
    }
  }
  return out;
}

}  // namespace k3::chat
