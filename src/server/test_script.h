// `k3 serve --test-script FILE` (tests only): the model's outputs for a scripted session, so that a
// real agent client can be driven through tool calls and a final answer. FILE is a JSON array with
// one entry per generation request, taken in the order the requests are submitted (any route;
// count_tokens, tokenize and other requests that generate nothing take none). An entry is
//   "raw K3 output"                                  what k3_canned's text takes, or
//   {"reasoning": "…", "content": "…", "tool_calls": [{"name": "…", "arguments": {…}}]}
// (each key optional), which the chat template writes the way the model would after that request's
// generation prompt (thinking on or off, the template's tool-call syntax). The text is then forced
// token by token through the real tokenizer, engine, parser, streaming and prompt cache. Past the
// end of the array generation is the model's own.
#pragma once
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

#include "chat/jinja.h"
#include "server/api.h"

namespace k3::server {

class TestScript {
 public:
  // Reads and checks FILE; throws k3::Error naming the file and the entry.
  explicit TestScript(const std::string& path);
  // The next entry, or nothing past the end. Thread-safe.
  std::optional<json> next();
  size_t size() const { return entries_.size(); }

 private:
  json entries_;
  size_t next_ = 0;
  std::mutex mu_;
};

// An entry as the model's output after the generation prompt of `chat_inputs` (the template inputs
// of a chat request), or, with none (the text routes), a string entry as it is and an object's
// content. Throws ApiError(500) when the template renders an assistant message that does not
// continue its own generation prompt.
std::string script_output(const json& entry, const jinja::Template& t, const json* chat_inputs);

}  // namespace k3::server
