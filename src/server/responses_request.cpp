// POST /v1/responses and /v1/responses/input_tokens: an OpenAI Responses request (the stateless
// subset), checked field by field, converted to the internal conversation (ChatRequest). Mapping:
//   instructions                          -> a system message first
//   input (a string)                      -> one user message
//   message items (user/system/developer) -> messages of that role (input_text parts concatenated;
//                                            a user message with input_image parts keeps its
//                                            text and image_url parts)
//   reasoning, assistant message and function_call items in a row -> one assistant message
//                                            (reasoning_content, content, tool_calls), split where
//                                            the order think -> response -> calls starts over
//   function_call_output                  -> a tool message (tool_call_id = call_id)
//   tools (function), tool_choice, text.format, reasoning.effort -> as in chat completions
// Stored state (previous_response_id, store: true, conversation, item_reference) is a 400.
#include <algorithm>
#include <set>

#include "server/requests.h"

namespace k3::server {

namespace {

std::string at_index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// A string, or content parts of the given text types concatenated; with `images` (user messages)
// input_image parts too, and then, if there is one, the list of text and image_url parts.
json content_of(const Fields& f, const char* key, const std::string& path, const RequestLimits* images = nullptr) {
  if (!f.has(key)) bad_request(path, "'" + path + "' is required");
  const json& v = f.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad_request(path, "'" + path + "' must be a string or an array of content parts, not " + type_name(v));
  json parts = json::array();
  bool any_image = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = at_index(path, i);
    Fields part(v[i], p);
    const std::string type = part.str("type", "", true);
    std::string text;
    if (type == "input_text") {
      part.only({"type", "text"});
      text = part.str("text", "", true);
    } else if (type == "output_text") {
      part.only({"type", "text", "annotations", "logprobs"});
      text = part.str("text", "", true);
    } else if (type == "refusal") {
      part.only({"type", "refusal"});
      text = part.str("refusal", "", true);
    } else if (type == "input_image" && images) {
      require_vision(p, *images);
      part.only({"type", "image_url", "detail", "file_id"});
      if (part.has("file_id")) bad_request(p + ".file_id", "'" + p + ".file_id': stored files are not supported; send image_url");
      part.str("detail", "");
      parts.push_back(image_part(part.str("image_url", "", true), p, *images));
      any_image = true;
      continue;
    } else {
      bad_request(p + ".type", "'" + p + ".type' = '" + type + "' is not supported (input_text, output_text, refusal" +
                                   (images ? ", input_image)" : "; images only in user messages)"));
    }
    parts.push_back({{"type", "text"}, {"text", text}});
  }
  if (any_image) return parts;
  std::string text;
  for (const json& t : parts) text += t["text"].get<std::string>();
  return text;
}

std::string text_of(const Fields& f, const char* key, const std::string& path) {
  return content_of(f, key, path).get<std::string>();
}

struct Converter {
  explicit Converter(const RequestLimits& l) : lim(l) {}
  const RequestLimits& lim;
  json out = json::array();
  // The assistant message being built from consecutive output items, and how far it got:
  // 1 reasoning, 2 content, 3 tool calls.
  int stage = 0;
  std::set<std::string> call_ids, answered;  // function_call ids of the conversation / with an output
  std::vector<std::string> turn_calls;       // of the most recent assistant message

  json& assistant(int next) {
    if (stage == 0 || next < stage || (next == stage && next != 3)) {
      out.push_back({{"role", "assistant"}, {"content", ""}});
      turn_calls.clear();
    }
    stage = next;
    return out.back();
  }

