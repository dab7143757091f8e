#include "server/server.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cache/identity.h"
#include "chat/chat_template.h"
#include "common/error.h"
#include "server/context.h"

namespace k3::server {

using Clock = std::chrono::steady_clock;

static double steady_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// ---- helpers shared by the handlers ----

void reply_json(Response& res, const json& j, int status) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

void check_context(const ServerCtx& c, size_t n_prompt, const char* param) {
  if (n_prompt == 0) throw ApiError(400, "the prompt is empty (no tokens)", param);
  const int64_t n_ctx = c.engine->options().n_ctx;
  if (static_cast<int64_t>(n_prompt) >= n_ctx)
    throw ApiError(400,
                   "the prompt is " + std::to_string(n_prompt) + " tokens, which does not fit the context of " +
                       std::to_string(n_ctx) +
                       " tokens (at least one token must be left to generate); shorten it or start the server "
                       "with a larger -c",
                   param, "invalid_request_error");
}

GenRequest make_gen_request(const ServerCtx& c, std::vector<int32_t> prompt, const GenFields& g, const json* chat_inputs) {
  GenRequest r;
  r.prompt = std::move(prompt);
  r.sampling = g.sampling;
  r.max_tokens = g.max_tokens;
  r.ignore_eos = g.ignore_eos;
  if (g.canned.set) {
    r.forced = true;
    r.forced_ids = g.canned.is_text ? c.tok->encode(g.canned.text, true) : g.canned.ids;
  } else if (c.script) {
    if (std::optional<json> entry = c.script->next()) {
      r.forced = true;
      r.forced_ids = c.tok->encode(script_output(*entry, *c.tmpl, chat_inputs), true);
    }
  }
  return r;
}

json prompt_tokens_details(const Generation& g) { return json{{"cached_tokens", g.n_cached()}}; }

void check_admit(Engine::Admit a) {
  if (a == Engine::Admit::Overloaded)
    throw ApiError(503, "the server is busy: every slot is generating and the queue is full; retry later", "",
                   "overloaded_error");
  if (a == Engine::Admit::ShuttingDown)
    throw ApiError(503, "the server is shutting down", "", "overloaded_error");
}

bool sse_raw(DataSink& sink, const std::string& data) {
  const std::string ev = "data: " + data + "\n\n";
  return sink.write(ev.data(), ev.size());
}

bool sse(DataSink& sink, const json& j) { return sse_raw(sink, dump(j)); }

// ---- metrics ----

void Metrics::count(const std::string& route, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{route, status}];
}

static long long rss_bytes() {
  std::ifstream f("/proc/self/statm");
  long long pages_total = 0, pages_rss = 0;
  f >> pages_total >> pages_rss;
  return pages_rss * sysconf(_SC_PAGESIZE);
}

