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
//   custom_tool_call(_output)             -> the same, the call's input as the argument `input`
//   tools: function                       -> as in chat completions
//          namespace                      -> its functions, named NAMESPACE.NAME for the model
//          custom                         -> a function of one string argument `input`
//          hosted (web_search, mcp, ...)  -> accepted, not offered (k3 runs no tools)
//   tool_choice, text.format, reasoning.effort -> as in chat completions
// Stored state (previous_response_id, store: true, conversation, item_reference, prompt) is a 400.
#include <algorithm>
#include <set>

#include "common/base64.h"
#include "server/requests.h"

namespace k3::server {

namespace {

std::string at_index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// A string field (or, for an array, each of its elements) that must be one of `values`.
void one_of(const Fields& f, const char* key, std::initializer_list<std::string_view> values) {
  if (!f.has(key)) return;
  const json& v = f.at(key);
  auto check = [&](const json& x, const std::string& path) {
    if (!x.is_string()) bad_request(path, "'" + path + "' must be a string, not " + type_name(x));
    std::string list;
    for (std::string_view s : values) {
      if (x.get<std::string>() == s) return;
      list += (list.empty() ? "" : ", ") + std::string(s);
    }
    bad_request(path, "'" + path + "' must be one of " + list + "; got '" + x.get<std::string>() + "'");
  };
  if (!v.is_array()) return check(v, f.name(key));
  for (size_t i = 0; i < v.size(); ++i) check(v[i], at_index(f.name(key), i));
}

// The tool types the Responses API runs itself: accepted in `tools`, never offered to the model.
bool hosted_tool(const std::string& type) {
  static const std::set<std::string> kHosted = {
      "web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11", "file_search",
      "code_interpreter", "image_generation", "computer", "computer_use", "computer_use_preview", "local_shell", "shell",
      "apply_patch", "mcp", "tool_search", "programmatic_tool_calling"};
  return kHosted.count(type) > 0;
}

// The text of a reasoning item's encrypted_content when k3 wrote it; nothing for another model's.
std::optional<std::string> decode_reasoning(const std::string& s, const std::string& path) {
  if (s.compare(0, kReasoningPrefix.size(), kReasoningPrefix) != 0) return std::nullopt;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t i = kReasoningPrefix.size();
  for (; i < s.size() && s[i] != '='; ++i) {
    const int v = base64_value(s[i]);
    if (v < 0) bad_request(path, "'" + path + "' is a k3 reasoning item with broken base64");
    acc = acc << 6 | static_cast<uint32_t>(v);
    if ((bits += 6) >= 8) out += static_cast<char>(acc >> (bits -= 8) & 0xFF);
  }
  if (!valid_utf8(out)) bad_request(path, "'" + path + "' is a k3 reasoning item that does not hold UTF-8 text");
  return out;
}

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

// A tool's model-visible name for a call item: NAMESPACE.NAME inside a namespace.
std::string call_name(const Fields& f, const std::string& p) {
  const std::string name = f.str("name", "", true);
  if (name.empty()) bad_request(p + ".name", "'" + p + ".name' is empty");
  const std::string ns = f.str("namespace", "");
  return ns.empty() ? name : ns + "." + name;
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
      // k3's own encrypted_content holds the text; another model's is opaque here.
      const std::optional<std::string> own = decode_reasoning(f.str("encrypted_content", ""), p + ".encrypted_content");
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
      if (text.empty() && own) text = *own;
      if (!text.empty()) assistant(1)["reasoning_content"] = text;  // nothing readable: no turn of its own
    } else if (type == "function_call" || type == "custom_tool_call") {
      const bool custom = type == "custom_tool_call";
      if (custom) f.only({"type", "id", "call_id", "name", "input", "status", "namespace"});
      else f.only({"type", "id", "call_id", "name", "arguments", "status", "namespace"});
      f.str("id", "");
      f.str("status", "");
      const std::string id = f.str("call_id", "", true);
      if (id.empty()) bad_request(p + ".call_id", "'" + p + ".call_id' is empty");
      if (!call_ids.insert(id).second)
        bad_request(p + ".call_id", "'" + p + ".call_id' = '" + id + "' is used by another call; ids must be unique");
      const std::string name = call_name(f, p);
      const std::string args = custom ? dump(json{{"input", f.str("input", "", true)}}) : f.str("arguments", "", true);
      json& m = assistant(3);
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      m["tool_calls"].push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}});
      turn_calls.push_back(id);
    } else if (type == "function_call_output" || type == "custom_tool_call_output") {
      f.only({"type", "id", "call_id", "output", "status"});
      f.str("id", "");
      f.str("status", "");
      const std::string id = f.str("call_id", "", true);
      if (std::find(turn_calls.begin(), turn_calls.end(), id) == turn_calls.end())
        bad_request(p + ".call_id", "'" + p + ".call_id' = '" + id + "' matches no call of the assistant turn before it");
      if (!answered.insert(id).second)
        bad_request(p + ".call_id", "'" + p + ".call_id' = '" + id + "' has an output already");
      out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", text_of(f, "output", p + ".output")}});
      stage = 0;
    } else if (type == "item_reference") {
      bad_request(p + ".type", "'" + p + ".type' = 'item_reference': k3 stores no responses; send the items themselves");
    } else {
      bad_request(p + ".type", "'" + p + ".type' = '" + type +
                                   "' is not supported (message, reasoning, function_call, function_call_output, "
                                   "custom_tool_call, custom_tool_call_output)");
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

// A custom tool as the model sees it: a function whose one string argument is the tool's input; a
// grammar is described to the model (sampling is not constrained by it).
json custom_tool(const Fields& t, const std::string& model_name) {
  t.only({"type", "name", "description", "format", "defer_loading", "allowed_callers", "async"});
  std::string desc = t.str("description", "");
  if (t.has("format")) {
    Fields fmt(t.at("format"), t.name("format"));
    const std::string type = fmt.str("type", "", true);
    if (type == "grammar") {
      fmt.only({"type", "syntax", "definition"});
      const std::string syntax = fmt.str("syntax", "", true);
      if (syntax != "lark" && syntax != "regex")
        bad_request(fmt.name("syntax"), "'" + fmt.name("syntax") + "' must be lark or regex, got '" + syntax + "'");
      desc += (desc.empty() ? "" : "\n\n") + std::string("The input must match this ") + syntax + " grammar:\n" +
              fmt.str("definition", "", true);
    } else if (type == "text") {
      fmt.only({"type"});
    } else {
      bad_request(fmt.name("type"), "'" + fmt.name("type") + "' must be text or grammar, got '" + type + "'");
    }
  }
  json fn = {{"name", model_name}};
  if (!desc.empty()) fn["description"] = desc;
  fn["parameters"] = {{"type", "object"},
                      {"properties", {{"input", {{"type", "string"}, {"description", "the tool's input, free-form"}}}}},
                      {"required", {"input"}}};
  return json{{"type", "function"}, {"function", std::move(fn)}};
}

// A function or custom tool, named NAMESPACE.NAME for the model inside a namespace; `names` holds
// the model-visible names so far, `inner` the names within the namespace.
void offer_tool(ChatRequest& r, const Fields& t, const std::string& ns, std::set<std::string>& names,
                std::set<std::string>& inner) {
  const std::string type = t.str("type", "", true);
  if (type != "function" && type != "custom")
    bad_request(t.name("type"), "'" + t.name("type") + "' = '" + type + "': a namespace holds function and custom tools");
  const std::string name = t.str("name", "", true);
  check_tool_name(name, t.name("name"), ns.empty() ? names : inner);
  const std::string model_name = ns.empty() ? name : ns + "." + name;
  if (!ns.empty() && !names.insert(model_name).second)
    bad_request(t.name("name"), "'" + t.name("name") + "' = '" + model_name + "' names another tool too");
  json tool;
  if (type == "function") {
    t.only({"type", "name", "description", "parameters", "strict", "defer_loading", "allowed_callers", "async"});
    std::set<std::string> checked;  // the name was checked above
    tool = function_tool(t, "parameters", false, checked);
    tool["function"]["name"] = model_name;
  } else {
    tool = custom_tool(t, model_name);
  }
  r.tools.push_back(std::move(tool));
  if (!ns.empty() || type == "custom") r.tool_origins[model_name] = ToolOrigin{ns, name, type == "custom"};
  t.boolean("defer_loading", false);
  t.boolean("async", false);
}

void convert_tools(const Fields& f, ChatRequest& r) {
  if (!f.has("tools")) return;
  const json& in = f.array("tools");
  std::set<std::string> names;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string p = at_index("tools", i);
    Fields t(in[i], p);
    const std::string type = t.str("type", "", true);
    if (type == "function" || type == "custom") {
      offer_tool(r, t, "", names, names);
    } else if (type == "namespace") {
      t.only({"type", "name", "description", "tools"});
      const std::string ns = t.str("name", "", true);
      std::set<std::string> namespaces;
      check_tool_name(ns, p + ".name", namespaces);
      const std::string desc = t.str("description", "");
      const json& tools = t.array("tools");
      std::set<std::string> inner;
      for (size_t k = 0; k < tools.size(); ++k) {
        offer_tool(r, Fields(tools[k], at_index(p + ".tools", k)), ns, names, inner);
        // The model reads the namespace's description with each of its tools.
        json& fn = r.tools.back()["function"];
        if (!desc.empty()) fn["description"] = desc + (fn.contains("description") ? "\n\n" + fn["description"].get<std::string>() : "");
      }
    } else if (!hosted_tool(type)) {
      bad_request(p + ".type", "'" + p + ".type' = '" + type +
                                   "' is not a tool type (function, custom, namespace, or a hosted tool such as web_search)");
    }
  }
}

