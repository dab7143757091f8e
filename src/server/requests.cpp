#include "server/requests.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <mutex>
#include <random>

#include "chat/chat_template.h"

namespace k3::server {

static uint64_t random_seed() {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  return rng();
}

std::vector<int32_t> parse_ids(const json& arr, const std::string& param, int32_t n_vocab, size_t max_len) {
  if (!arr.is_array()) bad_request(param, std::string("'") + param + "' must be an array of token ids, not " + type_name(arr));
  if (arr.size() > max_len) bad_request(param, std::string("'") + param + "' has more than " + std::to_string(max_len) + " tokens");
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    const std::string n = param + "[" + std::to_string(i) + "]";
    if (!v.is_number_integer()) bad_request(n, std::string("'") + n + "' must be a token id (an integer), not " + type_name(v));
    const int64_t id = v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX ? -1 : v.get<int64_t>();
    if (id < 0 || id >= n_vocab)
      bad_request(n, std::string("'") + n + "' = " + v.dump() + " is not a token id (the vocabulary has " + std::to_string(n_vocab) +
                         " tokens)");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

void check_canned_allowed(const json& body, const RequestLimits& lim) {
  if (body.is_object() && body.contains("k3_canned") && !lim.allow_canned)
    bad_request("k3_canned", "unknown field 'k3_canned' (a test-only field; see --test-canned)");
}

model::SamplerParams parse_sampling(const Fields& f, const RequestLimits& lim, double max_temp, bool llama_seed) {
  model::SamplerParams s = lim.defaults;
  s.temp = static_cast<float>(f.number("temperature", lim.defaults.temp, 0.0, max_temp));
  s.top_p = static_cast<float>(f.number("top_p", lim.defaults.top_p, 0.0, 1.0));
  s.top_k = static_cast<int32_t>(f.integer("top_k", lim.defaults.top_k, 0, 1 << 30));
  s.min_p = static_cast<float>(f.number("min_p", lim.defaults.min_p, 0.0, 1.0));
  const int64_t seed = f.integer("seed", -1, INT64_MIN, INT64_MAX);
  s.seed = (seed == -1 && !(f.has("seed") && !llama_seed)) ? random_seed() : static_cast<uint64_t>(seed);
  return s;
}

int32_t parse_budget(const Fields& f, const char* key, const RequestLimits& lim, bool required) {
  if (!f.has(key)) {
    if (required) bad_request(f.name(key), "'" + f.name(key) + "' is required");
    return std::min(lim.default_max_tokens, lim.max_tokens_cap);
  }
  return static_cast<int32_t>(std::min<int64_t>(f.integer(key, 0, 1, INT64_MAX), lim.max_tokens_cap));
}

std::vector<std::string> parse_stops(const Fields& f, const char* key, const RequestLimits& lim, bool allow_single) {
  std::vector<std::string> stops;
  if (!f.has(key)) return stops;
  const json& s = f.at(key);
  const std::string name = f.name(key);
  if (s.is_string() && allow_single) {
    stops.push_back(s.get<std::string>());
  } else if (s.is_array()) {
    if (s.size() > lim.max_stops)
      bad_request(name, "'" + name + "' has " + std::to_string(s.size()) + " strings; at most " +
                            std::to_string(lim.max_stops) + " are allowed");
    for (size_t i = 0; i < s.size(); ++i) {
      const std::string n = name + "[" + std::to_string(i) + "]";
      if (!s[i].is_string()) bad_request(n, std::string("'") + n + "' must be a string, not " + type_name(s[i]));
      stops.push_back(s[i].get<std::string>());
    }
  } else {
    bad_request(name, "'" + name + "' must be " + (allow_single ? "a string or " : "") + "an array of strings, not " +
                          type_name(s));
  }
  for (const std::string& st : stops) {
    if (st.empty()) bad_request(name, "'" + name + "' holds an empty string");
    if (st.size() > lim.max_stop_bytes)
      bad_request(name, "'" + name + "' holds a string longer than " + std::to_string(lim.max_stop_bytes) + " bytes");
  }
  return stops;
}

Canned parse_canned(const Fields& f, const RequestLimits& lim) {
  Canned canned;
  if (!f.has("k3_canned")) return canned;
  if (!lim.allow_canned) bad_request("k3_canned", "unknown field 'k3_canned' (a test-only field; see --test-canned)");
  Fields c(f.at("k3_canned"), "k3_canned");
  c.only({"text", "ids"});
  canned.set = true;
  if (c.has("text") == c.has("ids")) bad_request("k3_canned", "'k3_canned' needs exactly one of 'text' and 'ids'");
  if (c.has("text")) {
    canned.is_text = true;
    canned.text = c.str("text", "");
  } else {
    canned.ids = parse_ids(c.at("ids"), "k3_canned.ids", lim.n_vocab, 1u << 20);
  }
  return canned;
}

// Sampling, limits, stop strings, streaming and the test-only canned output: the fields the three
// OpenAI-style generation endpoints share.
static GenFields parse_gen(const Fields& f, const RequestLimits& lim, int32_t default_max, bool llama_style) {
  GenFields g;
  g.sampling = parse_sampling(f, lim, 2.0, llama_style);
  const int32_t cap = lim.max_tokens_cap;
  if (llama_style) {
    const int64_t n = f.integer("n_predict", -1, -1, cap);
    g.max_tokens = n < 0 ? std::min(default_max, cap) : static_cast<int32_t>(n);
    if (g.max_tokens == 0) bad_request("n_predict", "'n_predict' must be -1 (no limit) or at least 1");
  } else {
    g.max_tokens = std::min(default_max, cap);
    if (f.has("max_tokens")) g.max_tokens = static_cast<int32_t>(f.integer("max_tokens", 0, 1, cap));
    if (f.has("max_completion_tokens"))
      g.max_tokens = static_cast<int32_t>(f.integer("max_completion_tokens", 0, 1, cap));
  }
  g.stop = parse_stops(f, "stop", lim, true);
  g.stream = f.boolean("stream", false);
  if (f.has("stream_options")) {
    Fields so(f.at("stream_options"), "stream_options");
    so.only({"include_usage", "include_obfuscation"});
    g.include_usage = so.boolean("include_usage", false);
    so.boolean("include_obfuscation", false);
  }
  g.ignore_eos = f.boolean("ignore_eos", false);
  g.canned = parse_canned(f, lim);
  return g;
}

// Fields OpenAI defines that k3 accepts and ignores (documented in docs/server.md).
static void check_ignored(const Fields& f) {
  f.number("presence_penalty", 0, -2, 2);
  f.number("frequency_penalty", 0, -2, 2);
  f.str("user", "");
  f.boolean("store", false);
  if (f.has("metadata")) f.object("metadata");
  f.str("service_tier", "");
  f.integer("n", 1, 1, 1);
  if (f.has("logit_bias") && !f.object("logit_bias").empty())
    bad_request("logit_bias", "'logit_bias' is not supported (only an empty object)");
}

void require_vision(const std::string& path, const RequestLimits& lim) {
  if (!lim.vision)
    bad_request(path, "'" + path + "' is an image, but this server has no vision model (start k3 serve with --mmproj)");
}

json image_part(const std::string& url, const std::string& path, const RequestLimits& lim) {
  require_vision(path, lim);
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}, {"k3_path", path}};
}