std::string Metrics::render(const EngineStats& e, const HttpServer& http, double uptime_s,
                            const model::ExpertStats* x, const cache::CacheStats* pc) const {
  std::ostringstream o;
  auto num = [](double v) {
    if (v == static_cast<double>(static_cast<long long>(v))) return std::to_string(static_cast<long long>(v));
    return strprintf("%.6f", v);
  };
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << num(v) << '\n';
  };
  o << "# HELP k3_requests_total HTTP requests answered, by route and status code.\n"
       "# TYPE k3_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [k, n] : requests_)
      o << "k3_requests_total{route=\"" << k.first << "\",code=\"" << k.second << "\"} " << n << '\n';
  }
  metric("k3_generations_total", "counter", "Generations admitted.", static_cast<double>(e.requests));
  metric("k3_generations_rejected_total", "counter", "Generations refused with 503 (slots and queue full).",
         static_cast<double>(e.rejected));
  metric("k3_generations_cancelled_total", "counter", "Generations cancelled (client gone, stop string, shutdown).",
         static_cast<double>(e.cancelled));
  metric("k3_generation_errors_total", "counter", "Generations that failed in the model.", static_cast<double>(e.errors));
  metric("k3_prompt_tokens_total", "counter", "Prompt tokens processed (not those restored from the prompt cache).",
         static_cast<double>(e.prompt_tokens));
  metric("k3_prompt_tokens_cached_total", "counter", "Prompt tokens restored from the prompt cache.",
         static_cast<double>(e.prompt_cached_tokens));
  metric("k3_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(e.generated_tokens));
  metric("k3_prompt_seconds_total", "counter", "Time spent on prompts (per sequence, summed).", e.prompt_seconds);
  metric("k3_generation_seconds_total", "counter", "Time from first to last token (per sequence, summed).",
         e.gen_seconds);
  o << "# HELP k3_time_to_first_token_seconds Time from admission to the first token.\n"
       "# TYPE k3_time_to_first_token_seconds summary\n"
    << "k3_time_to_first_token_seconds_sum " << num(e.ttft_seconds) << "\nk3_time_to_first_token_seconds_count "
    << e.first_tokens << '\n';
  metric("k3_scheduler_steps_total", "counter", "Scheduler iterations.", static_cast<double>(e.steps));
  metric("k3_batch_sequences_total", "counter", "Sequences in the model batches, summed over forward passes.",
         static_cast<double>(e.batch_sequences));
  metric("k3_batch_tokens_total", "counter", "Tokens in the model batches, summed over forward passes.",
         static_cast<double>(e.batch_tokens));
  metric("k3_forward_passes_total", "counter", "Model forward passes (one per scheduler step with work).",
         static_cast<double>(e.forwards));
  metric("k3_spec_steps_total", "counter", "Decode steps of speculative generations (finished ones).",
         static_cast<double>(e.spec.steps));
  metric("k3_spec_verify_passes_total", "counter", "Steps that verified drafts.", static_cast<double>(e.spec.passes));
  metric("k3_spec_draft_tokens_total", "counter", "Drafted tokens verified.", static_cast<double>(e.spec.drafted));
  metric("k3_spec_draft_accepted_total", "counter", "Drafted tokens accepted.", static_cast<double>(e.spec.accepted));
  metric("k3_spec_emitted_tokens_total", "counter", "Tokens the speculative steps emitted.",
         static_cast<double>(e.spec.emitted));
  metric("k3_slots", "gauge", "Sequence slots (--parallel).", e.slots);
  metric("k3_slots_busy", "gauge", "Slots generating now.", e.busy);
  metric("k3_queue_depth", "gauge", "Requests waiting for a slot.", e.queued);
  metric("k3_http_connections", "gauge", "Open HTTP connections.", http.open_connections());
  metric("k3_http_connections_refused_total", "counter",
         "Connections and requests refused with 503 by the transport (connection limits, byte budget, handler queue).",
         static_cast<double>(http.refused_connections()));
  metric("k3_http_inflight_bytes", "gauge", "Request body bytes being read or handled.",
         static_cast<double>(http.inflight_bytes()));
  metric("k3_process_resident_memory_bytes", "gauge", "Resident set size.", static_cast<double>(rss_bytes()));
  const struct mallinfo2 mi = mallinfo2();
  metric("k3_heap_in_use_bytes", "gauge", "Heap bytes allocated and not freed (malloc arenas + mmapped blocks).",
         static_cast<double>(mi.uordblks + mi.hblkhd));
  metric("k3_uptime_seconds", "gauge", "Seconds since the server started.", uptime_s);
  if (pc) {
    metric("k3_prompt_cache_lookups_total", "counter", "Prompts looked up in the prompt cache.", double(pc->lookups));
    metric("k3_prompt_cache_hits_total", "counter", "Lookups that restored a cached state.", double(pc->hits));
    metric("k3_prompt_cache_misses_total", "counter", "Lookups that found nothing to restore.",
           double(pc->lookups - pc->hits));
    metric("k3_prompt_cache_ram_bytes", "gauge", "Prompt cache bytes in RAM (MLA rows and snapshots).",
           double(pc->ram_bytes));
    metric("k3_prompt_cache_ram_budget_bytes", "gauge", "Prompt cache RAM budget (--cache-ram).", double(pc->ram_budget));
    metric("k3_prompt_cache_snapshots", "gauge", "KDA snapshots in RAM.", double(pc->snapshots));
    metric("k3_prompt_cache_snapshots_taken_total", "counter", "KDA snapshots taken.", double(pc->snapshots_taken));
    metric("k3_prompt_cache_evictions_total", "counter", "Snapshots evicted from RAM.", double(pc->evictions));
    metric("k3_prompt_cache_snapshot_seconds_total", "counter", "Time copying states into the cache (snapshots, rows).",
           pc->snapshot_seconds);
    metric("k3_prompt_cache_restore_seconds_total", "counter", "Time copying cached states into slots.",
           pc->restore_seconds);
    if (pc->has_disk) {
      const cache::DiskStats& d = pc->disk;
      metric("k3_prompt_cache_disk_bytes", "gauge", "Prompt cache bytes on disk (--cache-dir).", double(d.bytes));
      metric("k3_prompt_cache_disk_budget_bytes", "gauge", "Prompt cache disk budget (--cache-disk).", double(d.budget));
      metric("k3_prompt_cache_disk_files", "gauge", "Usable prompt cache files on disk.", double(d.files));
      metric("k3_prompt_cache_disk_writes_total", "counter", "Entries written to disk.", double(d.writes));
      metric("k3_prompt_cache_disk_write_seconds_total", "counter", "Time spent writing entries.", d.write_seconds);
      metric("k3_prompt_cache_disk_loads_total", "counter", "Entries restored from disk.", double(d.loads));
      metric("k3_prompt_cache_disk_load_seconds_total", "counter", "Time spent loading entries.", d.load_seconds);
      metric("k3_prompt_cache_disk_skipped_total", "counter", "Unusable files skipped (corrupt, truncated, foreign).",
             double(d.skipped));
      metric("k3_prompt_cache_disk_dropped_total", "counter", "Writes not done (disk full, queue full, too large).",
             double(d.dropped));
      metric("k3_prompt_cache_disk_removed_total", "counter", "Files deleted to stay within --cache-disk.",
             double(d.removed));
    }
  }
  if (x) {  // divide the counters by k3_generated_tokens_total + k3_prompt_tokens_total for per-token figures
    metric("k3_expert_hits_total", "counter", "Requested routed experts found in the expert cache.", double(x->hits));
    metric("k3_expert_misses_total", "counter", "Requested routed experts read from disk.", double(x->misses));
    metric("k3_expert_read_bytes_total", "counter", "Bytes read into the expert cache.", double(x->bytes_read));
    metric("k3_expert_read_seconds_total", "counter", "Time with at least one expert read in flight.", x->read_busy_s);
    metric("k3_expert_stall_seconds_total", "counter", "Time the model waited for expert reads.", x->stall_s);
    metric("k3_expert_prefetched_total", "counter", "Experts prefetched for the next layer.", double(x->prefetched));
    metric("k3_expert_prefetch_used_total", "counter", "Prefetched experts that were then requested.",
           double(x->prefetch_used));
    metric("k3_expert_prefetch_skipped_total", "counter", "Layers not prefetched because the drive was busy.",
           double(x->prefetch_skipped));
    metric("k3_expert_prediction_accuracy", "gauge", "Share of requested experts the previous layer predicted.",
           x->prediction_accuracy());
    metric("k3_expert_read_gbps", "gauge", "Expert read throughput while reading, GB/s.", x->read_gbps());
    metric("k3_expert_cache_capacity", "gauge", "Experts the cache holds.", double(x->capacity));
    metric("k3_expert_cache_resident", "gauge", "Experts resident now.", double(x->resident));
    metric("k3_expert_cache_budget_bytes", "gauge", "Expert cache budget.", double(x->budget_bytes));
    metric("k3_expert_cache_allocated_bytes", "gauge", "Expert cache memory allocated.", double(x->allocated_bytes));
  }
  return o.str();
}

