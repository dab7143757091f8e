// The request bodies of the generation endpoints, checked field by field (type, range, unknown
// fields) into typed structs. Any problem is an ApiError(400) naming the field.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/sampler.h"
#include "server/api.h"

namespace k3::server {

struct RequestLimits {
  int32_t max_tokens_cap = 4096;      // largest max_tokens a request may ask for
  int32_t default_max_tokens = 4096;  // chat and /completion when the request sets none
  size_t max_stops = 16;              // stop strings per request
  size_t max_stop_bytes = 256;        // bytes of one stop string
  size_t max_messages = 4096;
  bool allow_canned = false;          // the test-only k3_canned field (--test-canned)
  bool vision = false;                // image_url parts accepted (k3 serve --mmproj)
  int32_t n_vocab = 0;
  model::SamplerParams defaults;      // sampling for fields the request leaves out
};

// Test mode (k3_canned): the model emits this instead of sampling.
struct Canned {
  bool set = false;
  bool is_text = false;  // text: tokenized with special tokens recognised
  std::string text;
  std::vector<int32_t> ids;
};

struct GenFields {
  model::SamplerParams sampling;
  int32_t max_tokens = 16;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, ignore_eos = false;
  Canned canned;
};

// The internal conversation every chat protocol is converted to: OpenAI-style messages as the K3
// template reads them (normalize_openai_messages), tools as OpenAI functions, and the settings
// that shape the prompt, the parse and the generation. The same conversation gives the same
// prompt whichever protocol it came in.
// A tool the model knows by another name or shape than the client does (Responses): a function of
// a namespace, which the model sees as "NAMESPACE.NAME", or a custom (free-form) tool, which it sees
// as a function of one string argument `input`.
struct ToolOrigin {
  std::string ns, name;
  bool custom = false;
};

struct ChatRequest {
  std::string model;
  json template_inputs;  // messages (normalized), tools, tool_choice, ..., add_generation_prompt
  json tools = json::array();
  std::string tool_choice = "auto";  // auto | none | required (a named function: required)
  bool extract_reasoning = true;     // reasoning_format != none
  std::string prompt_param = "messages";  // the field a template or context error names
  std::map<std::string, ToolOrigin> tool_origins;  // by the name the model sees
  GenFields gen;
};

struct CompletionRequest {
  std::string model;
  bool prompt_is_ids = false;
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  bool return_tokens = false;  // /completion: include the generated ids
  GenFields gen;
};

ChatRequest parse_chat_request(const json& body, const RequestLimits& lim);    // /v1/chat/completions
// count_only: /v1/messages/count_tokens (max_tokens not required).
ChatRequest parse_anthropic_request(const json& body, const RequestLimits& lim, bool count_only);  // /v1/messages
ChatRequest parse_responses_request(const json& body, const RequestLimits& lim);  // /v1/responses (+ input_tokens)
// The encrypted_content of k3's Responses reasoning items: the prefix + the text in base64. Opaque
// to the client, which sends it back; not secret.
inline constexpr std::string_view kReasoningPrefix = "k3-reasoning:";
std::string encode_reasoning(std::string_view text);
CompletionRequest parse_completions_request(const json& body, const RequestLimits& lim);  // /v1/completions
CompletionRequest parse_llama_completion(const json& body, const RequestLimits& lim);     // /completion

// ---- pieces the protocol parsers share ----

// 400 when the body has k3_canned but the server was not started with --test-canned (checked
// before any other field, so the message says why).
void check_canned_allowed(const json& body, const RequestLimits& lim);
// temperature (in [0, max_temp]), top_p, top_k, min_p, seed; the server's defaults for the rest.
model::SamplerParams parse_sampling(const Fields& f, const RequestLimits& lim, double max_temp, bool llama_seed);
// A token budget field: an integer >= 1, lowered to the server's cap (agents ask for more than a
// local context holds); the server's default when absent and not required.
int32_t parse_budget(const Fields& f, const char* key, const RequestLimits& lim, bool required);
// A stop string or an array of them, within the limits.
std::vector<std::string> parse_stops(const Fields& f, const char* key, const RequestLimits& lim, bool allow_single);
Canned parse_canned(const Fields& f, const RequestLimits& lim);
// A tool name: 1 to 128 of A-Z a-z 0-9 _ - (the K3 parser matches names literally, so one that the
// template would escape could never be called), not in `seen` (which it joins).
void check_tool_name(const std::string& name, const std::string& path, std::set<std::string>& seen);
// An OpenAI function tool {"type": "function", "function": {name, description, parameters, strict}} from a
// tool object whose parameter schema is under `schema_key`; `names` collects the names so far.
json function_tool(const Fields& t, const char* schema_key, bool schema_required, std::set<std::string>& names);
// 400 naming `param` unless one of r.tools is called `name`.
void require_tool(const ChatRequest& r, const std::string& name, const std::string& param);
// A tool's parameter schema: a JSON-schema object of type "object" whose properties are schemas.
void check_tool_schema(const json& schema, const std::string& path);
// A reasoning effort (none, minimal, low, medium, high, xhigh, max) as the K3 template's
// thinking / thinking_effort inputs.
void apply_effort(json& inputs, const std::string& effort, const std::string& param);
// template_inputs from converted messages and r's tools and tool_choice.
json chat_template_inputs(const json& messages, const ChatRequest& r);
// An image of a user message in the internal conversation: the image_url part chat_prompt decodes,
// carrying `path` (the client's field) for its errors. require_vision: a 400 naming `path` when the
// server has no vision model (image_part checks it too).
void require_vision(const std::string& path, const RequestLimits& lim);
json image_part(const std::string& url, const std::string& path, const RequestLimits& lim);

// {"tokens": [...]} of /detokenize and prompt ids: every element an id of the vocabulary.
std::vector<int32_t> parse_ids(const json& arr, const std::string& param, int32_t n_vocab, size_t max_len);

}  // namespace k3::server