// Text parts anywhere; image_url parts in user messages when the server has a vision model (the
// image itself is decoded by the handler).
static void check_content(const json& c, const std::string& path, const std::string& role, const RequestLimits& lim) {
  if (c.is_null() || c.is_string()) return;
  if (!c.is_array()) bad_request(path, std::string("'") + path + "' must be a string, an array of parts or null, not " + type_name(c));
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    Fields part(c[i], p);
    const std::string type = part.str("type", "", true);
    if (type == "image_url") {
      if (!lim.vision)
        bad_request(p + ".type", std::string("'") + p + "' is an image, but this server has no vision model (start k3 serve with --mmproj)");
      if (role != "user") bad_request(p + ".type", std::string("'") + p + "': image parts are only allowed in user messages");
      part.only({"type", "image_url", "cache_control"});
      Fields iu(part.object("image_url"), p + ".image_url");
      iu.only({"url", "detail"});
      iu.str("url", "", true);
      iu.str("detail", "");
      continue;
    }
    if (type != "text")
      bad_request(p + ".type", std::string("'") + p + ".type' = '" + type + "' is not supported (text" +
                                   (lim.vision ? " and image_url" : "") + " parts)");
    part.only({"type", "text", "cache_control"});
    part.str("text", "", true);
  }
}

