#include "server/test_script.h"

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "common/error.h"

namespace k3::server {

namespace {

// An object entry: reasoning and content strings, tool_calls [{name, arguments (an object)}].
void check_entry(const json& e, const std::string& where) {
  if (e.is_string()) return;
  if (!e.is_object()) fail("%s must be a string (raw K3 output) or an object, not %s", where.c_str(), type_name(e));
  for (auto it = e.begin(); it != e.end(); ++it) {
    const std::string& k = it.key();
    if (k == "reasoning" || k == "content") {
      if (!it->is_string()) fail("%s.%s must be a string, not %s", where.c_str(), k.c_str(), type_name(*it));
    } else if (k == "tool_calls") {
      if (!it->is_array()) fail("%s.tool_calls must be an array, not %s", where.c_str(), type_name(*it));
      for (size_t i = 0; i < it->size(); ++i) {
        const json& c = (*it)[i];
        const std::string p = where + ".tool_calls[" + std::to_string(i) + "]";
        if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || c["name"].get<std::string>().empty())
          fail("%s must be an object with a non-empty string 'name'", p.c_str());
        for (auto f = c.begin(); f != c.end(); ++f)
          if (f.key() != "name" && f.key() != "arguments") fail("%s has an unknown field '%s'", p.c_str(), f.key().c_str());
        if (c.contains("arguments") && !c["arguments"].is_object())
          fail("%s.arguments must be an object, not %s", p.c_str(), type_name(c["arguments"]));
      }
    } else {
      fail("%s has an unknown field '%s' (reasoning, content, tool_calls)", where.c_str(), k.c_str());
    }
  }
}

}  // namespace

TestScript::TestScript(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("--test-script %s: cannot open the file", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  entries_ = json::parse(ss.str(), nullptr, false);
  if (entries_.is_discarded()) fail("--test-script %s: not valid JSON", path.c_str());
  if (!entries_.is_array()) fail("--test-script %s: must be a JSON array of entries, not %s", path.c_str(), type_name(entries_));
  for (size_t i = 0; i < entries_.size(); ++i)
    check_entry(entries_[i], "--test-script " + path + ": entry [" + std::to_string(i) + "]");
}

std::optional<json> TestScript::next() {
  std::lock_guard<std::mutex> lk(mu_);
  if (next_ >= entries_.size()) return std::nullopt;
  return entries_[next_++];
}

std::string script_output(const json& entry, const jinja::Template& t, const json* chat_inputs) {
  if (entry.is_string()) return entry.get<std::string>();
  if (!chat_inputs) return entry.value("content", "");
  // The entry as the last assistant message of the conversation: its rendering, less the
  // generation prompt, is what the model writes. The notes the template puts after the last
  // message (tool choice, response format) are left out of both renderings.
  json base = *chat_inputs;
  base.erase("tool_choice");
  base.erase("response_format");
  base["add_generation_prompt"] = true;
  json msg = {{"role", "assistant"}, {"content", entry.value("content", "")}};
  if (entry.contains("reasoning")) msg["reasoning_content"] = entry["reasoning"];
  if (entry.contains("tool_calls")) {
    msg["tool_calls"] = json::array();
    for (const json& c : entry["tool_calls"])
      msg["tool_calls"].push_back({{"id", "call_script_" + std::to_string(msg["tool_calls"].size())},
                                   {"type", "function"},
                                   {"function", {{"name", c["name"]}, {"arguments", c.value("arguments", json::object())}}}});
  }
  json with = base;
  with["add_generation_prompt"] = false;
  with["messages"].push_back(std::move(msg));
  try {
    const std::string prompt = chat::render_chat(t, base), after = chat::render_chat(t, with);
    if (after.compare(0, prompt.size(), prompt) == 0) return after.substr(prompt.size());
  } catch (const jinja::TemplateError& e) {
    throw ApiError(500, "--test-script: the chat template failed on a scripted assistant message: " + e.message());
  }
  throw ApiError(500, "--test-script: the chat template renders an assistant message that does not continue its "
                      "generation prompt; use a string entry (raw output) instead");
}

}  // namespace k3::server
