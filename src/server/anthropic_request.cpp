// POST /v1/messages and /v1/messages/count_tokens: an Anthropic Messages request, checked field by
// field, converted to the internal conversation (ChatRequest). Mapping:
//   system (string or text blocks)            -> a system message first
//   messages of role system (the same)        -> a system message there
//   user text and image blocks                -> user messages (in block order; image_url parts
//                                                from base64 sources, url sources refused later)
//   user tool_result blocks                   -> tool messages (tool_call_id = tool_use_id)
//   assistant text / thinking / tool_use      -> one assistant message: content, reasoning_content,
//                                                tool_calls {id, function {name, arguments: input}}
//   tools {name, description, input_schema}   -> OpenAI functions {name, description, parameters}
//   tool_choice auto / any / tool / none      -> auto / required / required / none
//   thinking enabled / adaptive, disabled, absent -> K3 thinking on, off, off (Anthropic's default)
//   output_config.effort                      -> thinking_effort (as reasoning_effort in chat); a
//                                                message's own (per-turn control) after the last
//                                                assistant message overrides it
#include <algorithm>
#include <set>

#include "server/requests.h"

namespace k3::server {

namespace {

std::string at_index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

[[noreturn]] void unsupported_block(const std::string& path, const std::string& type, const char* where) {
  bad_request(path + ".type", "'" + path + ".type' = '" + type + "' is not supported in " + where);
}

// An image block: {"source": {"type": "base64", "media_type", "data"} or {"type": "url", "url"}}.
json image_block(const Fields& b, const std::string& path, const RequestLimits& lim) {
  require_vision(path, lim);
  b.only({"type", "source", "cache_control"});
  Fields s(b.object("source"), path + ".source");
  const std::string type = s.str("type", "", true);
  if (type == "base64") {
    s.only({"type", "media_type", "data"});
    return image_part("data:" + s.str("media_type", "", true) + ";base64," + s.str("data", "", true), path, lim);
  }
  if (type == "url") {
    s.only({"type", "url"});
    return image_part(s.str("url", "", true), path, lim);
  }
  bad_request(path + ".source.type", "'" + path + ".source.type' = '" + type + "' is not supported (base64, url)");
}

std::string text_block(const Fields& b) {
  b.only({"type", "text", "cache_control", "citations"});
  return b.str("text", "", true);
}

// A string, or text blocks concatenated (as the template concatenates text parts).
std::string text_of(const Fields& f, const char* key, const std::string& path, bool required) {
  if (!f.has(key)) {
    if (required) bad_request(path, "'" + path + "' is required");
    return "";
  }
  const json& v = f.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad_request(path, "'" + path + "' must be a string or an array of text blocks, not " + type_name(v));
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = at_index(path, i);
    Fields b(v[i], p);
    const std::string type = b.str("type", "", true);
    if (type != "text") unsupported_block(p, type, "a system prompt or tool result (text blocks only)");
    text += text_block(b);
  }
  return text;
}

struct Converter {
  explicit Converter(const RequestLimits& l) : lim(l) {}
  const RequestLimits& lim;
  json out = json::array();
  std::set<std::string> tool_use_ids;          // all of the conversation (they must be unique)
  std::vector<std::string> open_calls;         // tool_use ids of the last assistant message awaiting results
  std::string open_calls_path;

