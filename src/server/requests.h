// The request bodies of the generation endpoints, checked field by field (type, range, unknown
// fields) into typed structs. Any problem is an ApiError(400) naming the field.
#pragma once
#include <cstdint>
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

struct ChatRequest {
  std::string model;
  json template_inputs;  // messages (normalized), tools, tool_choice, ..., add_generation_prompt
  json tools = json::array();
  std::string tool_choice = "auto";  // auto | none | required (a named function: required)
  bool extract_reasoning = true;     // reasoning_format != none
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

ChatRequest parse_chat_request(const json& body, const RequestLimits& lim);
CompletionRequest parse_completions_request(const json& body, const RequestLimits& lim);  // /v1/completions
CompletionRequest parse_llama_completion(const json& body, const RequestLimits& lim);     // /completion

// {"tokens": [...]} of /detokenize and prompt ids: every element an id of the vocabulary.
std::vector<int32_t> parse_ids(const json& arr, const std::string& param, int32_t n_vocab, size_t max_len);

}  // namespace k3::server