void convert_tool_choice(const Fields& f, ChatRequest& r) {
  if (!f.has("tool_choice")) return;
  const json& tc = f.at("tool_choice");
  if (tc.is_string()) {
    r.tool_choice = tc.get<std::string>();
    if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
      bad_request("tool_choice", "'tool_choice' must be auto, none, required or an object, got '" + r.tool_choice + "'");
  } else {
    Fields c(tc, "tool_choice");
    const std::string type = c.str("type", "", true);
    if (type == "function" || type == "custom") {
      c.only({"type", "name"});
      require_tool(r, c.str("name", "", true), "tool_choice.name");  // a namespace's function: NAMESPACE.NAME
      r.tool_choice = "required";
    } else if (type == "allowed_tools") {
      // Only the listed tools are offered; hosted ones in the list are left out like all hosted tools.
      c.only({"type", "mode", "tools"});
      one_of(c, "mode", {"auto", "required"});
      const std::string mode = c.str("mode", "", true);
      std::set<std::string> allowed;
      const json& list = c.array("tools");
      for (size_t i = 0; i < list.size(); ++i) {
        Fields t(list[i], at_index("tool_choice.tools", i));
        const std::string ttype = t.str("type", "", true);
        if (ttype == "function" || ttype == "custom") {
          const std::string name = t.str("name", "", true);
          require_tool(r, name, t.name("name"));
          allowed.insert(name);
        } else if (!hosted_tool(ttype)) {
          bad_request(t.name("type"), "'" + t.name("type") + "' = '" + ttype + "' is not a tool type");
        }
      }
      json kept = json::array();
      for (json& t : r.tools)
        if (allowed.count(t["function"]["name"].get<std::string>())) kept.push_back(std::move(t));
      r.tools = std::move(kept);
      r.tool_choice = mode;
    } else if (hosted_tool(type)) {
      bad_request("tool_choice.type", "'tool_choice' forces the hosted tool '" + type +
                                          "', which k3 cannot run (it runs no tools; offer a function instead)");
    } else {
      bad_request("tool_choice.type", "'tool_choice.type' = '" + type + "' is not a tool type");
    }
  }
  if (r.tool_choice == "required" && r.tools.empty())
    bad_request("tool_choice", "'tool_choice' is 'required' but no function or custom tools are given");
}