  void user(const Fields& m, const std::string& path) {
    const json& c = m.at("content");
    std::set<std::string> answered;
    if (c.is_string()) {
      out.push_back({{"role", "user"}, {"content", c}});
    } else {
      if (c.empty()) bad_request(path, "'" + path + "' must not be empty");
      // Text blocks run together into one content string, as the template would join text parts;
      // with an image among them the content is the list of text and image_url parts.
      json parts = json::array();
      bool images = false;
      auto flush = [&] {
        if (parts.empty()) return;
        if (images) {
          out.push_back({{"role", "user"}, {"content", parts}});
        } else {
          std::string text;
          for (const json& t : parts) text += t["text"].get<std::string>();
          out.push_back({{"role", "user"}, {"content", text}});
        }
        parts = json::array();
        images = false;
      };
      for (size_t k = 0; k < c.size(); ++k) {
        const std::string p = at_index(path, k);
        Fields b(c[k], p);
        const std::string type = b.str("type", "", true);
        if (type == "text") {
          parts.push_back({{"type", "text"}, {"text", text_block(b)}});
        } else if (type == "image") {
          parts.push_back(image_block(b, p, lim));
          images = true;
        } else if (type == "tool_result") {
          b.only({"type", "tool_use_id", "content", "is_error", "cache_control"});
          const std::string id = b.str("tool_use_id", "", true);
          if (std::find(open_calls.begin(), open_calls.end(), id) == open_calls.end())
            bad_request(p + ".tool_use_id", "'" + p + ".tool_use_id' = '" + id +
                                                "' matches no tool_use block of the previous (assistant) message");
          if (!answered.insert(id).second)
            bad_request(p + ".tool_use_id", "'" + p + ".tool_use_id' = '" + id + "' has a tool_result already");
          b.boolean("is_error", false);
          const std::string result = text_of(b, "content", p + ".content", false);
          flush();
          out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
        } else {
          unsupported_block(p, type, "a user message");
        }
      }
      flush();
    }
    for (const std::string& id : open_calls)
      if (!answered.count(id))
        bad_request(path, "tool_use '" + id + "' of " + open_calls_path + " has no tool_result block in '" + path +
                              "' (each tool_use must be answered in the next message)");
    open_calls.clear();
  }

