// Chat templates for the server and the CLI: k3's built-in Kimi-K3 template (data/templates,
// embedded at build time), loading a template from a GGUF string or a file, and rendering an
// OpenAI-style conversation.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja.h"

namespace k3::chat {

// The text of data/templates/kimi-k3.jinja.
extern const std::string_view kKimiK3Template;

// The built-in template, parsed once (thread-safe).
const jinja::Template& builtin_kimi_k3_template();

// The suffix add_generation_prompt appends, which the output parser expects in front of the
// generated text: `<|open|>message role="assistant"<|sep|>` + `<|open|>think<|sep|>` (thinking on)
// or `<|open|>response<|sep|>` (off).
std::string k3_generation_prompt(bool thinking);

// Whether a K3 render with these inputs has thinking on: the template reads `thinking`
// (default true when absent; null/false = off).
bool k3_thinking_enabled(const nlohmann::ordered_json& inputs);

// Renders `inputs` = {"messages": [...], "tools": [...], "add_generation_prompt": true, ...};
// every key is passed to the template as a variable. Throws jinja::TemplateError.
std::string render_chat(const jinja::Template& t, const nlohmann::ordered_json& inputs);

// Where messages start in `prompt` = render_chat(t, inputs), as byte offsets, for the first
// message, the last `recent` ones and the generation prompt: the length of the rendering of the
// messages before it (without the generation prompt) where that rendering is a prefix of the
// prompt (a template that renders earlier turns otherwise than the last has no start there).
// Earlier messages were the recent ones of earlier requests. Ascending, without 0.
std::vector<size_t> message_starts(const jinja::Template& t, const nlohmann::ordered_json& inputs,
                                   std::string_view prompt, size_t recent = 16);

// OpenAI wire format -> what the K3 template renders best, as llama.cpp does before rendering:
// role "developer" becomes "system", and tool-call `arguments` given as a JSON string holding an
// object are parsed so history calls render as <argument> tags (a string that is not a JSON
// object is left as it is and renders in the <json> form). Returns a modified copy.
nlohmann::ordered_json normalize_openai_messages(const nlohmann::ordered_json& messages);

}  // namespace k3::chat