static void check_messages(const json& msgs, const RequestLimits& lim) {
  if (msgs.empty()) bad_request("messages", "'messages' must not be empty");
  if (msgs.size() > lim.max_messages)
    bad_request("messages", "'messages' has more than " + std::to_string(lim.max_messages) + " entries");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    Fields m(msgs[i], p);
    m.only({"role", "content", "name", "tool_calls", "tool_call_id", "id", "tool", "reasoning_content", "reasoning",
            "refusal", "function_call", "audio", "annotations"});
    const std::string role = m.str("role", "", true);
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      bad_request(p + ".role", std::string("'") + p + ".role' = '" + role +
                                   "' is not a role (system, developer, user, assistant or tool)");
    if (m.has("content")) check_content(m.at("content"), p + ".content", role, lim);
    else if (role != "assistant") bad_request(p + ".content", std::string("'") + p + ".content' is required");
    m.str("name", "");
    m.str("tool_call_id", "");
    m.str("reasoning_content", "");
    m.str("reasoning", "");
    if (m.has("tool_calls")) {
      if (role != "assistant") bad_request(p + ".tool_calls", "only assistant messages have 'tool_calls'");
      const json& calls = m.array("tool_calls");
      for (size_t k = 0; k < calls.size(); ++k) {
        const std::string cp = p + ".tool_calls[" + std::to_string(k) + "]";
        Fields c(calls[k], cp);
        c.only({"id", "type", "function"});
        c.str("id", "");
        if (c.str("type", "function") != "function")
          bad_request(cp + ".type", std::string("'") + cp + ".type' must be 'function'");
        Fields fn(c.object("function"), cp + ".function");
        fn.only({"name", "arguments"});
        fn.str("name", "", true);
        if (fn.has("arguments") && !fn.at("arguments").is_string() && !fn.at("arguments").is_object())
          bad_request(cp + ".function.arguments",
                      std::string("'") + cp + ".function.arguments' must be a string (JSON text), not " + type_name(fn.at("arguments")));
      }
    }
  }
}

static void check_tools(const json& tools) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    Fields t(tools[i], p);
    t.only({"type", "function"});
    if (t.str("type", "", true) != "function") bad_request(p + ".type", std::string("'") + p + ".type' must be 'function'");
    Fields fn(t.object("function"), p + ".function");
    fn.only({"name", "description", "parameters", "strict"});
    if (fn.str("name", "", true).empty()) bad_request(p + ".function.name", std::string("'") + p + ".function.name' is empty");
    fn.str("description", "");
    if (fn.has("parameters")) check_tool_schema(fn.at("parameters"), p + ".function.parameters");
    fn.boolean("strict", false);
  }
}

void check_tool_name(const std::string& name, const std::string& path, std::set<std::string>& seen) {
  bool ok = !name.empty() && name.size() <= 128;
  for (char ch : name) ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-');
  if (!ok) bad_request(path, "'" + path + "' must be 1 to 128 letters, digits, '_' or '-'");
  if (!seen.insert(name).second) bad_request(path, "'" + path + "' = '" + name + "' names another tool too");
}

json function_tool(const Fields& t, const char* schema_key, bool schema_required, std::set<std::string>& names) {
  const std::string name = t.str("name", "", true);
  check_tool_name(name, t.name("name"), names);
  json fn = {{"name", name}};
  if (t.has("description")) fn["description"] = t.str("description", "");
  if (t.has(schema_key)) {
    check_tool_schema(t.at(schema_key), t.name(schema_key));
    fn["parameters"] = t.at(schema_key);
  } else if (schema_required) {
    bad_request(t.name(schema_key), "'" + t.name(schema_key) + "' is required");
  }
  if (t.has("strict")) fn["strict"] = t.boolean("strict", false);
  return json{{"type", "function"}, {"function", std::move(fn)}};
}