// ---- the server ----

// The prompt cache of --cache-ram/--cache-dir (null when off).
static std::unique_ptr<cache::PrefixCache> make_cache(const ServerCtx& c, const EngineOptions& eo,
                                                      const std::string& template_text, model::F16Rule rule) {
  const ServerOptions& o = c.opt;
  const cache::Layout lay = cache::Layout::of(c.model->hparams(), c.draft ? c.draft->side_width() : 0);  // of the whole state
  const int64_t ram =
      o.cache_ram == "auto"
          ? cache::auto_ram_budget(c.experts ? 0 : cache::mapped_bytes(*c.model),
                                   static_cast<uint64_t>(eo.parallel) * model::state_bytes(c.model->hparams(), eo.n_ctx))
          : cache::parse_size(o.cache_ram, "--cache-ram");
  if (ram == 0) {
    if (!o.cache_dir.empty())
      std::fprintf(stderr, "k3 serve: warning: --cache-ram 0 turns the prompt cache off; --cache-dir is not used\n");
    return nullptr;
  }
  cache::Options co;
  co.ram_bytes = ram;
  co.peers = o.cache_peers ? o.cache_peers() : nullptr;
  co.snapshot_every = o.cache_snapshot_every > 0 ? o.cache_snapshot_every : lay.default_snapshot_every();
  co.side_width = lay.side;  // the draft's context rows are cached with the sequence (dspark.md §12)
  if (!o.cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.cache_dir, ec);
    if (ec) fail("--cache-dir %s: cannot create the directory: %s", o.cache_dir.c_str(), ec.message().c_str());
    co.dir = o.cache_dir;
    co.disk_bytes = o.cache_disk == "auto" ? cache::auto_disk_budget(o.cache_dir)
                                           : cache::parse_size(o.cache_disk, "--cache-disk");
  }
  const bool verbose = o.verbose;
  co.log = [verbose](cache::Level lv, const std::string& msg) {
    if (lv == cache::Level::Debug && !verbose) return;
    std::fprintf(stderr, "k3 serve: %s%s\n", lv == cache::Level::Warn ? "warning: " : "", msg.c_str());
  };
  const tok::Tokenizer* tok = c.tok.get();
  co.token_text = [tok](int32_t id) {
    std::string s;
    for (char ch : tok->piece(id)) s += ch == '\n' ? std::string("\\n") : std::string(1, ch);
    return s;
  };
  std::string compute = cache::compute_of(rule);
  if (c.draft) compute += ", draft " + c.draft->identity();
  return std::make_unique<cache::PrefixCache>(*c.model, template_text, compute, co);
}

