// Plain-text endpoints: POST /v1/completions (OpenAI legacy completions), POST /completion
// (llama.cpp style, prompt as text or raw token ids), POST /tokenize, POST /detokenize.
#include <chrono>

#include "server/context.h"
#include "server/generation.h"

namespace k3::server {

using namespace std::chrono_literals;

namespace {

struct TextJob {
  bool openai = true;  // /v1/completions shape, else /completion
  std::string id = random_id("cmpl-");
  int64_t created = unix_now();
  std::string model;
  bool include_usage = false, return_tokens = false;
  std::unique_ptr<Generation> gen;
  ServerCtx* ctx = nullptr;

  json usage() const {
    return json{{"prompt_tokens", gen->n_prompt()},
                {"completion_tokens", gen->n_gen()},
                {"total_tokens", gen->n_prompt() + gen->n_gen()},
                {"prompt_tokens_details", prompt_tokens_details(*gen)}};
  }
  json timings() const {
    const TaskTimes t = gen->times();
    // llama.cpp's: cache_n prompt tokens reused, prompt_n processed
    return json{{"cache_n", gen->n_cached()},
                {"prompt_n", gen->n_prompt() - gen->n_cached()},
                {"prompt_ms", t.prompt_ms},
                {"predicted_n", gen->n_gen()},
                {"predicted_ms", t.gen_ms},
                {"predicted_per_second", t.gen_ms > 0 ? 1000.0 * (gen->n_gen() - 1) / t.gen_ms : 0.0},
                {"draft_n", t.n_draft},
                {"draft_n_accepted", t.n_draft_accepted}};
  }
  // llama.cpp's stop_type: eos, limit, word.
  const char* stop_type() const {
    if (gen->hit_stop_string()) return "word";
    return std::string(gen->finish_reason()) == "length" ? "limit" : "eos";
  }

