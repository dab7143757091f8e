// Kimi-K3 output parser: splits what the model generates after the generation prompt into
// reasoning_content, content and tool_calls (the XTML format of shared/spec/chat.md §4-§5),
// incrementally, for streaming.
//
//   K3StreamParser p(opts);
//   for (each detokenized piece) send(p.feed(piece));   // deltas; never a marker or a piece of one
//   send(p.finish());                                   // flushes held-back text
//   const ChatMessage& m = p.message();                 // == the sum of all deltas
//
// Rules (chat.md §5) with these k3 choices:
//  * The final message is, by construction, the concatenation of the deltas: text that ends in
//    a proper prefix of a marker is held back until the next piece decides; an incomplete UTF-8
//    sequence too; a reasoning made only of whitespace is held back and dropped.
//  * Malformed output (an undeclared tool, an unknown argument key, the <json> form, a tools
//    section where none is allowed, text after the end of the message) is not an error that
//    loses text: everything from the first construct that does not match is appended to
//    content verbatim and message().error says why (llama.cpp fails the request instead).
//    Calls completed before that point are kept.
//  * Truncated output (token budget): what was parsed is returned; a call cut inside an argument
//    keeps its arguments text so far. A held-back tail is returned as text at finish() unless it
//    holds a complete special token (then it is a cut marker, e.g. "<|close|>resp", and is
//    dropped): K3's special tokens are atomic, so "<" or "<|clo" at the end can only be text.
//  * The think body also ends at <|close|>message<|sep|>, at <|end_of_msg|> and (when tools are
//    allowed) at <|open|>tools<|sep|>, so a model that skips the response section still gets its
//    tool calls parsed and no closing marker leaks into the reasoning. Content also ends at
//    <|end_of_msg|>.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace k3::chat {

struct K3ParserOptions {
  // The generation prompt opened <|open|>think<|sep|> (thinking on) or <|open|>response<|sep|>.
  bool thinking = true;
  // false = reasoning format "none": the think body goes to content.
  bool extract_reasoning = true;
  // OpenAI tools list ([{"type":"function","function":{"name":..,"parameters":{..}}}] or flat
  // {"name":..,"parameters":..}); argument values are typed from parameters.properties.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  // "auto", "none" or "required" (map an OpenAI object naming one function to "required").
  std::string tool_choice = "auto";
};

struct ToolCall {
  std::string id;  // empty: the server assigns one
  std::string name;
  std::string arguments;  // JSON text built from the argument tags (chat.md §5)
};

struct ToolCallDelta {
  size_t index = 0;
  bool opens = false;     // first delta of this call: carries the name
  std::string name;
  std::string arguments;  // appended to the call's arguments
};

struct ChatDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
  // OpenAI streaming `delta` object (only the fields that are present).
  nlohmann::ordered_json to_openai() const;
};

struct ChatMessage {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
  // Non-empty when the output did not match the format; the unparsed text is in content.
  std::string error;
  // OpenAI `message` object: role, content (null when empty and there are tool calls),
  // reasoning_content when non-empty, tool_calls when any.
  nlohmann::ordered_json to_openai() const;
};

class K3StreamParser {
 public:
  explicit K3StreamParser(const K3ParserOptions& opts);
  ~K3StreamParser();
  K3StreamParser(K3StreamParser&&) noexcept;
  K3StreamParser& operator=(K3StreamParser&&) noexcept;

  // Generated text (after the generation prompt), any split. Returns what became certain.
  ChatDelta feed(std::string_view text);
  // End of generation. Returns the last delta; message() is then final. feed() after finish()
  // is ignored.
  ChatDelta finish();
  const ChatMessage& message() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot parse of a complete generation.
ChatMessage parse_k3_output(std::string_view generated, const K3ParserOptions& opts);

}  // namespace k3::chat
