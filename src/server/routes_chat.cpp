// POST /v1/chat/completions: template -> tokens -> engine -> detokenizer -> stop strings -> the
// K3 output parser -> OpenAI message (non-streaming) or chat.completion.chunk events (SSE).
#include <chrono>

#include "chat/chat_template.h"
#include "chat/k3_parser.h"
#include "server/context.h"
#include "server/generation.h"

namespace k3::server {

using namespace std::chrono_literals;

namespace {

struct ChatJob {
  std::string id = random_id("chatcmpl-");
  int64_t created = unix_now();
  std::string model;
  bool include_usage = false;
  std::unique_ptr<Generation> gen;
  std::unique_ptr<chat::K3StreamParser> parser;
  std::vector<std::string> call_ids;  // by tool-call index
  bool started = false, finished = false;
  ServerCtx* ctx = nullptr;

  const std::string& call_id(size_t i) {
    while (call_ids.size() <= i) call_ids.push_back(random_id("call_"));
    return call_ids[i];
  }

  json usage() const {
    return json{{"prompt_tokens", gen->n_prompt()},
                {"completion_tokens", gen->n_gen()},
                {"total_tokens", gen->n_prompt() + gen->n_gen()},
                {"prompt_tokens_details", {{"cached_tokens", 0}}}};
  }
  json timings() const {
    const TaskTimes t = gen->times();
    return json{{"queued_ms", t.queued_ms},
                {"prompt_n", gen->n_prompt()},
                {"prompt_ms", t.prompt_ms},
                {"predicted_n", gen->n_gen()},
                {"predicted_ms", t.gen_ms},
                {"predicted_per_second", t.gen_ms > 0 ? 1000.0 * (gen->n_gen() - 1) / t.gen_ms : 0.0}};
  }

  const char* finish_reason(const chat::ChatMessage& m) const {
    const char* r = gen->finish_reason();
    if (std::string(r) == "stop" && !m.tool_calls.empty()) return "tool_calls";
    return r;
  }

  json chunk(json delta, const json& finish) const {
    json ch = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", finish}};
    json j = {{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", "k3"},
              {"choices", json::array({std::move(ch)})}};
    if (include_usage) j["usage"] = nullptr;
    return j;
  }

  json delta_json(const chat::ChatDelta& d) {
    json o = d.to_openai();
    if (o.contains("tool_calls"))
      for (auto& tc : o["tool_calls"])
        if (tc.contains("id")) tc["id"] = call_id(tc["index"].get<size_t>());
    return o;
  }
};

// One call of the SSE content provider: waits briefly for tokens and writes what became certain.
// Returns false to abort the response (client gone).
bool stream_step(ChatJob& job, httplib::DataSink& sink) {
  if (!job.started) {
    job.started = true;
    return sse(sink, job.chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr));
  }
  Generation::Piece p = job.gen->poll(50ms);
  chat::ChatDelta d = job.parser->feed(p.text);
  if (!d.empty() && !sse(sink, job.chunk(job.delta_json(d), nullptr))) return false;
  if (!p.done) {
    if (HttpServer::peer_gone()) return false;
    return true;
  }
  if (job.gen->failed()) {
    sse(sink, error_body(job.ctx->stopping ? 503 : 500, job.gen->error()));
  } else {
    d = job.parser->finish();
    if (!d.empty() && !sse(sink, job.chunk(job.delta_json(d), nullptr))) return false;
    json last = job.chunk(json::object(), job.finish_reason(job.parser->message()));
    if (job.include_usage) last.erase("usage");
    if (!sse(sink, last)) return false;
    if (job.include_usage) {
      json u = {{"id", job.id},       {"object", "chat.completion.chunk"}, {"created", job.created},
                {"model", job.model}, {"system_fingerprint", "k3"},       {"choices", json::array()},
                {"usage", job.usage()}};
      if (!sse(sink, u)) return false;
    }
  }
  if (!sse_raw(sink, "[DONE]")) return false;
  job.finished = true;
  sink.done();
  return true;
}

}  // namespace

void handle_chat(ServerCtx& c, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_body(req.body, c.opt.max_json_depth);
  ChatRequest r = parse_chat_request(body, c.limits);

  std::string prompt;
  try {
    prompt = chat::render_chat(*c.tmpl, r.template_inputs);
  } catch (const jinja::TemplateError& e) {
    throw ApiError(400, std::string("the chat template rejected this request: ") + e.message(), "messages");
  }
  const bool thinking = chat::k3_thinking_enabled(r.template_inputs);
  std::vector<int32_t> ids = c.tok->encode(prompt, true);
  check_context(c, ids.size(), "messages");

  auto job = std::make_shared<ChatJob>();
  job->ctx = &c;
  job->model = r.model.empty() ? c.model_id : r.model;
  job->include_usage = r.gen.include_usage;
  chat::K3ParserOptions po;
  po.thinking = thinking;
  po.extract_reasoning = r.extract_reasoning;
  po.tools = r.tools;
  po.tool_choice = r.tool_choice;
  job->parser = std::make_unique<chat::K3StreamParser>(po);
  job->gen = std::make_unique<Generation>(*c.engine, *c.tok, make_gen_request(c, std::move(ids), r.gen), r.gen.stop,
                                          true);
  check_admit(job->gen->submit());

  if (r.gen.stream) {
    start_sse(c, res, job);
    return;
  }

  for (;;) {
    Generation::Piece p = job->gen->poll(100ms);
    job->parser->feed(p.text);
    if (p.done) break;
    if (HttpServer::peer_gone()) {
      job->gen->cancel();
      res.status = 499;  // client closed the request; nobody reads this
      return;
    }
  }
  if (job->gen->failed()) throw ApiError(c.stopping ? 503 : 500, job->gen->error());
  job->parser->finish();
  chat::ChatMessage m = job->parser->message();
  for (size_t i = 0; i < m.tool_calls.size(); ++i)
    if (m.tool_calls[i].id.empty()) m.tool_calls[i].id = job->call_id(i);
  json choice = {{"index", 0}, {"message", m.to_openai()}, {"logprobs", nullptr}, {"finish_reason", job->finish_reason(m)}};
  json out = {{"id", job->id},
              {"object", "chat.completion"},
              {"created", job->created},
              {"model", job->model},
              {"system_fingerprint", "k3"},
              {"choices", json::array({std::move(choice)})},
              {"usage", job->usage()},
              {"timings", job->timings()}};
  reply_json(res, out);
}

}  // namespace k3::server
