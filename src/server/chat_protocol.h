// The answer of a chat route, apart from the HTTP transport. The three chat protocols (OpenAI chat
// completions, Anthropic Messages, OpenAI Responses) get the same parsed output — the deltas of
// the K3 output parser, then how the generation ended — and each turns it into its own stream of
// events or response body. The one generation pipeline they share (template, engine,
// detokenizer, stop strings, parser) is run by the route driver in routes_chat.cpp.
//
//   auto p = anthropic_protocol(model);           // one per request
//   p->begin(n_prompt, n_cached, ev);             // streaming: the opening events
//   p->delta(parser.feed(text), ev);              // streaming and not, in order
//   p->end(outcome, ev)   or   json body = p->body(outcome);
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/k3_parser.h"
#include "server/api.h"
#include "server/engine.h"

namespace k3::server {

struct ChatRequest;

// One Server-Sent Event: an `event:` line (none when name is empty) and one `data:` line.
struct SseEvent {
  std::string name;
  std::string data;
};
using SseEvents = std::vector<SseEvent>;
SseEvent sse_event(std::string name, const json& data);
std::string sse_text(const SseEvent& e);  // the bytes on the wire

// How a generation ended.
struct ChatOutcome {
  enum class Stop { End, Length, StopString };  // end of generation, token budget or context, stop string
  Stop stop = Stop::End;
  std::string stop_string;                      // the one that matched
  const chat::ChatMessage* message = nullptr;   // the final parse
  int32_t n_prompt = 0, n_gen = 0;
  int32_t n_cached = 0;  // prompt tokens served from the prompt cache
  TaskTimes times;
};

class ChatProtocol {
 public:
  virtual ~ChatProtocol() = default;
  // Streaming: the events before any output; n_cached of the n_prompt tokens came from the cache.
  virtual void begin(int32_t n_prompt, int32_t n_cached, SseEvents& out) = 0;
  // The next piece of parsed output. Called streaming or not: protocols that build their answer
  // from the pieces (so that both agree by construction) do it here.
  virtual void delta(const chat::ChatDelta& d, SseEvents& out) = 0;
  // Streaming: the last events.
  virtual void end(const ChatOutcome& o, SseEvents& out) = 0;
  // Streaming: the generation failed after the stream started.
  virtual void fail(int status, const std::string& message, SseEvents& out) = 0;
  // Streaming: nothing was sent for a while; a keep-alive event where the protocol has one.
  virtual void idle(SseEvents&) {}
  // Not streaming: the response body.
  virtual json body(const ChatOutcome& o) = 0;
};

// POST /v1/chat/completions: chat.completion / chat.completion.chunk, then [DONE].
std::unique_ptr<ChatProtocol> openai_chat_protocol(std::string model, bool include_usage);
// POST /v1/messages: an Anthropic message / message_start … message_stop.
std::unique_ptr<ChatProtocol> anthropic_protocol(std::string model);
// POST /v1/responses: a response object / response.created … response.completed. `request` is
// the checked body (echoed in the response object); count_tokens gives
// output_tokens_details.reasoning_tokens.
std::unique_ptr<ChatProtocol> responses_protocol(const json& request, const ChatRequest& r, std::string model,
                                                 std::function<int32_t(std::string_view)> count_tokens);

}  // namespace k3::server
