// k3 run: generate text from a prompt (streamed), or one JSON object with --json.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <unistd.h>

#include "cache/identity.h"
#include "cache/prefix_cache.h"
#include "cli/commands.h"
#include "cli/model_cli.h"
#include "common/error.h"
#include "multinode/multinode.h"
#include "model/model.h"
#include "model/sampler.h"
#include "tokenizer/tokenizer.h"
#include "vision/prompt.h"
#include "vision/vision.h"

using namespace k3;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

static int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate text with a Kimi-K3 model. Without -m, the built-in synthetic model (random weights).",
               "k3 run"};
  std::string model_path, prompt, ids_str, f16_rule;
  int n_predict = 64, threads = 0, pp = 1;
  int64_t n_ctx = 0, n_batch = 512;
  model::SamplerParams sp;
  sp.temp = 0.8f, sp.top_k = 40, sp.top_p = 0.95f, sp.min_p = 0.05f;
  int64_t seed = -1;
  bool json = false, ignore_eos = false;
  std::string prompt_cache;
  app.add_option("-m,--model", model_path, "GGUF model (default: built-in synthetic model)");
  auto* p_opt = app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("--ids", ids_str, "prompt as comma-separated token ids")->excludes(p_opt);
  app.add_option("-n,--n-predict", n_predict, "tokens to generate")->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: all cores)");
  app.add_option("-c,--ctx", n_ctx, "context size (default: min(training context, 4096))");
  app.add_option("-b,--batch", n_batch, "prompt tokens per forward pass")->capture_default_str();
  app.add_option("--temp", sp.temp, "temperature (0: greedy)")->capture_default_str();
  app.add_option("--top-k", sp.top_k, "top-k (0: off)")->capture_default_str();
  app.add_option("--top-p", sp.top_p, "top-p (1: off)")->capture_default_str();
  app.add_option("--min-p", sp.min_p, "min-p (0: off)")->capture_default_str();
  app.add_option("--seed", seed, "sampling seed (default: random)");
  app.add_flag("--json", json, "print one JSON object {prompt_ids, ids, text, timings} instead of streaming");
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at end-of-generation tokens");
  app.add_option("--f16-rule", f16_rule, "amx | round (default: from the CPU)");
  std::string mmproj;
  std::vector<std::string> images;
  vision::VisionOptions vo;
  app.add_option("--mmproj", mmproj, "vision mmproj GGUF (for --image)");
  app.add_option("--image", images,
                 "PNG or JPEG file (repeatable): each replaces one <|kimi_image_placeholder|> of the prompt in order, "
                 "or, without placeholders, all go before the prompt");
  app.add_option("--image-max-pixels", vo.max_pixels, "refuse images with more pixels")->capture_default_str();
  app.add_option("--image-max-tokens", vo.max_tokens, "largest number of rows per image (0: the mmproj's patch limit)")
      ->capture_default_str();
  app.add_option("--prompt-cache", prompt_cache,
                 "file for the state after the prompt: saved, and reused when a later prompt starts the same way");
  cli::StreamFlags stream;
  cli::add_stream_flags(app, stream);
  cli::SpecFlags specf;
  cli::add_spec_flags(app, specf);
  cli::add_pp_flag(app, pp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (n_predict < 0) fail("-n must be >= 0");
  sp.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();

  const auto t_load = Clock::now();
  if (model_path.empty()) model_path = cli::builtin_model_path();
  auto m = multinode::load(model_path, pp);
  const int64_t ctx = n_ctx > 0 ? n_ctx : std::min<int64_t>(m->hparams().n_ctx_train, 4096);
  auto store = cli::make_expert_store(*m, stream, json, model::state_bytes(m->hparams(), ctx));
  ThreadPool pool(cli::pick_threads(threads));
  model::RunOptions opt{&pool, cli::parse_f16_rule(f16_rule), nullptr};
  opt.experts = store.get();
  if (!multinode::leader()) return multinode::follow(*m, opt);
  std::unique_ptr<tok::Tokenizer> tok;
  try {
    tok = tok::Tokenizer::from_metadata(m->meta());
  } catch (const Error& e) {
    if (ids_str.empty()) fail("%s: no usable tokenizer (%s); pass --ids", model_path.c_str(), e.what());
  }

  if (!images.empty() && mmproj.empty()) fail("--image needs --mmproj (the vision tower)");
  if (!images.empty() && !ids_str.empty()) fail("--image works with -p (a text prompt), not --ids");
  std::vector<int32_t> prompt_ids;
  vision::ImagePrompt ip;
  double image_ms = 0;
  if (!ids_str.empty()) {
    prompt_ids = cli::parse_ids(ids_str);
  } else {
    std::string text = prompt.empty() ? std::string(images.empty() ? "The lighthouse keeper" : "Describe the image.") : prompt;
    std::vector<std::shared_ptr<const vision::ImageRows>> rows;
    if (!images.empty()) {
      vo.threads = cli::pick_threads(threads);
      vision::Vision v(mmproj, vo);
      v.check_text_width(m->hparams().n_embd, model_path);
      const auto t_img = Clock::now();
      for (const std::string& f : images) rows.push_back(v.encode(vision::read_image_file(f), "", f));
      image_ms = ms_since(t_img);
      text = cli::place_images(text, rows);
    }
    prompt_ids = tok->encode(text, true);
    if (!rows.empty()) {
      ip = vision::expand_media_pads(prompt_ids, tok->token_id("<|media_pad|>"), rows);
      prompt_ids = ip.ids;
    }
  }
  if (prompt_ids.empty()) fail("the prompt is empty");
  if (static_cast<int64_t>(prompt_ids.size()) > ctx)
    fail("the prompt has %zu tokens, more than the context size %lld (use -c to raise it)", prompt_ids.size(),
         static_cast<long long>(ctx));
  const double load_ms = ms_since(t_load);

  const uint32_t eos_key = m->meta().get_u32_or("tokenizer.ggml.eos_token_id", UINT32_MAX);
  auto is_eog = [&](int32_t id) { return tok ? tok->is_eog(id) : static_cast<uint32_t>(id) == eos_key; };

  model::State st = m->new_state(ctx);
  model::Sampler sampler(sp);
  cli::SpecSetup spec_setup = cli::load_spec(*m, specf);
  spec::Drafting drafting(*m, spec_setup.draft.get(), spec_setup.options, pool);
  std::unique_ptr<spec::Speculator> spec_seq;
  if (drafting.enabled()) {
    if (!images.empty()) fail("speculative decoding does not take --image (yet)");
    spec_seq = std::make_unique<spec::Speculator>(drafting, st);
    opt.trace = drafting.taps();
  }
  spec::Taps* taps = drafting.taps();
  // after a prompt pass over prompt_ids[first, first + n): its tokens (and taps) to the drafts,
  // after those restored from the prompt cache before it
  int64_t pushed = 0;
  auto prompt_pass = [&](int64_t first, int64_t n) {
    if (!spec_seq) return;
    if (first > pushed) spec_seq->prompt({prompt_ids.data() + pushed, static_cast<size_t>(first - pushed)}, nullptr);
    spec_seq->prompt({prompt_ids.data() + first, static_cast<size_t>(n)}, taps ? taps->row(0) : nullptr);
    pushed = first + n;
  };
  std::unique_ptr<tok::StreamDecoder> dec;
  if (tok) dec = std::make_unique<tok::StreamDecoder>(*tok, false);

  std::vector<float> logits;
  const auto t_prompt = Clock::now();
  int64_t cached = 0;
  if (prompt_cache.empty()) {
    std::vector<model::InputRows> rows;
    vision::input_rows(ip.images, 0, rows);
    m->prefill(st, prompt_ids, n_batch, opt, model::Logits::Last, &logits, rows, prompt_pass);
  } else {
    if (!images.empty()) fail("--prompt-cache does not take --image (yet): the file would not hold the image");
    // Every state the file holds, and every one this prompt adds, fit: the cache lives for one run.
    cache::Options co;
    co.ram_bytes = INT64_MAX;
    co.snapshot_every = cache::Layout::of(m->hparams()).default_snapshot_every();
    co.peers = multinode::cache_peers();
    co.side_width = spec_setup.draft ? spec_setup.draft->side_width() : 0;
    std::string compute = cache::compute_of(opt.f16_rule);
    if (spec_setup.draft) compute += ", draft " + spec_setup.draft->identity();
    cache::PrefixCache pc(*m, "", compute, co);
    if (::access(prompt_cache.c_str(), F_OK) == 0) {
      try {
        pc.load(prompt_cache);
      } catch (const cache::FileError& e) {
        if (e.kind != cache::FileError::Partial) fail("--prompt-cache: %s (remove the file or name another)", e.what());
        std::fprintf(stderr, "k3 run: --prompt-cache: %s; starting without it\n", e.what());
      }
    }
    auto seq = pc.begin(cache::Key{prompt_ids, {}});
    cached = cache::prefill(*m, *seq, st, prompt_ids, n_batch, opt, logits, prompt_pass);
    if (spec_seq && pushed == 0) spec_seq->prompt(prompt_ids, nullptr);  // all of it restored
    seq.reset();
    const auto saved = pc.save(prompt_cache, cache::Key{prompt_ids, {}}, nullptr, 64);
    if (!json)
      std::fprintf(stderr, "k3 run: prompt cache %s: %lld of %zu prompt tokens reused, %lld saved (%s)\n",
                   prompt_cache.c_str(), static_cast<long long>(cached), prompt_ids.size(),
                   static_cast<long long>(saved.n_tokens), cache::format_size(saved.bytes).c_str());
  }
  const double prompt_ms = ms_since(t_prompt);

  std::vector<int32_t> out_ids;
  std::string text, stop = "length";
  const std::vector<multinode::RankStats> ranks0 = json ? multinode::stats(*m) : std::vector<multinode::RankStats>{};
  const auto t_gen = Clock::now();
  // false: the generation ends with this token
  auto emit = [&](int32_t id) {
    out_ids.push_back(id);
    if (is_eog(id) && !ignore_eos) {
      stop = "eog";
      return false;
    }
    if (dec) {
      const std::string piece = dec->push(id);
      text += piece;
      if (!json) std::fwrite(piece.data(), 1, piece.size(), stdout), std::fflush(stdout);
    }
    return static_cast<int>(out_ids.size()) < n_predict;
  };
  int32_t id = -1;
  bool more = n_predict > 0;
  if (more) {
    id = sampler.sample(logits.data(), m->n_vocab());
    if (spec_seq) spec_seq->first(id);
    more = emit(id);
  }
  while (more) {
    if (st.n_past() >= st.n_ctx()) {
      stop = "context";
      break;
    }
    if (!spec_seq) {
      m->forward(st, &id, 1, opt, model::Logits::Last, &logits);
      more = emit(id = sampler.sample(logits.data(), m->n_vocab()));
      continue;
    }
    // a step: [anchor, drafts] verified in one pass; the candidates emitted up to the first stop
    const std::vector<int32_t>& ids = spec_seq->plan(
        std::min<int64_t>(n_predict - static_cast<int64_t>(out_ids.size()), st.n_ctx() - st.n_past()));
    const auto t_pass = Clock::now();
    m->forward(st, ids.data(), static_cast<int64_t>(ids.size()), opt, model::Logits::All, &logits);
    drafting.timed(static_cast<int64_t>(ids.size()), ms_since(t_pass) / 1000.0);
    const std::vector<int32_t>& e = spec_seq->verify(logits.data(), sampler);
    int64_t r = 0;
    while (more && r < static_cast<int64_t>(e.size())) more = emit(e[r++]);
    spec_seq->commit(r, taps ? taps->row(0) : nullptr);
  }
  if (dec) {
    const std::string rest = dec->flush();
    text += rest;
    if (!json) std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  // The text ends its line and reaches stdout before anything more goes to stderr, so that the two
  // merged into one log (k3 run ... > log 2>&1) keep the messages on lines of their own.
  if (!json) std::fputc('\n', stdout), std::fflush(stdout);
  if (stop == "context")
    std::fprintf(stderr, "k3 run: context size %lld reached, stopping (use -c to raise it)\n", static_cast<long long>(ctx));
  const double gen_ms = ms_since(t_gen);
  const std::vector<multinode::RankStats> ranks1 = json ? multinode::stats(*m) : std::vector<multinode::RankStats>{};
  const double n_gen = static_cast<double>(out_ids.size());
  const double prompt_tps = prompt_ids.size() / (prompt_ms / 1000.0);
  // generation speed counts the forward passes of generated tokens (the first one came from the prompt pass)
  const double gen_tps = n_gen > 1 ? (n_gen - 1) / (gen_ms / 1000.0) : 0.0;
  if (json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt_ids;
    j["ids"] = out_ids;
    j["text"] = text;
    j["stop"] = stop;
    j["seed"] = sp.seed;
    if (!images.empty()) j["image_rows"] = ip.image_rows();
    j["timings"] = {{"load_ms", load_ms},          {"image_ms", image_ms}, {"prompt_tokens", prompt_ids.size()},
                    {"cached_tokens", cached},
                    {"prompt_ms", prompt_ms},      {"prompt_tokens_per_s", prompt_tps},
                    {"gen_tokens", out_ids.size()}, {"gen_ms", gen_ms},
                    {"gen_tokens_per_s", gen_tps}, {"threads", pool.size()}};
    j["ranks"] = cli::ranks_json(ranks1, ranks0);  // counters over the generation
    if (spec_seq) {
      j["draft_tokens"] = spec_seq->stats().drafted;
      j["draft_accepted"] = spec_seq->stats().accepted;
      j["spec"] = cli::spec_json(spec_seq->stats(), drafting.options().type);
    }
    if (store) {
      const model::ExpertStats es = store->stats();
      j["experts"] = {{"hits", es.hits},           {"misses", es.misses},       {"hit_rate", es.hit_rate()},
                      {"bytes_read", es.bytes_read}, {"read_gbps", es.read_gbps()}, {"stall_s", es.stall_s},
                      {"prediction_accuracy", es.prediction_accuracy()}};
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fprintf(stderr, "k3 run: prompt %zu tokens, %.1f tok/s; generated %zu tokens, %.1f tok/s (%s)\n",
                 prompt_ids.size(), prompt_tps, out_ids.size(), gen_tps, stop.c_str());
    if (spec_seq) {
      const spec::SpecStats& ss = spec_seq->stats();
      std::fprintf(stderr, "k3 run: %s drafts: %lld of %lld accepted, %.2f tokens per step over %lld steps\n",
                   spec::spec_type_name(drafting.options().type), static_cast<long long>(ss.accepted),
                   static_cast<long long>(ss.drafted), ss.steps ? double(ss.emitted) / double(ss.steps) : 0.0,
                   static_cast<long long>(ss.steps));
    }
    if (store) {
      const model::ExpertStats es = store->stats();
      std::fprintf(stderr,
                   "k3 run: experts: hit rate %.1f%% (%llu hits, %llu misses), %.1f MB read at %.2f GB/s, stalled "
                   "%.2f s, next-layer prediction %.1f%% right\n",
                   100 * es.hit_rate(), static_cast<unsigned long long>(es.hits),
                   static_cast<unsigned long long>(es.misses), es.bytes_read / 1e6, es.read_gbps(), es.stall_s,
                   100 * es.prediction_accuracy());
    }
  }
  return 0;
}

K3_COMMAND("run", "generate text (built-in synthetic model without -m)", cmd_run);