static std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("%s: cannot open the chat template file", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Server::Server(const ServerOptions& opts) : c_(std::make_unique<ServerCtx>()) {
  // Request memory comes and goes in large blocks (bodies, token ids, JSON). glibc raises its mmap
  // threshold after such a block is freed, so the next ones land in per-thread arena heaps whose
  // free top malloc_trim does not give back (8 concurrent 7.7 MiB /tokenize left ~190 MB resident
  // with 2 MB in use). A fixed threshold (glibc's initial 128 KiB) maps every large block on its own
  // and unmaps it when freed.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  ServerCtx& c = *c_;
  c.opt = opts;
  if (!opts.test_script.empty()) c.script = std::make_unique<TestScript>(opts.test_script);  // bad files fail first
  c.model = opts.load_model ? opts.load_model(opts.model_path) : model::Model::load(opts.model_path);
  c.tok = tok::Tokenizer::from_metadata(c.model->meta());
  const model::F16Rule rule = opts.f16_rule.empty() ? model::default_f16_rule()
                              : opts.f16_rule == "amx"  ? model::F16Rule::Amx
                              : opts.f16_rule == "round" ? model::F16Rule::Round
                                                         : (fail("--f16-rule: expected amx or round"), model::F16Rule::Round);

  // Chat template: --chat-template-file, else the GGUF's, else k3's built-in Kimi-K3 template.
  const std::string gguf_template = c.model->meta().get_str_opt("tokenizer.chat_template").value_or("");
  if (!opts.template_file.empty()) {
    c.own_template = std::make_unique<jinja::Template>(read_file(opts.template_file), opts.template_file);
    c.template_origin = opts.template_file;
  } else if (!gguf_template.empty()) {
    c.own_template = std::make_unique<jinja::Template>(gguf_template, "tokenizer.chat_template");
    c.template_origin = "gguf";
  }
  c.tmpl = c.own_template ? c.own_template.get() : &chat::builtin_kimi_k3_template();
  if (!c.own_template) c.template_origin = "built-in kimi-k3";
  const std::string template_text = !opts.template_file.empty() ? read_file(opts.template_file)
                                    : !gguf_template.empty()    ? gguf_template
                                                                : std::string(chat::kKimiK3Template);

  c.media_pad = c.tok->token_id("<|media_pad|>");
  if (!opts.mmproj.empty()) {
    vision::VisionOptions vo;
    if (opts.image_max_pixels) vo.max_pixels = opts.image_max_pixels;
    vo.max_tokens = opts.image_max_tokens;
    vo.threads = opts.threads > 0 ? opts.threads : ThreadPool::hardware_threads();
    c.vision = std::make_unique<vision::Vision>(opts.mmproj, vo);
    c.vision->check_text_width(c.model->hparams().n_embd, opts.model_path);
    if (c.media_pad < 0) fail("%s: the vocabulary has no <|media_pad|> token, so images cannot be placed", opts.model_path.c_str());
    c.limits.vision = true;
  }

  EngineOptions eo;
  eo.parallel = std::max(1, opts.parallel);
  eo.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : std::min<int64_t>(c.model->hparams().n_ctx_train, 4096);
  eo.n_batch = opts.n_batch;
  eo.threads = opts.threads > 0 ? opts.threads : ThreadPool::hardware_threads();
  eo.queue = opts.queue >= 0 ? opts.queue : 8 * eo.parallel;
  eo.f16_rule = rule;
  if (opts.make_experts)
    c.experts = opts.make_experts(*c.model, eo.parallel * model::state_bytes(c.model->hparams(), eo.n_ctx));
  eo.experts = c.experts.get();
  if (opts.spec.type == spec::SpecType::Dspark)
    c.draft = spec::DraftModel::load(opts.draft_path, *c.model, static_cast<uint32_t>(opts.spec.draft_max));
  eo.spec = opts.spec;
  eo.draft = c.draft.get();
  c.cache = make_cache(c, eo, template_text, rule);
  eo.cache = c.cache.get();
  c.engine = std::make_unique<Engine>(*c.model, *c.tok, eo);

  c.limits.max_tokens_cap = opts.max_tokens > 0 ? opts.max_tokens : static_cast<int32_t>(eo.n_ctx);
  c.limits.default_max_tokens = c.limits.max_tokens_cap;
  c.limits.max_stops = opts.max_stops;
  c.limits.allow_canned = opts.test_canned;
  c.limits.n_vocab = c.tok->n_vocab();
  c.limits.defaults = opts.sampling;

  if (!opts.alias.empty()) {
    c.model_id = opts.alias;
  } else {
    c.model_id = c.model->meta().get_str_opt("general.name").value_or("");
    if (c.model_id.empty()) c.model_id = opts.model_path.substr(opts.model_path.find_last_of('/') + 1);
  }
  c.created = unix_now();
  c.t_start = steady_s();

  http_ = std::make_unique<HttpServer>(opts.http);
  routes();
}

Server::~Server() {
  shutdown();
}

const std::string& Server::model_id() const { return c_->model_id; }

std::string Server::describe() const {
  const auto& eo = c_->engine->options();
  std::string pc = "off";
  if (c_->cache) {
    const cache::Options& co = c_->cache->options();
    pc = strprintf("RAM %s, snapshot every %lld tokens (%s each, %s per token)", cache::format_size(co.ram_bytes).c_str(),
                   static_cast<long long>(co.snapshot_every), cache::format_size(c_->cache->snapshot_bytes()).c_str(),
                   cache::format_size(c_->cache->token_bytes()).c_str());
    if (!co.dir.empty())
      pc += strprintf(", disk %s (%s, %lld entries)", co.dir.c_str(), cache::format_size(co.disk_bytes).c_str(),
                      c_->cache->stats().disk.files);
  }
  return strprintf("model %s (%s), context %lld per slot, %d slot(s), queue %d, %d thread(s), template: %s%s, "
                   "prompt cache: %s",
                   c_->model_id.c_str(), c_->opt.model_path.c_str(), static_cast<long long>(eo.n_ctx), eo.parallel,
                   eo.queue, eo.threads, c_->template_origin.c_str(),
                   c_->vision ? (", vision: " + c_->opt.mmproj).c_str() : "", pc.c_str());
}

int Server::bind() { return http_->bind(c_->opt.host, c_->opt.port); }

void Server::run() { http_->run(); }

void Server::shutdown() {
  ServerCtx& c = *c_;
  if (c.stopping.exchange(true)) return;
  c.engine->stop_accepting();
  const auto grace = std::chrono::milliseconds(static_cast<long long>(c.opt.shutdown_grace_s * 1000));
  c.engine->wait_idle(grace);
  c.engine->cancel_all();
  c.engine->wait_idle(std::chrono::seconds(5));
  // Cancelled or finished, the streams still write their last events and flush what is queued.
  http_->stop(std::chrono::seconds(5));
}

static std::string route_label(const std::string& path) {
  static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/completion", "/v1/models", "/health",
                                "/metrics", "/tokenize", "/detokenize", "/v1/messages", "/v1/messages/count_tokens",
                                "/v1/responses", "/v1/responses/input_tokens", "/slots"};
  for (const char* k : known)
    if (path == k) return path;
  if (path.rfind("/slots/", 0) == 0) return "/slots/{id}";
  return "other";
}

