// What the route handlers of `k3 serve` share (internal to src/server).
#pragma once
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "chat/jinja.h"
#include "model/model.h"
#include "server/api.h"
#include "server/chat_protocol.h"
#include "server/engine.h"
#include "server/generation.h"
#include "server/http_server.h"
#include "server/requests.h"
#include "server/test_script.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include "vision/vision.h"

namespace k3::server {

class Metrics {
 public:
  void count(const std::string& route, int status);
  // Prometheus text exposition of the request counters, the engine and the process.
  // experts: the expert cache's counters when streaming (else null).
  // cache: the prompt cache's counters (null: no cache).
  std::string render(const EngineStats& e, const HttpServer& http, double uptime_s,
                     const model::ExpertStats* experts = nullptr, const cache::CacheStats* cache = nullptr) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, long long> requests_;
};

struct ServerCtx {
  ServerOptions opt;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::ExpertStore> experts;  // streaming only
  std::unique_ptr<tok::Tokenizer> tok;
  std::unique_ptr<jinja::Template> own_template;  // from --chat-template-file or the GGUF
  const jinja::Template* tmpl = nullptr;
  std::string template_origin;                    // built-in | gguf | file path
  std::unique_ptr<vision::Vision> vision;         // --mmproj
  int32_t media_pad = -1;                          // <|media_pad|> (-1: not in the vocabulary)
  std::unique_ptr<spec::DraftModel> draft;       // -md (DSpark speculative decoding)
  std::unique_ptr<cache::PrefixCache> cache;      // null with --cache-ram 0
  std::unique_ptr<Engine> engine;
  std::unique_ptr<TestScript> script;             // --test-script
  RequestLimits limits;
  std::string model_id;
  int64_t created = 0;      // unix time the server started
  double t_start = 0;       // steady seconds
  Metrics metrics;
  std::atomic<bool> stopping{false};
};

// Route handlers (they throw ApiError for client errors).
void handle_chat(ServerCtx& c, const Request& req, Response& res);
void handle_messages(ServerCtx& c, const Request& req, Response& res);      // /v1/messages
void handle_count_tokens(ServerCtx& c, const Request& req, Response& res);  // /v1/messages/count_tokens
void handle_responses(ServerCtx& c, const Request& req, Response& res);     // /v1/responses
void handle_input_tokens(ServerCtx& c, const Request& req, Response& res);  // /v1/responses/input_tokens
void handle_completions(ServerCtx& c, const Request& req, Response& res);  // /v1/completions
void handle_completion(ServerCtx& c, const Request& req, Response& res);   // /completion
void handle_tokenize(ServerCtx& c, const Request& req, Response& res);
void handle_detokenize(ServerCtx& c, const Request& req, Response& res);
void handle_slots(ServerCtx& c, const Request& req, Response& res);        // GET /slots
void handle_slot_action(ServerCtx& c, const Request& req, Response& res);  // POST /slots/{id}

// Shared by the handlers.
void reply_json(Response& res, const json& j, int status = 200);
// The prompt must leave room for at least one generated token (400 otherwise).
void check_context(const ServerCtx& c, size_t n_prompt, const char* param);
// The engine's request. Its output is forced by k3_canned, else by the next --test-script entry
// (written after the generation prompt of chat_inputs, a chat request's template inputs), else sampled.
GenRequest make_gen_request(const ServerCtx& c, std::vector<int32_t> prompt, const GenFields& g,
                            const json* chat_inputs = nullptr);
// The rendered prompt of a chat request, tokenized, with its images (image_url parts with data
// URLs; each <|media_pad|> expanded to the image's rows). A template error or a bad image is a 400
// naming r.prompt_param or the image's part. text receives the rendering.
vision::ImagePrompt chat_prompt(const ServerCtx& c, const ChatRequest& r, std::string* text = nullptr);
// Runs a chat request and answers it through `proto`, streaming when the request asks.
void run_chat(ServerCtx& c, const ChatRequest& r, std::unique_ptr<ChatProtocol> proto, Response& res);
// usage.prompt_tokens_details of a finished generation.
json prompt_tokens_details(const Generation& g);
// Maps Engine::submit's refusal to an ApiError (503 with Retry-After via the error handler).
void check_admit(Engine::Admit a);
// The SSE event "data: JSON\n\n"; false when the client is gone.
bool sse(DataSink& sink, const json& j);
bool sse_raw(DataSink& sink, const std::string& data);
// Answers with a Server-Sent Events stream: stream_step(*job, sink) (found by argument-dependent
// lookup) writes what is ready and says whether to go on; the generation is cancelled when the
// stream ends or the client goes away. While the request waits in the queue nothing is sent (not
// even the response headers), so a queued stream costs its client nothing to abandon.
template <class Job>
void start_sse(Response& res, std::shared_ptr<Job> job) {
  using namespace std::chrono_literals;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, queued = true](DataSink& sink) mutable {
        if (queued) {
          queued = !job->gen->wait_started(50ms);
          if (queued) return !HttpServer::peer_gone();
        }
        return stream_step(*job, sink);
      },
      [job](bool) { job->gen->cancel(); });
}

}  // namespace k3::server