  void assistant(const Fields& m, const std::string& path) {
    if (!open_calls.empty())
      bad_request(path, "tool_use '" + open_calls[0] + "' of " + open_calls_path +
                            " has no tool_result: the next message must be a user message answering it");
    const json& c = m.at("content");
    json msg = {{"role", "assistant"}};
    if (c.is_string()) {
      msg["content"] = c;
      out.push_back(std::move(msg));
      return;
    }
    std::string text, reasoning;
    json calls = json::array();
    for (size_t k = 0; k < c.size(); ++k) {
      const std::string p = at_index(path, k);
      Fields b(c[k], p);
      const std::string type = b.str("type", "", true);
      if (type == "text") {
        text += text_block(b);
      } else if (type == "thinking") {
        b.only({"type", "thinking", "signature", "cache_control"});
        reasoning += b.str("thinking", "", true);
        b.str("signature", "");
      } else if (type == "redacted_thinking") {  // opaque to any other model: nothing to render
        b.only({"type", "data", "cache_control"});
        b.str("data", "", true);
      } else if (type == "tool_use") {
        b.only({"type", "id", "name", "input", "cache_control", "caller"});
        const std::string id = b.str("id", "", true);
        if (id.empty()) bad_request(p + ".id", "'" + p + ".id' is empty");
        if (!tool_use_ids.insert(id).second)
          bad_request(p + ".id", "'" + p + ".id' = '" + id + "' is used by another tool_use block; ids must be unique");
        const std::string name = b.str("name", "", true);
        if (name.empty()) bad_request(p + ".name", "'" + p + ".name' is empty");
        calls.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", b.object("input")}}}});
        open_calls.push_back(id);
      } else {
        unsupported_block(p, type, "an assistant message");
      }
    }
    msg["content"] = text;
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    open_calls_path = "'" + path + "'";
    out.push_back(std::move(msg));
  }
};

// An Anthropic effort (no none or minimal) as the template's thinking_effort.
void anthropic_effort(json& in, const std::string& effort, const std::string& param) {
  if (effort == "none" || effort == "minimal")
    bad_request(param, "'" + param + "' must be low, medium, high, xhigh or max, got '" + effort + "'");
  apply_effort(in, effort, param);
}

// Per-turn control (beta): a message's output_config.effort after the last assistant message is
// the effort of the turn to generate (`turn_effort`: the value and its field).
json convert_messages(const Fields& f, const RequestLimits& lim, std::pair<std::string, std::string>& turn_effort) {
  const json& msgs = f.array("messages");
  if (msgs.empty()) bad_request("messages", "'messages' must not be empty");
  if (msgs.size() > lim.max_messages)
    bad_request("messages", "'messages' has more than " + std::to_string(lim.max_messages) + " entries");
  Converter cv(lim);
  if (f.has("system")) {
    const std::string system = text_of(f, "system", "system", false);
    if (!system.empty()) cv.out.push_back({{"role", "system"}, {"content", system}});
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string p = at_index("messages", i);
    Fields m(msgs[i], p);
    m.only({"role", "content", "output_config"});
    const std::string role = m.str("role", "", true);
    if (role == "assistant") turn_effort = {};
    if (m.has("output_config")) {
      Fields oc(m.at("output_config"), p + ".output_config");
      oc.only({"effort"});
      if (oc.has("effort")) {
        json checked;
        anthropic_effort(checked, oc.str("effort", ""), oc.name("effort"));
        turn_effort = {oc.str("effort", ""), oc.name("effort")};
      }
    }
    if (!m.has("content")) bad_request(p + ".content", "'" + p + ".content' is required");
    const json& c = m.at("content");
    if (!c.is_string() && !c.is_array())
      bad_request(p + ".content", "'" + p + ".content' must be a string or an array of content blocks, not " + type_name(c));
    if (role == "user") {
      cv.user(m, p + ".content");
    } else if (role == "assistant") {
      if (i + 1 == msgs.size())
        bad_request(p, "'" + p + "' is an assistant message at the end (a prefill); continuing a partial answer is not "
                                 "supported");
      cv.assistant(m, p + ".content");
    } else if (role == "system") {  // a mid-conversation system message (Claude Code sends them)
      cv.out.push_back({{"role", "system"}, {"content", text_of(m, "content", p + ".content", true)}});
    } else {
      bad_request(p + ".role", "'" + p + ".role' = '" + role + "' is not a role (user, assistant or system)");
    }
  }
  return std::move(cv.out);
}

json convert_tools(const Fields& f) {
  json tools = json::array();
  if (!f.has("tools")) return tools;
  const json& in = f.array("tools");
  std::set<std::string> names;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string p = at_index("tools", i);
    Fields t(in[i], p);
    const std::string type = t.str("type", "custom");
    if (type != "custom")
      bad_request(p + ".type", "'" + p + ".type' = '" + type + "': only custom tools (name, description, input_schema) "
                                                               "are supported, no server tools");
    t.only({"type", "name", "description", "input_schema", "cache_control", "defer_loading", "allowed_callers",
            "eager_input_streaming", "input_examples", "strict"});
    t.boolean("defer_loading", false);
    tools.push_back(function_tool(t, "input_schema", true, names));
  }
  return tools;
}

void convert_tool_choice(const Fields& f, ChatRequest& r) {
  if (!f.has("tool_choice")) return;
  Fields c(f.at("tool_choice"), "tool_choice");
  c.only({"type", "name", "disable_parallel_tool_use"});
  const std::string type = c.str("type", "", true);
  if (type != "tool" && c.has("name")) bad_request("tool_choice.name", "'tool_choice.name' is only for type 'tool'");
  c.boolean("disable_parallel_tool_use", false);  // one call or several: the model's choice
  if (type == "auto" || type == "none") {
    r.tool_choice = type;
  } else if (type == "any" || type == "tool") {
    if (r.tools.empty()) bad_request("tool_choice", "'tool_choice' is '" + type + "' but no 'tools' are given");
    if (type == "tool") require_tool(r, c.str("name", "", true), "tool_choice.name");
    r.tool_choice = "required";
  } else {
    bad_request("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none, got '" + type + "'");
  }
}