  void item(const json& it, const std::string& p) {
    Fields f(it, p);
    const std::string type = f.str("type", "message");
    if (type == "message") {
      f.only({"type", "role", "content", "id", "status", "phase"});
      const std::string role = f.str("role", "", true);
      f.str("id", "");
      f.str("status", "");
      f.str("phase", "");
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        bad_request(p + ".role", "'" + p + ".role' = '" + role + "' is not a role (user, assistant, system or developer)");
      const json content = content_of(f, "content", p + ".content", role == "user" ? &lim : nullptr);
      if (role == "assistant") {
        assistant(2)["content"] = content;
        return;
      }
      out.push_back({{"role", role}, {"content", content}});
      stage = 0;
    } else if (type == "reasoning") {
      f.only({"type", "id", "summary", "content", "encrypted_content", "status"});
      f.str("id", "");
      f.str("status", "");
      f.str("encrypted_content", "");  // another model's: opaque here
      if (f.has("summary")) f.array("summary");
      std::string text;
      if (f.has("content")) {
        const json& c = f.array("content");
        for (size_t i = 0; i < c.size(); ++i) {
          Fields part(c[i], at_index(p + ".content", i));
          part.only({"type", "text"});
          if (part.str("type", "", true) != "reasoning_text")
            bad_request(part.name("type"), "'" + part.name("type") + "' must be 'reasoning_text'");
          text += part.str("text", "", true);
        }
      }
      json& m = assistant(1);
      if (!text.empty()) m["reasoning_content"] = text;
    } else if (type == "function_call") {
      f.only({"type", "id", "call_id", "name", "arguments", "status", "namespace"});
      f.str("id", "");
      f.str("status", "");
      f.str("namespace", "");
      const std::string id = f.str("call_id", "", true);
      if (id.empty()) bad_request(p + ".call_id", "'" + p + ".call_id' is empty");
      if (!call_ids.insert(id).second)
        bad_request(p + ".call_id", "'" + p + ".call_id' = '" + id + "' is used by another function_call; ids must be unique");
      const std::string name = f.str("name", "", true);
      if (name.empty()) bad_request(p + ".name", "'" + p + ".name' is empty");
      const std::string args = f.str("arguments", "", true);
      json& m = assistant(3);
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      m["tool_calls"].push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}});
      turn_calls.push_back(id);
    } else if (type == "function_call_output") {
      f.only({"type", "id", "call_id", "output", "status"});
      f.str("id", "");
      f.str("status", "");
      const std::string id = f.str("call_id", "", true);
      if (std::find(turn_calls.begin(), turn_calls.end(), id) == turn_calls.end())
        bad_request(p + ".call_id", "'" + p + ".call_id' = '" + id +
                                        "' matches no function_call of the assistant turn before it");
      if (!answered.insert(id).second)
        bad_request(p + ".call_id", "'" + p + ".call_id' = '" + id + "' has an output already");
      out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", text_of(f, "output", p + ".output")}});
      stage = 0;
    } else if (type == "item_reference") {
      bad_request(p + ".type", "'" + p + ".type' = 'item_reference': k3 stores no responses; send the items themselves");
    } else {
      bad_request(p + ".type", "'" + p + ".type' = '" + type +
                                   "' is not supported (message, reasoning, function_call, function_call_output)");
    }
  }
};

json convert_input(const Fields& f, const RequestLimits& lim) {
  Converter cv(lim);
  const std::string instructions = f.str("instructions", "");
  if (!instructions.empty()) cv.out.push_back({{"role", "system"}, {"content", instructions}});
  if (!f.has("input")) bad_request("input", "'input' is required");
  const json& in = f.at("input");
  if (in.is_string()) {
    cv.out.push_back({{"role", "user"}, {"content", in}});
  } else if (in.is_array()) {
    if (in.empty()) bad_request("input", "'input' must not be empty");
    if (in.size() > lim.max_messages)
      bad_request("input", "'input' has more than " + std::to_string(lim.max_messages) + " items");
    for (size_t i = 0; i < in.size(); ++i) cv.item(in[i], at_index("input", i));
  } else {
    bad_request("input", std::string("'input' must be a string or an array of items, not ") + type_name(in));
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
    const std::string type = t.str("type", "", true);
    if (type != "function")
      bad_request(p + ".type", "'" + p + ".type' = '" + type + "': only function tools are supported");
    t.only({"type", "name", "description", "parameters", "strict", "defer_loading"});
    t.boolean("defer_loading", false);
    tools.push_back(function_tool(t, "parameters", false, names));
  }
  return tools;
}

void convert_tool_choice(const Fields& f, ChatRequest& r) {
  if (!f.has("tool_choice")) return;
  const json& tc = f.at("tool_choice");
  if (tc.is_string()) {
    r.tool_choice = tc.get<std::string>();
    if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
      bad_request("tool_choice", "'tool_choice' must be auto, none, required or a function, got '" + r.tool_choice + "'");
  } else {
    Fields c(tc, "tool_choice");
    const std::string type = c.str("type", "", true);
    if (type != "function")
      bad_request("tool_choice.type", "'tool_choice.type' = '" + type + "': only 'function' is supported");
    c.only({"type", "name"});
    require_tool(r, c.str("name", "", true), "tool_choice.name");
    r.tool_choice = "required";
  }
  if (r.tool_choice == "required" && r.tools.empty())
    bad_request("tool_choice", "'tool_choice' is 'required' but no 'tools' are given");
}