void convert_text(const Fields& f, json& in) {
  if (!f.has("text")) return;
  Fields t(f.at("text"), "text");
  t.only({"format", "verbosity"});
  one_of(t, "verbosity", {"low", "medium", "high"});
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

// The fields k3 accepts and ignores (docs/server.md), each checked for its type and its values.
void check_ignored(const Fields& f) {
  if (f.has("include")) f.array("include");
  one_of(f, "include", {"reasoning.encrypted_content", "file_search_call.results", "web_search_call.results",
                        "web_search_call.action.sources", "message.input_image.image_url",
                        "computer_call_output.output.image_url", "code_interpreter_call.outputs",
                        "message.output_text.logprobs"});
  for (const char* k : {"metadata", "client_metadata"})
    if (f.has(k))
      for (const auto& [key, v] : f.object(k).items())
        if (!v.is_string()) bad_request(f.name(k) + "." + key, "'" + f.name(k) + "." + key + "' must be a string");
  for (const char* k : {"background_options", "moderation", "access_programs", "image"})
    if (f.has(k)) f.object(k);
  if (f.has("context_management")) {
    const json& cm = f.array("context_management");
    for (size_t i = 0; i < cm.size(); ++i) {
      Fields e(cm[i], at_index("context_management", i));
      e.only({"type", "compact_threshold"});
      e.str("type", "", true);
      e.integer("compact_threshold", 0, 0, INT64_MAX);
    }
  }
  if (f.has("prompt_cache_options")) {
    Fields o(f.at("prompt_cache_options"), "prompt_cache_options");
    o.only({"mode", "ttl", "prewarm", "comparison_response_id"});
    one_of(o, "mode", {"implicit", "explicit"});
    one_of(o, "ttl", {"30m", "12h"});
    o.boolean("prewarm", false);
    o.str("comparison_response_id", "");
  }
  f.boolean("parallel_tool_calls", true);
  f.integer("max_tool_calls", 0, 1, INT64_MAX);
  for (const char* k : {"prompt_cache_key", "safety_identifier", "user"}) f.str(k, "");
  one_of(f, "prompt_cache_retention", {"in_memory", "24h"});
  one_of(f, "service_tier", {"auto", "default", "flex", "scale", "priority", "fast", "ultrafast"});
  one_of(f, "truncation", {"disabled", "auto"});
}

}  // namespace