void require_tool(const ChatRequest& r, const std::string& name, const std::string& param) {
  for (const auto& t : r.tools)
    if (t["function"]["name"] == name) return;
  bad_request(param, "'" + param + "' = '" + name + "' is not in 'tools'");
}

void check_tool_schema(const json& schema, const std::string& path) {
  if (!schema.is_object()) bad_request(path, "'" + path + "' must be a JSON schema (an object), not " + type_name(schema));
  if (schema.contains("type") && schema["type"] != "object")
    bad_request(path + ".type", "'" + path + ".type' must be \"object\" (a tool takes named arguments), not " +
                                    schema["type"].dump());
  if (schema.contains("properties")) {
    const json& props = schema["properties"];
    if (!props.is_object())
      bad_request(path + ".properties", "'" + path + ".properties' must be an object, not " + type_name(props));
    for (auto it = props.begin(); it != props.end(); ++it)
      if (!it->is_object() && !it->is_boolean())
        bad_request(path + ".properties." + it.key(), "'" + path + ".properties." + it.key() +
                                                          "' must be a JSON schema (an object), not " + type_name(*it));
  }
  if (schema.contains("required")) {
    const json& req = schema["required"];
    bool ok = req.is_array();
    for (size_t i = 0; ok && i < req.size(); ++i) ok = req[i].is_string();
    if (!ok) bad_request(path + ".required", "'" + path + ".required' must be an array of property names");
  }
}

void apply_effort(json& in, const std::string& effort, const std::string& param) {
  if (effort == "none") in["thinking"] = false;
  else if (effort == "minimal" || effort == "low") in["thinking_effort"] = "low";
  else if (effort == "medium" || effort == "high") in["thinking_effort"] = "high";
  else if (effort == "max" || effort == "xhigh") in["thinking_effort"] = "max";
  else if (!effort.empty())
    bad_request(param, "'" + param + "' must be none, minimal, low, medium, high, xhigh or max, got '" + effort + "'");
}

json chat_template_inputs(const json& messages, const ChatRequest& r) {
  json in = json::object();
  in["messages"] = chat::normalize_openai_messages(messages);
  if (!r.tools.empty()) in["tools"] = r.tools;
  if (r.tool_choice != "auto") in["tool_choice"] = r.tool_choice;
  in["add_generation_prompt"] = true;
  return in;
}

ChatRequest parse_chat_request(const json& body, const RequestLimits& lim) {
  Fields f(body, "");
  check_canned_allowed(body, lim);
  f.only({"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
          "top_p", "top_k", "min_p", "stop", "seed", "tools", "tool_choice", "parallel_tool_calls", "response_format",
          "n", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "user", "store",
          "metadata", "service_tier", "reasoning_effort", "reasoning_format", "chat_template_kwargs", "ignore_eos",
          "k3_canned"});
  ChatRequest r;
  r.model = f.str("model", "");
  check_ignored(f);
  if (f.boolean("logprobs", false)) bad_request("logprobs", "'logprobs' is not supported");
  if (f.integer("top_logprobs", 0, 0, 20) != 0) bad_request("top_logprobs", "'top_logprobs' is not supported");
  f.boolean("parallel_tool_calls", true);
  r.gen = parse_gen(f, lim, lim.default_max_tokens, false);

  const json& msgs = f.array("messages");
  check_messages(msgs, lim);

  if (f.has("tools")) {
    r.tools = f.array("tools");
    check_tools(r.tools);
  }
  if (f.has("tool_choice")) {
    const json& tc = f.at("tool_choice");
    if (tc.is_string()) {
      r.tool_choice = tc.get<std::string>();
      if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
        bad_request("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or a function, got '" +
                                       r.tool_choice + "'");
    } else {
      Fields c(tc, "tool_choice");
      c.only({"type", "function"});
      if (c.str("type", "", true) != "function") bad_request("tool_choice.type", "'tool_choice.type' must be 'function'");
      Fields fn(c.object("function"), "tool_choice.function");
      fn.only({"name"});
      require_tool(r, fn.str("name", "", true), "tool_choice.function.name");
      r.tool_choice = "required";
    }
    if (r.tool_choice == "required" && r.tools.empty())
      bad_request("tool_choice", "'tool_choice' is 'required' but no 'tools' are given");
  }

  json in = chat_template_inputs(msgs, r);

  if (f.has("response_format")) {
    Fields rf(f.at("response_format"), "response_format");
    rf.only({"type", "json_schema"});
    const std::string type = rf.str("type", "", true);
    if (type == "json_schema") {
      Fields js(rf.object("json_schema"), "response_format.json_schema");
      js.only({"name", "description", "schema", "strict"});
      js.str("name", "");
      js.str("description", "");
      if (js.has("schema")) js.object("schema");
      js.boolean("strict", false);
    } else if (type != "text" && type != "json_object") {
      bad_request("response_format.type",
                  "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '" + type + "'");
    }
    if (type != "text") in["response_format"] = f.at("response_format");
  }

  apply_effort(in, f.str("reasoning_effort", ""), "reasoning_effort");

  const std::string rfmt = f.str("reasoning_format", "auto");
  if (rfmt != "auto" && rfmt != "none" && rfmt != "deepseek")
    bad_request("reasoning_format", "'reasoning_format' must be auto, deepseek or none, got '" + rfmt + "'");
  r.extract_reasoning = rfmt != "none";

  if (f.has("chat_template_kwargs")) {
    const json& kw = f.object("chat_template_kwargs");
    for (auto it = kw.begin(); it != kw.end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt")
        bad_request("chat_template_kwargs." + it.key(),
                    "'chat_template_kwargs." + it.key() + "' cannot be set (it comes from the request)");
      in[it.key()] = it.value();
    }
  }
  r.template_inputs = std::move(in);
  return r;
}