// Returns whether thinking is on; checks budget_tokens against max_tokens (0: not known).
bool convert_thinking(const Fields& f, int64_t max_tokens) {
  if (!f.has("thinking")) return false;
  Fields t(f.at("thinking"), "thinking");
  const std::string type = t.str("type", "", true);
  if (type == "enabled") {
    t.only({"type", "budget_tokens", "display"});
    if (!t.has("budget_tokens")) bad_request("thinking.budget_tokens", "'thinking.budget_tokens' is required");
    const int64_t budget = t.integer("budget_tokens", 0, 1024, INT32_MAX);  // K3 has no budget: effort decides
    if (max_tokens > 0 && budget >= max_tokens)
      bad_request("thinking.budget_tokens", "'thinking.budget_tokens' must be less than 'max_tokens'");
  } else if (type == "adaptive") {
    t.only({"type", "display"});
  } else if (type == "disabled") {
    t.only({"type"});
    return false;
  } else {
    bad_request("thinking.type", "'thinking.type' must be enabled, adaptive or disabled, got '" + type + "'");
  }
  const std::string display = t.str("display", "summarized");
  if (display != "summarized" && display != "omitted")
    bad_request("thinking.display", "'thinking.display' must be summarized or omitted, got '" + display + "'");
  return true;
}

void convert_output_config(const Fields& f, json& in) {
  if (!f.has("output_config")) return;
  Fields oc(f.at("output_config"), "output_config");
  oc.only({"effort", "format"});
  anthropic_effort(in, oc.str("effort", ""), "output_config.effort");
  if (oc.has("format")) {
    Fields fmt(oc.at("format"), "output_config.format");
    fmt.only({"type", "schema"});
    const std::string type = fmt.str("type", "", true);
    if (type != "json_schema")
      bad_request("output_config.format.type", "'output_config.format.type' must be json_schema, got '" + type + "'");
    in["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", fmt.object("schema")}}}};
  }
}

}  // namespace

ChatRequest parse_anthropic_request(const json& body, const RequestLimits& lim, bool count_only) {
  Fields f(body, "");
  check_canned_allowed(body, lim);
  f.only({"model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
          "thinking", "tool_choice", "tools", "metadata", "service_tier", "cache_control", "container", "diagnostics",
          "inference_geo", "output_config", "speed", "user_profile_id", "workspace_id", "context_management",
          "mcp_servers", "k3_canned"});
  ChatRequest r;
  r.model = f.str("model", "", true);
  if (f.has("container")) bad_request("container", "'container' is not supported (no code execution)");
  if (f.has("metadata")) {
    Fields md(f.at("metadata"), "metadata");
    md.only({"user_id"});
    md.str("user_id", "");
  }
  for (const char* k : {"service_tier", "inference_geo", "speed", "user_profile_id", "workspace_id"}) f.str(k, "");
  if (f.has("cache_control")) f.object("cache_control");  // the prompt cache needs no breakpoints
  if (f.has("diagnostics")) f.object("diagnostics");
  if (f.has("context_management")) f.object("context_management");  // (beta) k3 keeps the conversation as sent
  if (f.has("mcp_servers") && !f.array("mcp_servers").empty())
    bad_request("mcp_servers", "'mcp_servers' is not supported (k3 connects to no MCP server; run the tools in the client)");

  r.gen.max_tokens = count_only && !f.has("max_tokens") ? 1 : parse_budget(f, "max_tokens", lim, true);
  r.gen.sampling = parse_sampling(f, lim, 1.0, false);
  r.gen.stop = parse_stops(f, "stop_sequences", lim, false);
  r.gen.stream = f.boolean("stream", false);
  r.gen.canned = parse_canned(f, lim);
  const bool thinking = convert_thinking(f, count_only ? 0 : f.integer("max_tokens", 0, 1, INT64_MAX));

  std::pair<std::string, std::string> turn_effort;
  const json messages = convert_messages(f, lim, turn_effort);
  r.tools = convert_tools(f);
  convert_tool_choice(f, r);
  json in = chat_template_inputs(messages, r);
  in["thinking"] = thinking;
  convert_output_config(f, in);
  if (!turn_effort.second.empty()) anthropic_effort(in, turn_effort.first, turn_effort.second);
  r.template_inputs = std::move(in);
  return r;
}

}  // namespace k3::server