  // One event (streaming) or the whole response body (done, non-streaming).
  json piece(const std::string& text, const std::vector<int32_t>& ids, bool done) const {
    if (openai) {
      json ch = {{"index", 0},
                 {"text", text},
                 {"logprobs", nullptr},
                 {"finish_reason", done ? json(gen->finish_reason()) : json(nullptr)}};
      json j = {{"id", id},       {"object", "text_completion"}, {"created", created},
                {"model", model}, {"system_fingerprint", "k3"},  {"choices", json::array({std::move(ch)})}};
      if (include_usage) j["usage"] = nullptr;
      return j;
    }
    json j = {{"content", text}, {"stop", done}};
    if (return_tokens) j["tokens"] = ids;
    if (done) {
      j["model"] = model;
      j["tokens_predicted"] = gen->n_gen();
      j["tokens_evaluated"] = gen->n_prompt();
      j["tokens_cached"] = gen->n_cached();
      j["stop_type"] = stop_type();
      j["stopping_word"] = gen->hit_stop_string() ? gen->stop_string() : "";
      j["timings"] = timings();
    }
    return j;
  }
};

bool stream_step(TextJob& job, DataSink& sink) {
  Generation::Piece p = job.gen->poll(50ms);
  if (!p.done) {
    if (!p.text.empty() || (!job.openai && job.return_tokens && !p.ids.empty()))
      if (!sse(sink, job.piece(p.text, p.ids, false))) return false;
    return !HttpServer::peer_gone();
  }
  if (job.gen->failed()) {
    sse(sink, error_body(job.ctx->stopping ? 503 : 500, job.gen->error()));
  } else {
    json last = job.piece(p.text, p.ids, true);
    if (job.openai && job.include_usage) last.erase("usage");
    if (!sse(sink, last)) return false;
    if (job.openai && job.include_usage) {
      json u = {{"id", job.id},       {"object", "text_completion"}, {"created", job.created},
                {"model", job.model}, {"system_fingerprint", "k3"},  {"choices", json::array()},
                {"usage", job.usage()}};
      if (!sse(sink, u)) return false;
    }
  }
  if (job.openai && !sse_raw(sink, "[DONE]")) return false;
  sink.done();
  return true;
}

void run_text(ServerCtx& c, CompletionRequest r, bool openai, Response& res) {
  std::vector<int32_t> ids = r.prompt_is_ids ? std::move(r.prompt_ids) : c.tok->encode(r.prompt, true);
  if (ids.empty()) bad_request("prompt", "'prompt' is empty after tokenization");
  check_context(c, ids.size(), "prompt");
  auto job = std::make_shared<TextJob>();
  job->openai = openai;
  job->ctx = &c;
  job->model = r.model.empty() ? c.model_id : r.model;
  job->include_usage = r.gen.include_usage;
  job->return_tokens = r.return_tokens;
  job->gen = std::make_unique<Generation>(*c.engine, *c.tok, make_gen_request(c, std::move(ids), r.gen), r.gen.stop,
                                          false);
  check_admit(job->gen->submit());

  if (r.gen.stream) {
    start_sse(res, job);
    return;
  }
  std::string text;
  std::vector<int32_t> out_ids;
  for (;;) {
    Generation::Piece p = job->gen->poll(100ms);
    text += p.text;
    out_ids.insert(out_ids.end(), p.ids.begin(), p.ids.end());
    if (p.done) break;
    if (HttpServer::peer_gone()) {
      job->gen->cancel();
      res.status = 499;
      return;
    }
  }
  if (job->gen->failed()) throw ApiError(c.stopping ? 503 : 500, job->gen->error());
  json out = job->piece(text, out_ids, true);
  if (openai) {
    out["usage"] = job->usage();
    out["timings"] = job->timings();
  }
  reply_json(res, out);
}

}  // namespace

void handle_completions(ServerCtx& c, const Request& req, Response& res) {
  run_text(c, parse_completions_request(parse_body(req.body, c.opt.max_json_depth), c.limits), true, res);
}

void handle_completion(ServerCtx& c, const Request& req, Response& res) {
  run_text(c, parse_llama_completion(parse_body(req.body, c.opt.max_json_depth), c.limits), false, res);
}

// The ids are written into the response 64 KiB at a time as they are formatted, not gathered in a
// JSON DOM (~16 bytes per id) and a serialized copy: a 7.7 MiB text on a small vocabulary is
// ~2 M ids, and the working memory stays ~4 bytes per id on top of the text.
void handle_tokenize(ServerCtx& c, const Request& req, Response& res) {
  bool add_special, parse_special, with_pieces;
  std::string text;
  {
    json body = parse_body(req.body, c.opt.max_json_depth);
    Fields f(body, "");
    f.only({"content", "add_special", "parse_special", "with_pieces"});
    f.str("content", "", true);
    add_special = f.boolean("add_special", false);
    parse_special = f.boolean("parse_special", true);
    with_pieces = f.boolean("with_pieces", false);
    text = std::move(body["content"].get_ref<std::string&>());
  }
  auto ids = std::make_shared<std::vector<int32_t>>();
  if (add_special && c.tok->add_bos() && c.tok->bos() >= 0) ids->push_back(c.tok->bos());
  {
    std::vector<int32_t> enc = c.tok->encode(text, parse_special);
    std::string().swap(text);
    if (ids->empty()) *ids = std::move(enc);
    else ids->insert(ids->end(), enc.begin(), enc.end());
  }
  const tok::Tokenizer* tk = c.tok.get();
  res.set_chunked_content_provider(
      "application/json", [ids, tk, with_pieces, next = size_t(0), open = false](DataSink& sink) mutable {
        std::string out = open ? "" : "{\"tokens\":[";
        open = true;
        for (; next < ids->size() && out.size() < (64u << 10); ++next) {
          if (next) out += ',';
          const int32_t id = (*ids)[next];
          if (!with_pieces) {
            out += std::to_string(id);
            continue;
          }
          // A piece that is not valid UTF-8 on its own is given as its bytes (as llama.cpp does).
          const std::string& p = tk->piece(id);
          json piece = p;
          if (!valid_utf8(p)) {
            piece = json::array();
            for (unsigned char ch : p) piece.push_back(ch);
          }
          out += dump(json{{"id", id}, {"piece", std::move(piece)}});
        }
        const bool last = next == ids->size();
        if (last) out += "]}";
        if (!sink.write(out)) return false;
        if (last) sink.done();
        return true;
      });
}

void handle_detokenize(ServerCtx& c, const Request& req, Response& res) {
  const json body = parse_body(req.body, c.opt.max_json_depth);
  Fields f(body, "");
  f.only({"tokens"});
  const std::vector<int32_t> ids = parse_ids(f.array("tokens"), "tokens", c.tok->n_vocab(), 1u << 20);
  reply_json(res, json{{"content", c.tok->decode(ids, true)}});
}

}  // namespace k3::server