static void parse_prompt(const Fields& f, CompletionRequest& r, const RequestLimits& lim) {
  if (!f.has("prompt")) bad_request("prompt", "'prompt' is required");
  const json& p = f.at("prompt");
  const size_t max_ids = 1u << 20;
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    r.prompt_is_ids = true;
    r.prompt_ids = parse_ids(p, "prompt", lim.n_vocab, max_ids);
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt = p[0].get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_array()) {
    r.prompt_is_ids = true;
    r.prompt_ids = parse_ids(p[0], "prompt[0]", lim.n_vocab, max_ids);
  } else if (p.is_array() && p.size() > 1) {
    bad_request("prompt", "'prompt' holds several prompts; one per request is supported");
  } else {
    bad_request("prompt", std::string("'prompt' must be a string or an array of token ids, not ") + type_name(p));
  }
  if (r.prompt_is_ids ? r.prompt_ids.empty() : r.prompt.empty()) bad_request("prompt", "'prompt' is empty");
}

CompletionRequest parse_completions_request(const json& body, const RequestLimits& lim) {
  Fields f(body, "");
  check_canned_allowed(body, lim);
  f.only({"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stream", "stream_options",
          "stop", "seed", "echo", "logprobs", "suffix", "best_of", "presence_penalty", "frequency_penalty",
          "logit_bias", "user", "ignore_eos", "k3_canned"});
  CompletionRequest r;
  r.model = f.str("model", "");
  check_ignored(f);
  if (f.boolean("echo", false)) bad_request("echo", "'echo' is not supported");
  if (f.integer("logprobs", 0, 0, 5) != 0) bad_request("logprobs", "'logprobs' is not supported");
  if (!f.str("suffix", "").empty()) bad_request("suffix", "'suffix' is not supported");
  f.integer("best_of", 1, 1, 1);
  parse_prompt(f, r, lim);
  r.gen = parse_gen(f, lim, 16, false);  // OpenAI's default max_tokens for completions
  return r;
}

CompletionRequest parse_llama_completion(const json& body, const RequestLimits& lim) {
  Fields f(body, "");
  check_canned_allowed(body, lim);
  f.only({"prompt", "n_predict", "temperature", "top_k", "top_p", "min_p", "seed", "stop", "stream", "ignore_eos",
          "return_tokens", "cache_prompt", "k3_canned"});
  CompletionRequest r;
  parse_prompt(f, r, lim);
  r.gen = parse_gen(f, lim, lim.default_max_tokens, true);
  r.return_tokens = f.boolean("return_tokens", false);
  f.boolean("cache_prompt", false);
  return r;
}

}  // namespace k3::server