void convert_text(const Fields& f, json& in) {
  if (!f.has("text")) return;
  Fields t(f.at("text"), "text");
  t.only({"format", "verbosity"});
  const std::string verbosity = t.str("verbosity", "medium");
  if (verbosity != "low" && verbosity != "medium" && verbosity != "high")
    bad_request("text.verbosity", "'text.verbosity' must be low, medium or high, got '" + verbosity + "'");
  if (!t.has("format")) return;
  Fields fmt(t.at("format"), "text.format");
  const std::string type = fmt.str("type", "", true);
  if (type == "json_schema") {
    fmt.only({"type", "name", "schema", "description", "strict"});
    json js = {{"name", fmt.str("name", "", true)}, {"schema", fmt.object("schema")}};
    if (fmt.has("description")) js["description"] = fmt.str("description", "");
    if (fmt.has("strict")) js["strict"] = fmt.boolean("strict", false);
    in["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  } else if (type == "json_object") {
    fmt.only({"type"});
    in["response_format"] = {{"type", "json_object"}};
  } else if (type == "text") {
    fmt.only({"type"});
  } else {
    bad_request("text.format.type", "'text.format.type' must be text, json_object or json_schema, got '" + type + "'");
  }
}

}  // namespace

ChatRequest parse_responses_request(const json& body, const RequestLimits& lim) {
  Fields f(body, "");
  check_canned_allowed(body, lim);
  f.only({"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens", "temperature", "top_p",
          "stream", "stream_options", "reasoning", "text", "store", "previous_response_id", "conversation",
          "background", "include", "metadata", "parallel_tool_calls", "max_tool_calls", "prompt_cache_key",
          "prompt_cache_retention", "safety_identifier", "service_tier", "truncation", "top_logprobs", "user",
          "k3_canned"});
  ChatRequest r;
  r.prompt_param = "input";
  r.model = f.str("model", "");
  if (f.has("previous_response_id"))
    bad_request("previous_response_id", "'previous_response_id' is not supported: k3 stores no responses; send the "
                                        "whole conversation in 'input'");
  if (f.boolean("store", false))
    bad_request("store", "'store': true is not supported: k3 stores no responses; send store: false or leave it out");
  if (f.has("conversation"))
    bad_request("conversation", "'conversation' is not supported: k3 stores no conversations; send them in 'input'");
  if (f.boolean("background", false)) bad_request("background", "'background': true is not supported");
  if (f.integer("top_logprobs", 0, 0, 20) != 0) bad_request("top_logprobs", "'top_logprobs' is not supported");
  if (f.has("include")) {
    const json& inc = f.array("include");
    for (size_t i = 0; i < inc.size(); ++i)
      if (!inc[i].is_string()) bad_request(at_index("include", i), "'" + at_index("include", i) + "' must be a string");
  }
  if (f.has("metadata")) f.object("metadata");
  f.boolean("parallel_tool_calls", true);
  f.integer("max_tool_calls", 0, 1, INT64_MAX);
  for (const char* k : {"prompt_cache_key", "prompt_cache_retention", "safety_identifier", "service_tier", "user"})
    f.str(k, "");
  const std::string truncation = f.str("truncation", "disabled");
  if (truncation != "disabled" && truncation != "auto")
    bad_request("truncation", "'truncation' must be disabled or auto, got '" + truncation + "'");

  r.gen.max_tokens = parse_budget(f, "max_output_tokens", lim, false);
  r.gen.sampling = parse_sampling(f, lim, 2.0, false);
  r.gen.stream = f.boolean("stream", false);
  if (f.has("stream_options")) {
    Fields so(f.at("stream_options"), "stream_options");
    so.only({"include_obfuscation"});
    so.boolean("include_obfuscation", false);
  }
  r.gen.canned = parse_canned(f, lim);

  const json messages = convert_input(f, lim);
  r.tools = convert_tools(f);
  convert_tool_choice(f, r);
  json in = chat_template_inputs(messages, r);
  if (f.has("reasoning")) {
    Fields rs(f.at("reasoning"), "reasoning");
    rs.only({"effort", "summary", "generate_summary"});
    apply_effort(in, rs.str("effort", ""), "reasoning.effort");
    for (const char* k : {"summary", "generate_summary"}) {
      const std::string v = rs.str(k, "auto");
      if (v != "auto" && v != "concise" && v != "detailed")
        bad_request(rs.name(k), "'" + rs.name(k) + "' must be auto, concise or detailed, got '" + v + "'");
    }
  }
  convert_text(f, in);
  r.template_inputs = std::move(in);
  return r;
}

}  // namespace k3::server