static bool ct_equal(const std::string& a, const std::string& b) {
  unsigned char d = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return d == 0 && !b.empty();
}

void Server::routes() {
  ServerCtx* c = c_.get();
  HttpServer& h = *http_;

  using Fn = void (*)(ServerCtx&, const Request&, Response&);
  auto wrap = [c](Fn fn) {
    return [c, fn](const Request& req, Response& res) {
      try {
        fn(*c, req, res);
      } catch (const ApiError& e) {
        reply_json(res, error_body_for(req.path, e.status, e.what(), e.param, e.type), e.status);
        if (e.status == 503) res.set_header("Retry-After", "1");
      } catch (const std::exception& e) {
        reply_json(res, error_body_for(req.path, 500, std::string("internal error: ") + e.what()), 500);
      }
    };
  };

  h.set_pre_routing([c](const Request& req, Response& res) {
    if (c->opt.api_key.empty() || req.path == "/health") return false;
    // Authorization: Bearer KEY (OpenAI clients) or x-api-key: KEY (Anthropic clients).
    const std::string auth = req.get_header_value("Authorization");
    const bool bearer = auth.size() > 7 && (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0);
    if (bearer && ct_equal(auth.substr(7), c->opt.api_key)) return false;
    const std::string x_key = req.get_header_value("x-api-key");
    if (!x_key.empty() && ct_equal(x_key, c->opt.api_key)) return false;
    const bool none = auth.empty() && x_key.empty();
    reply_json(res,
               error_body_for(req.path, 401,
                              none ? "missing API key: send the header 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
                                   : "invalid API key"),
               401);
    res.set_header("WWW-Authenticate", "Bearer");
    return true;
  });

  // Errors the transport answers itself (framing, limits, 404, 405), in the route's error shape.
  h.set_error_writer([](const Request& req, Response& res, int status, const std::string& msg) {
    reply_json(res, error_body_for(req.path, status, msg), status);
  });

  h.set_observer([c](const Request& req, int status) { c->metrics.count(route_label(req.path), status); });

  h.Post("/v1/chat/completions", wrap(handle_chat));
  h.Post("/chat/completions", wrap(handle_chat));
  h.Post("/v1/messages", wrap(handle_messages));
  h.Post("/v1/messages/count_tokens", wrap(handle_count_tokens));
  h.Post("/v1/responses", wrap(handle_responses));
  h.Post("/v1/responses/input_tokens", wrap(handle_input_tokens));
  h.Post("/v1/completions", wrap(handle_completions));
  h.Post("/completion", wrap(handle_completion));
  h.Post("/tokenize", wrap(handle_tokenize));
  h.Post("/detokenize", wrap(handle_detokenize));
  h.Get("/slots", wrap(handle_slots));
  for (int i = 0; i < c->engine->options().parallel; ++i) h.Post("/slots/" + std::to_string(i), wrap(handle_slot_action));

  // GET routes only read counters: they run on the I/O thread, so they answer even when every
  // handler thread is busy.
  h.Get("/health", [c](const Request&, Response& res) {
    const EngineStats s = c->engine->stats();
    json j = {{"status", c->stopping ? "shutting down" : "ok"},
              {"slots_idle", s.slots - s.busy},
              {"slots_processing", s.busy},
              {"queued", s.queued}};
    reply_json(res, j, c->stopping ? 503 : 200);
  }, true);
  h.Get("/v1/models", [c](const Request&, Response& res) {
    json m = {{"id", c->model_id},
              {"object", "model"},
              {"created", c->created},
              {"owned_by", "k3"},
              {"meta",
               {{"n_ctx", c->engine->options().n_ctx},
                {"n_vocab", c->tok->n_vocab()},
                {"n_ctx_train", c->model->hparams().n_ctx_train},
                {"parallel", c->engine->options().parallel}}}};
    reply_json(res, json{{"object", "list"}, {"data", json::array({m})}});
  }, true);
  h.Get("/metrics", [c, &h](const Request&, Response& res) {
    const model::ExpertStats xs = c->experts ? c->experts->stats() : model::ExpertStats{};
    const cache::CacheStats cs = c->cache ? c->cache->stats() : cache::CacheStats{};
    res.set_content(c->metrics.render(c->engine->stats(), h, steady_s() - c->t_start, c->experts ? &xs : nullptr,
                                      c->cache ? &cs : nullptr),
                    "text/plain; version=0.0.4");
  }, true);
}

}  // namespace k3::server