ChatRequest parse_responses_request(const json& body, const RequestLimits& lim) {
  Fields f(body, "");
  check_canned_allowed(body, lim);
  f.only({"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens", "temperature", "top_p",
          "stream", "stream_options", "reasoning", "text", "store", "previous_response_id", "conversation",
          "background", "background_options", "include", "metadata", "client_metadata", "parallel_tool_calls",
          "max_tool_calls", "prompt", "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options",
          "safety_identifier", "service_tier", "truncation", "top_logprobs", "user", "context_management",
          "moderation", "access_programs", "image", "k3_canned"});
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
  if (f.has("prompt")) bad_request("prompt", "'prompt' (a stored prompt) is not supported: k3 stores no prompts");
  if (f.boolean("background", false)) bad_request("background", "'background': true is not supported");
  if (f.integer("top_logprobs", 0, 0, 20) != 0) bad_request("top_logprobs", "'top_logprobs' is not supported");
  check_ignored(f);

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
  convert_tools(f, r);
  convert_tool_choice(f, r);
  json in = chat_template_inputs(messages, r);
  if (f.has("reasoning")) {
    Fields rs(f.at("reasoning"), "reasoning");
    rs.only({"effort", "summary", "generate_summary", "context", "mode"});
    apply_effort(in, rs.str("effort", ""), "reasoning.effort");
    for (const char* k : {"summary", "generate_summary"}) one_of(rs, k, {"auto", "concise", "detailed"});
    one_of(rs, "context", {"auto", "current_turn", "all_turns"});
    rs.str("mode", "");
  }
  convert_text(f, in);
  r.template_inputs = std::move(in);
  return r;
}

}  // namespace k3::server
