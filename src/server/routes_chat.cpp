// The chat routes' one pipeline: conversation -> template -> tokens -> engine -> detokenizer ->
// stop strings -> the K3 output parser -> the protocol's answer (chat_protocol.h), a response
// body or SSE events. POST /v1/chat/completions is the OpenAI protocol over it; /v1/messages and
// /v1/responses (routes_agents.cpp) are the others.
#include <chrono>

#include "chat/chat_template.h"
#include "server/context.h"
#include "server/generation.h"
#include "vision/vision.h"
#include "server/snapshot_points.h"

namespace k3::server {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct ChatJob {
  ServerCtx* ctx = nullptr;
  std::unique_ptr<Generation> gen;
  std::unique_ptr<chat::K3StreamParser> parser;
  std::unique_ptr<ChatProtocol> proto;
  int32_t n_prompt = 0;
  bool started = false;
  Clock::time_point last_write = Clock::now();

  void feed(const chat::ChatDelta& d, SseEvents& ev) {
    if (!d.empty()) proto->delta(d, ev);
  }

  ChatOutcome outcome() const {
    ChatOutcome o;
    o.stop = gen->hit_stop_string()                      ? ChatOutcome::Stop::StopString
             : std::string(gen->finish_reason()) == "length" ? ChatOutcome::Stop::Length
                                                             : ChatOutcome::Stop::End;
    if (gen->hit_stop_string()) o.stop_string = gen->stop_string();
    o.message = &parser->message();
    o.n_prompt = gen->n_prompt();
    o.n_gen = gen->n_gen();
    o.n_cached = gen->n_cached();
    o.times = gen->times();
    return o;
  }
};

bool write(ChatJob& job, DataSink& sink, const SseEvents& ev) {
  for (const SseEvent& e : ev) {
    const std::string s = sse_text(e);
    if (!sink.write(s.data(), s.size())) return false;
  }
  if (!ev.empty()) job.last_write = Clock::now();
  return true;
}

// One call of the SSE content provider: waits briefly for tokens and writes what became certain.
// Returns false to abort the response (client gone).
bool stream_step(ChatJob& job, DataSink& sink) {
  SseEvents ev;
  if (!job.started) {
    job.started = true;
    job.proto->begin(job.n_prompt, job.gen->n_cached(), ev);
    return write(job, sink, ev);
  }
  Generation::Piece p = job.gen->poll(50ms);
  job.feed(job.parser->feed(p.text), ev);
  if (!p.done) {
    if (ev.empty() && Clock::now() - job.last_write > 10s) job.proto->idle(ev);
    if (!write(job, sink, ev)) return false;
    return !HttpServer::peer_gone();
  }
  if (job.gen->failed()) {
    job.proto->fail(job.ctx->stopping ? 503 : 500, job.gen->error(), ev);
  } else {
    job.feed(job.parser->finish(), ev);
    job.proto->end(job.outcome(), ev);
  }
  if (!write(job, sink, ev)) return false;
  sink.done();
  return true;
}

// The image_url parts of the messages, in order, decoded and encoded, with their image prompts for
// the template. A bad image is a 400 naming its part.
std::vector<std::shared_ptr<const vision::ImageRows>> encode_images(const ServerCtx& c, const json& msgs, json& prompts) {
  std::vector<std::shared_ptr<const vision::ImageRows>> images;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json* content = msgs[i].is_object() && msgs[i].contains("content") ? &msgs[i]["content"] : nullptr;
    if (!content || !content->is_array()) continue;
    for (size_t j = 0; j < content->size(); ++j) {
      const json& part = (*content)[j];
      if (part.value("type", "") != "image_url") continue;
      const std::string name = part.contains("k3_path") ? part["k3_path"].get<std::string>()
                                                        : "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
      try {
        const vision::DataUrl d = vision::parse_data_url(part["image_url"]["url"].get<std::string>(), name);
        images.push_back(c.vision->encode(d.bytes, d.media_type, name));
      } catch (const vision::ImageError& e) {
        throw ApiError(400, e.what(), name);
      }
      prompts.push_back(images.back()->prompt());
    }
  }
  return images;
}

}  // namespace

vision::ImagePrompt chat_prompt(const ServerCtx& c, const ChatRequest& r, std::string* text) {
  // Images (image_url parts of user messages): their prompts go to the template as image_prompts.
  json prompts = json::array();
  const auto images = c.vision ? encode_images(c, r.template_inputs["messages"], prompts)
                               : std::vector<std::shared_ptr<const vision::ImageRows>>{};
  json with_images;
  if (!images.empty()) {
    with_images = r.template_inputs;
    with_images["image_prompts"] = std::move(prompts);
  }
  std::string prompt;
  try {
    prompt = chat::render_chat(*c.tmpl, images.empty() ? r.template_inputs : with_images);
  } catch (const jinja::TemplateError& e) {
    throw ApiError(400, std::string("the chat template rejected this request: ") + e.message(), r.prompt_param);
  }
  std::vector<int32_t> ids = c.tok->encode(prompt, true);
  if (text) *text = prompt;
  if (images.empty()) return {std::move(ids), {}};
  try {
    return vision::expand_media_pads(std::move(ids), c.media_pad, images);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), r.prompt_param);
  }
}

void run_chat(ServerCtx& c, const ChatRequest& r, std::unique_ptr<ChatProtocol> proto, Response& res) {
  std::string text;
  vision::ImagePrompt ip = chat_prompt(c, r, &text);
  check_context(c, ip.ids.size(), r.prompt_param.c_str());

  auto job = std::make_shared<ChatJob>();
  job->ctx = &c;
  job->proto = std::move(proto);
  job->n_prompt = static_cast<int32_t>(ip.ids.size());
  chat::K3ParserOptions po;
  po.thinking = chat::k3_thinking_enabled(r.template_inputs);
  po.extract_reasoning = r.extract_reasoning;
  po.tools = r.tools;
  po.tool_choice = r.tool_choice;
  job->parser = std::make_unique<chat::K3StreamParser>(po);
  GenRequest gr = make_gen_request(c, std::move(ip.ids), r.gen, &r.template_inputs);
  gr.images = std::move(ip.images);
  if (c.cache) gr.snapshot_at = message_snapshot_points(*c.tmpl, r.template_inputs, text, gr.prompt, *c.tok);
  job->gen = std::make_unique<Generation>(*c.engine, *c.tok, std::move(gr), r.gen.stop, true);
  check_admit(job->gen->submit());

  if (r.gen.stream) {
    start_sse(res, job);
    return;
  }

  SseEvents ignored;  // a protocol builds its body in delta(); the events are for streaming
  for (;;) {
    Generation::Piece p = job->gen->poll(100ms);
    job->feed(job->parser->feed(p.text), ignored);
    ignored.clear();
    if (p.done) break;
    if (HttpServer::peer_gone()) {
      job->gen->cancel();
      res.status = 499;  // client closed the request; nobody reads this
      return;
    }
  }
  if (job->gen->failed()) throw ApiError(c.stopping ? 503 : 500, job->gen->error());
  job->feed(job->parser->finish(), ignored);
  reply_json(res, job->proto->body(job->outcome()));
}

void handle_chat(ServerCtx& c, const Request& req, Response& res) {
  ChatRequest r = parse_chat_request(parse_body(req.body, c.opt.max_json_depth), c.limits);
  run_chat(c, r, openai_chat_protocol(r.model.empty() ? c.model_id : r.model, r.gen.include_usage), res);
}

}  // namespace k3::server
