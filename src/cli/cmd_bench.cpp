// k3 bench: prompt-processing and generation speed like llama-bench, plus the weight bytes read per
// generated token, the memory read bandwidth measured in the same run (fraction of roofline), RSS,
// and optionally a per-op time profile (--profile).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_spec.h"
#include "cli/commands.h"
#include "cli/model_cli.h"
#include "common/error.h"
#include "common/sysmem.h"
#include "multinode/multinode.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/trace.h"
#include "tensor/kernels.h"
#include "tensor/membw.h"
#include "tokenizer/tokenizer.h"

using namespace k3;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Stat {
  double mean = 0, stddev = 0;
};
Stat stat(const std::vector<double>& xs) {
  Stat s;
  if (xs.empty()) return s;
  for (double x : xs) s.mean += x;
  s.mean /= static_cast<double>(xs.size());
  if (xs.size() > 1) {
    double v = 0;
    for (double x : xs) v += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(v / static_cast<double>(xs.size() - 1));
  }
  return s;
}
double median(std::vector<double> xs) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

// Weight bytes one single-token forward pass reads (of the share this process holds). Every tensor
// is read whole except the token embedding (one row) and the routed expert stacks: a decoded token
// selects exactly k distinct experts of E in each MoE layer and every expert of a stack has the
// same size, so the count is exact for every token, not an expectation.
struct DecodeBytes {
  double trunk = 0, embd_row = 0, lm_head = 0, experts = 0;
  double total() const { return trunk + embd_row + lm_head + experts; }
};
DecodeBytes decode_bytes(const model::Model& m) {
  DecodeBytes b;
  const model::HParams& hp = m.hparams();
  const model::Weights& w = m.weights();
  model::for_each_tensor(hp, [&](const model::TensorRef& r) {
    const model::Tensor& t = model::bound(w, r);
    if (!t) return;
    const double bytes = static_cast<double>(t.bytes());
    if (r.def.global == &model::Weights::token_embd) b.embd_row += static_cast<double>(t.row_bytes());
    else if (r.def.global == &model::Weights::output) b.lm_head += bytes;
    else if (r.def.transform == model::Transform::StackExperts)
      b.experts += bytes * hp.n_expert_used[r.il] / static_cast<double>(t.ne[2]);
    else b.trunk += bytes;
  });
  return b;
}

// Resident set from /proc/self/status and smaps_rollup, bytes (0 where a field is missing).
// file_huge, anon_huge: what of it is mapped 2 MB at a time. Weights stream faster from 2 MB pages
// than from 4 KB ones (a TLB walk every 4 KB): the file's share depends on the folios its page
// cache holds (docs/performance.md, "Page size").
struct Rss {
  double current = 0, peak = 0, anon = 0, file = 0, file_huge = 0, anon_huge = 0;
};
Rss read_rss() {
  const std::vector<uint64_t> st = proc_kb_fields("/proc/self/status", {"VmRSS:", "VmHWM:", "RssAnon:", "RssFile:"});
  const std::vector<uint64_t> sm = proc_kb_fields("/proc/self/smaps_rollup", {"FilePmdMapped:", "AnonHugePages:"});
  return {double(st[0]), double(st[1]), double(st[2]), double(st[3]), double(sm[0]), double(sm[1])};
}

double state_bytes(const model::State& st) {
  double n = 0;
  for (const auto& l : st.layers) n += static_cast<double>(l.conv.capacity() + l.rec.capacity() + l.kv.capacity());
  return n * sizeof(float);
}

// Reads one byte per page of every weight this process holds so no timed pass pays page faults
// (llama.cpp maps with MAP_POPULATE for the same reason). Returns seconds.
// When streaming, the routed expert stacks are skipped (they are read into the expert cache).
double prefault(const model::Model& m, bool skip_experts) {
  const auto t0 = Clock::now();
  volatile uint8_t sink = 0;
  auto touch = [&](const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; i += 4096) sink = sink + p[i];
  };
  model::for_each_tensor(m.hparams(), [&](const model::TensorRef& r) {
    const model::Tensor& t = model::bound(m.weights(), r);
    if (!t || (skip_experts && r.def.transform == model::Transform::StackExperts)) return;
    for (int64_t e = 0; e < t.ne[2]; ++e) touch(t.data + e * t.mat_stride(), t.ne[1] * t.row_bytes());
  });
  return seconds_since(t0);
}

// Per-process counters of the timed generation passes.
void add_rank_delta(std::vector<multinode::RankStats>& sum, const std::vector<multinode::RankStats>& now,
                    const std::vector<multinode::RankStats>& before) {
  sum.resize(now.size());
  for (size_t i = 0; i < now.size(); ++i) {
    multinode::RankStats& s = sum[i];
    s.rank = now[i].rank, s.host = now[i].host, s.weight_bytes = now[i].weight_bytes;
    if (!s.rss_bytes) s.rss_bytes = now[i].rss_bytes, s.rss_file_bytes = now[i].rss_file_bytes;  // before the probe
    s.comm_seconds += now[i].comm_seconds - before[i].comm_seconds;
    s.messages += now[i].messages - before[i].messages, s.bytes += now[i].bytes - before[i].bytes;
    s.tokens += now[i].tokens - before[i].tokens;
  }
}

// Expert-cache counters of the timed generation passes.
void add_delta(model::ExpertStats& sum, const model::ExpertStats& a, const model::ExpertStats& b) {
  sum.hits += b.hits - a.hits, sum.misses += b.misses - a.misses;
  sum.bytes_read += b.bytes_read - a.bytes_read;
  sum.read_busy_s += b.read_busy_s - a.read_busy_s, sum.stall_s += b.stall_s - a.stall_s;
  sum.prefetched += b.prefetched - a.prefetched, sum.prefetch_used += b.prefetch_used - a.prefetch_used;
  sum.prefetch_skipped += b.prefetch_skipped - a.prefetch_skipped;
  sum.predicted += b.predicted - a.predicted, sum.predicted_right += b.predicted_right - a.predicted_right;
}
json expert_report(const model::ExpertStats& s, const model::ExpertStats& b, double tokens) {
  return {{"hits_per_token", s.hits / tokens},
          {"misses_per_token", s.misses / tokens},
          {"hit_rate", s.hit_rate()},
          {"bytes_read_per_token", s.bytes_read / tokens},
          {"read_gbps", s.read_gbps()},
          {"read_busy_s_per_token", s.read_busy_s / tokens},
          {"stall_s_per_token", s.stall_s / tokens},
          {"prefetched_per_token", s.prefetched / tokens},
          {"prefetch_used_per_token", s.prefetch_used / tokens},
          {"prefetch_skipped_per_token", s.prefetch_skipped / tokens},
          {"prediction_accuracy", s.prediction_accuracy()},
          {"capacity_experts", b.capacity},
          {"slot_bytes", b.slot_bytes},
          {"budget_bytes", b.budget_bytes},
          {"allocated_bytes", b.allocated_bytes},
          {"direct_io", b.direct_io},
          {"io_engine", b.io_engine}};
}

// Time between consecutive named intermediates, summed by name over the layers of one forward pass:
// the time of the ops that produced each intermediate (docs/performance.md lists what each name
// covers), and summed by layer (-1: outside the layers: embedding, final mix, LM head). Over
// several passes each op and layer reports its median per pass, so one preemption of the process
// (the host is shared) does not dominate.
class TimerTrace : public model::Trace {
 public:
  void start() {
    for (auto& [_, e] : ops_) e.per_pass.push_back(0.0);
    for (auto& [_, e] : layers_) e.per_pass.push_back(0.0);
    ++passes_;
    last_ = Clock::now();
  }
  void record(const char* name, int il, const float*, int64_t, int64_t) override {
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - last_).count();
    for (Entry* e : {&ops_[name], &layers_[il]}) {
      if (e->per_pass.size() < passes_) e->per_pass.resize(passes_, 0.0);
      e->per_pass.back() += dt;
      e->calls += 1;
    }
    last_ = now;
  }
  // ms per token by layer, in layer order.
  json report_layers(double tokens_per_pass) const {
    json j = json::array();
    for (const auto& [il, e] : layers_) j.push_back({{"layer", il}, {"ms_per_token", median(e.per_pass) * 1e3 / tokens_per_pass}});
    return j;
  }
  // ms per token = median over passes of the op's time in a pass / tokens per pass.
  json report(double tokens_per_pass) const {
    std::vector<std::pair<std::string, double>> v;
    double total = 0;
    for (const auto& [name, e] : ops_) {
      const double s = median(e.per_pass);
      v.emplace_back(name, s);
      total += s;
    }
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second > b.second; });
    json j = json::array();
    for (const auto& [name, s] : v)
      j.push_back({{"op", name}, {"ms_per_token", s * 1e3 / tokens_per_pass}, {"share", total > 0 ? s / total : 0.0},
                   {"calls_per_pass", ops_.at(name).calls / static_cast<double>(passes_)}});
    return j;
  }

 private:
  struct Entry {
    std::vector<double> per_pass;
    int64_t calls = 0;
  };
  std::map<std::string, Entry> ops_;
  std::map<int, Entry> layers_;
  size_t passes_ = 0;
  Clock::time_point last_;
};

void print_profile(const char* title, const json& prof, const json& layers) {
  std::printf("\n%s\n  %-20s %12s %7s\n", title, "op (intermediate)", "ms/token", "share");
  for (const auto& e : prof)
    std::printf("  %-20s %12.4f %6.1f%%\n", e["op"].get<std::string>().c_str(), e["ms_per_token"].get<double>(),
                100.0 * e["share"].get<double>());
  std::printf("  by layer (ms/token):");
  for (const auto& e : layers) {
    const int il = e["layer"].get<int>();
    const double ms = e["ms_per_token"].get<double>();
    if (il < 0) std::printf(" other %.3f", ms);
    else std::printf(" %d: %.3f", il, ms);
  }
  std::printf("\n");
}

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Benchmark a Kimi-K3 model like llama-bench: prompt processing (one batch of -p tokens from an "
               "empty state) and generation (-n single-token decodes from an empty state), mean ± stddev over -r "
               "repetitions after one warm-up; weight bytes read per generated token, the resulting GB/s against "
               "the memory read bandwidth probed in the same run, and RSS.",
               "k3 bench"};
  std::string model_path;
  int p = 512, n = 128, threads = 0, reps = 5, membw_mib = -1, parallel = 1, stages = 1;
  bool as_json = false, profile = false;
  app.add_option("-m,--model", model_path, "GGUF model")->required();
  app.add_option("-p,--n-prompt", p, "prompt tokens (0: skip)")->capture_default_str();
  app.add_option("-n,--n-gen", n, "generated tokens (0: skip)")->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: all cores)");
  app.add_option("-r,--repetitions", reps, "repetitions")->capture_default_str();
  app.add_option("--parallel", parallel,
                 "also decode -n tokens in each of N sequences: one forward over N single-token segments per step "
                 "(as k3 serve does) against N forwards per step, paired in each repetition")
      ->capture_default_str();
  app.add_option("--membw-mib", membw_mib,
                 "bandwidth probe buffer in MiB (0: no probe; default 1024), lowered to half of the memory left to the "
                 "process once the model is resident (cgroup limit included); three passes after each repetition, "
                 "the fastest counts");
  app.add_flag("--profile", profile, "also time one pp pass and the -n decodes by op (named intermediates)");
  app.add_flag("--json", as_json, "print one JSON object");
  cli::StreamFlags stream;
  cli::add_stream_flags(app, stream);
  cli::SpecFlags specf;
  cli::add_spec_flags(app, specf);
  int verify_curve = 0;
  int64_t spec_ctx = 512;
  std::string script_prompt, script;
  app.add_option("--verify-curve", verify_curve,
                 "also time verify passes of k+1 rows against a plain step, k = 1..K, with the distinct experts read "
                 "and the rollback cost (with -md: the draft block's cost too)");
  app.add_option("--spec-context", spec_ctx, "context tokens before the --verify-curve passes")->capture_default_str();
  app.add_option("--script-prompt", script_prompt, "text file: the prompt of a scripted decode (with --script)");
  app.add_option("--script", script,
                 "text file: the target's tokens of a scripted decode, decoded plainly and with the drafts of "
                 "--spec-type / -md, in the same run");
  cli::add_pp_flag(app, stages);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (p < 0 || n < 0) fail("-p and -n must be >= 0");
  const bool spec_bench = verify_curve > 0 || !script.empty();
  if (p == 0 && n == 0 && !spec_bench) fail("nothing to measure: -p and -n are both 0");
  if (!script.empty() && specf.draft.empty() && specf.type.empty()) fail("--script needs --spec-type or -md");
  if (reps < 1) fail("-r must be >= 1");
  if (parallel < 1) fail("--parallel must be >= 1");
  if (membw_mib < -1) fail("--membw-mib must be >= 0");
  const size_t probe_want = membw_mib < 0 ? kMembwProbeBytes : static_cast<size_t>(membw_mib) << 20;
  size_t probe_bytes = 0;

  const auto t_load = Clock::now();
  auto m = multinode::load(model_path, stages);
  const double load_s = seconds_since(t_load);
  auto store = cli::make_expert_store(*m, stream, as_json, model::state_bytes(m->hparams(), std::max(p, n) + 1));
  const double prefault_s = prefault(*m, store != nullptr);
  ThreadPool pool(cli::pick_threads(threads));
  model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
  opt.experts = store.get();
  if (!multinode::leader()) return multinode::follow(*m, opt);
  const DecodeBytes db = decode_bytes(*m);
  double model_bytes = 0;
  std::map<std::string, double> bytes_by_type;
  for (const auto* t : m->file().tensors()) {
    model_bytes += static_cast<double>(t->nbytes);
    bytes_by_type[type_name(t->type)] += static_cast<double>(t->nbytes);
  }
  double repacked = 0;  // weights held in k3's in-memory layouts (Model::repack_weights)
  model::for_each_tensor(m->hparams(), [&](const model::TensorRef& r) {
    const model::Tensor& t = model::bound(m->weights(), r);
    if (t && t.type != t.info->type) repacked += static_cast<double>(t.bytes());
  });

  const int64_t n_ctx = std::max(p, n) + 1;
  model::State st = m->new_state(n_ctx);
  std::vector<float> logits;
  uint32_t rng = 12345;
  auto next_id = [&] {
    rng = rng * 1103515245u + 12345u;
    return static_cast<int32_t>(rng % static_cast<uint32_t>(m->n_vocab()));
  };
  auto run_pp = [&] {
    std::vector<int32_t> ids(p);
    for (auto& id : ids) id = next_id();
    st.reset();
    const auto t0 = Clock::now();
    m->forward(st, ids.data(), p, opt, model::Logits::Last, &logits);
    return seconds_since(t0);
  };
  auto run_tg = [&](int count) {
    st.reset();
    const auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) {
      const int32_t id = next_id();
      m->forward(st, &id, 1, opt, model::Logits::Last, &logits);
    }
    return seconds_since(t0);
  };

  // --parallel: N sequences decoding at once, batched (one forward per step) or not (N forwards).
  std::vector<model::State> par_states;
  if (parallel > 1)
    for (int s = 0; s < parallel; ++s) par_states.push_back(m->new_state(n + 1));
  auto run_tg_par = [&](int count, bool batched) {
    for (auto& s : par_states) s.reset();
    std::vector<int32_t> ids(parallel);
    std::vector<std::vector<float>> out(parallel);
    std::vector<model::Segment> batch(parallel);
    const auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) {
      for (int s = 0; s < parallel; ++s) {
        ids[s] = next_id();
        batch[s] = {&par_states[s], &ids[s], 1, model::Logits::Last, &out[s]};
      }
      if (batched) m->forward(batch, opt);
      else
        for (const model::Segment& seg : batch) m->forward(std::span<const model::Segment>(&seg, 1), opt);
    }
    return seconds_since(t0);
  };
  const bool par = parallel > 1 && n > 0;

  if (p > 0) run_pp();  // warm-up
  if (n > 0) run_tg(1);
  if (par) run_tg_par(1, true);

  // Each tg repetition is followed by kProbePasses passes of the bandwidth probe, so both see the
  // same machine load; the fastest pass counts. On a shared host a single pass can be preempted
  // (seen: 2.3 GB/s between passes of 26-33 on one core), which made the fraction meaningless; a
  // preempted repetition can only lower it. RSS is read before the probe buffer exists (after the
  // first repetition: weights touched, state and scratch at their steady size).
  std::vector<double> pp_tps, tg_tps, probe_gbps, ratios, par_batched_tps, par_separate_tps;
  std::vector<multinode::RankStats> ranks;  // per process, over the timed generation passes
  model::ExpertStats es_sum;  // over the timed generation passes
  std::unique_ptr<BigBuffer> probe;
  Rss rss;
  double st_bytes = 0;
  for (int r = 0; r < reps; ++r) {
    if (p > 0) pp_tps.push_back(p / run_pp());
    if (n > 0) {
      const model::ExpertStats before = store ? store->stats() : model::ExpertStats{};
      const std::vector<multinode::RankStats> r0 = multinode::stats(*m);
      tg_tps.push_back(n / run_tg(n));
      add_rank_delta(ranks, multinode::stats(*m), r0);
      if (store) add_delta(es_sum, before, store->stats());
    }
    for (int k = 0; par && k < 2; ++k) {  // the order alternates between repetitions
      const bool batched = (k + r) % 2 == 0;
      (batched ? par_batched_tps : par_separate_tps).push_back(double(parallel) * n / run_tg_par(n, batched));
    }
    if (r == 0) {
      rss = read_rss();
      st_bytes = state_bytes(st);
      if (probe_want > 0) {
        const uint64_t headroom = memory_headroom(static_cast<uint64_t>(rss.current));
        probe_bytes = membw_probe_size(probe_want, headroom);
        if (probe_bytes < probe_want)
          std::fprintf(stderr, "k3 bench: bandwidth probe %s: %.0f MiB left to the process with the model resident%s\n",
                       probe_bytes ? strprintf("lowered to %zu MiB", probe_bytes >> 20).c_str()
                                   : strprintf("skipped (needs %zu MiB)", 2 * kMembwProbeMinBytes >> 20).c_str(),
                       headroom / 1048576.0, cgroup_memory_limit() ? " (cgroup limit)" : "");
        if (probe_bytes) {
          probe = std::make_unique<BigBuffer>(probe_bytes);
          read_pass(pool, *probe);  // warm: pages resident, workers awake
        }
      }
    }
    if (probe) {
      constexpr int kProbePasses = 3;
      double fastest = 0;
      for (int k = 0; k < kProbePasses; ++k)
        fastest = std::max(fastest, static_cast<double>(probe->size()) / read_pass(pool, *probe) / 1e9);
      probe_gbps.push_back(fastest);
      if (n > 0) ratios.push_back(tg_tps.back() * db.total() / 1e9 / probe_gbps.back());
    }
  }
  probe.reset();
  if (ranks.empty()) ranks = multinode::stats(*m);

  json prof_pp, prof_tg, layers_pp, layers_tg;
  if (profile) {
    TimerTrace tr;
    model::RunOptions popt = opt;
    popt.trace = &tr;
    if (p > 0) {
      std::vector<int32_t> ids(p);
      for (auto& id : ids) id = next_id();
      st.reset();
      tr.start();
      m->forward(st, ids.data(), p, popt, model::Logits::Last, &logits);
      prof_pp = tr.report(p);
      layers_pp = tr.report_layers(p);
    }
    if (n > 0) {
      TimerTrace tt;
      popt.trace = &tt;
      st.reset();
      for (int i = 0; i < n; ++i) {
        const int32_t id = next_id();
        tt.start();
        m->forward(st, &id, 1, popt, model::Logits::Last, &logits);
      }
      prof_tg = tt.report(1);
      layers_tg = tt.report_layers(1);
    }
  }

  json spec_out = json::object();
  if (spec_bench) {
    cli::SpecSetup ss = cli::load_spec(*m, specf);
    if (verify_curve > 0) {
      spec_out["verify"] = cli::bench_verify_curve(*m, opt, verify_curve, spec_ctx, reps);
      if (ss.draft) spec_out["draft"] = cli::bench_draft_cost(*m, *ss.draft, pool, spec_ctx, reps);
    }
    if (!script.empty()) {
      auto tok = tok::Tokenizer::from_metadata(m->meta());
      const std::vector<int32_t> prompt_ids = tok->encode(cli::read_text_file(script_prompt.empty() ? script : script_prompt), true);
      const std::vector<int32_t> script_ids = tok->encode(cli::read_text_file(script), false);
      if (script_ids.size() < 2) fail("%s: fewer than two tokens", script.c_str());
      spec::Drafting d(*m, ss.draft.get(), ss.options, pool);
      spec_out["scripted"] = cli::bench_scripted(*m, opt, d, prompt_ids, script_ids, reps);
    }
  }
  const Stat pp = stat(pp_tps), tg = stat(tg_tps), tgb = stat(par_batched_tps), tgs = stat(par_separate_tps);
  const double bpt = db.total();
  const double gbps = tg.mean * bpt / 1e9;
  const double membw = median(probe_gbps);
  const double membw_best = probe_gbps.empty() ? 0 : *std::max_element(probe_gbps.begin(), probe_gbps.end());
  const double roofline = ratios.empty() ? 0 : median(ratios);
  const int decode_streams = decode_in_parts() ? 2 : 1;  // the switchable decode rows' form (decode_in_parts)
  const DecodeChunks chunks = decode_chunks();

  if (as_json) {
    json j;
    j["model"] = model_path;
    j["model_bytes"] = model_bytes;
    j["bytes_by_type"] = bytes_by_type;
    j["threads"] = pool.size();
    j["isa"] = isa_name(active_isa()), j["cpu_isa"] = isa_name(cpu_best_isa());
    j["prefetch"] = prefetch_setting_name(prefetch_setting());
    j["decode_streams"] = decode_streams;
    j["decode_chunks"] = {{"per_thread", chunks.per_thread}, {"max_kib", chunks.max_kib}};
    j["repacked_bytes"] = repacked;
    j["p"] = p, j["n"] = n, j["reps"] = reps;
    j["pp_tokens_per_s"] = p > 0 ? json(pp.mean) : json(nullptr);
    j["pp_stddev"] = p > 0 ? json(pp.stddev) : json(nullptr);
    j["tg_tokens_per_s"] = n > 0 ? json(tg.mean) : json(nullptr);
    j["tg_stddev"] = n > 0 ? json(tg.stddev) : json(nullptr);
    j["pp_samples"] = pp_tps, j["tg_samples"] = tg_tps;
    j["bytes_per_token"] = bpt;
    j["bytes_per_token_parts"] = {{"trunk", db.trunk}, {"embd_row", db.embd_row}, {"lm_head", db.lm_head}, {"experts", db.experts}};
    j["gbps"] = n > 0 ? json(gbps) : json(nullptr);
    j["membw_gbps"] = probe_gbps.empty() ? json(nullptr) : json(membw);
    j["membw_best_gbps"] = probe_gbps.empty() ? json(nullptr) : json(membw_best);
    j["membw_samples"] = probe_gbps;
    j["membw_probe_bytes"] = probe_bytes;
    j["roofline_fraction"] = ratios.empty() ? json(nullptr) : json(roofline);
    j["rss_bytes"] = rss.current, j["rss_peak_bytes"] = rss.peak;
    j["rss_anon_bytes"] = rss.anon, j["rss_file_bytes"] = rss.file, j["rss_file_huge_bytes"] = rss.file_huge;
    j["rss_anon_huge_bytes"] = rss.anon_huge;
    j["state_bytes"] = st_bytes;
    j["ranks"] = cli::ranks_json(ranks, {});
    j["load_s"] = load_s, j["prefault_s"] = prefault_s;
    if (par)
      j["tg_parallel"] = {{"sequences", parallel},
                          {"batched_tokens_per_s", tgb.mean},
                          {"batched_stddev", tgb.stddev},
                          {"separate_tokens_per_s", tgs.mean},
                          {"separate_stddev", tgs.stddev},
                          {"batched_samples", par_batched_tps},
                          {"separate_samples", par_separate_tps}};
    if (profile) j["profile"] = {{"pp", prof_pp}, {"tg", prof_tg}, {"pp_layers", layers_pp}, {"tg_layers", layers_tg}};
    if (store && n > 0) j["experts"] = expert_report(es_sum, store->stats(), double(n) * reps);
    if (spec_bench) j["spec"] = spec_out;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  std::printf("model: %s (%.1f MB;", model_path.c_str(), model_bytes / 1e6);
  for (const auto& [t, b] : bytes_by_type) std::printf(" %s %.1f MB", t.c_str(), b / 1e6);
  std::printf("), %d threads, %d repetitions, kernels %s (CPU: %s), weight prefetch %s, decode rows %d stream%s a thread "
              "in chunks of <= %zu KiB (%d a thread), %.1f MB repacked\n\n  %-8s %18s\n",
              pool.size(), reps, isa_name(active_isa()), isa_name(cpu_best_isa()),
              prefetch_setting_name(prefetch_setting()).c_str(), decode_streams, decode_streams > 1 ? "s" : "",
              chunks.max_kib, chunks.per_thread, repacked / 1e6, "test", "t/s");
  if (p > 0) std::printf("  pp%-6d %10.2f ± %-6.2f\n", p, pp.mean, pp.stddev);
  if (n > 0) std::printf("  tg%-6d %10.2f ± %-6.2f\n", n, tg.mean, tg.stddev);
  if (par)
    std::printf("  tg%d x %d sequences: %.2f ± %.2f batched (one forward per step), %.2f ± %.2f with a forward per "
                "sequence (x%.2f)\n",
                n, parallel, tgb.mean, tgb.stddev, tgs.mean, tgs.stddev, tgb.mean / tgs.mean);
  std::printf("\nweights read per generated token: %.2f MB (trunk %.2f, embedding row %.4f, LM head %.2f, routed "
              "experts %.2f: k of E per MoE layer)\n",
              bpt / 1e6, db.trunk / 1e6, db.embd_row / 1e6, db.lm_head / 1e6, db.experts / 1e6);
  if (n > 0 && !probe_gbps.empty())
    std::printf("generation: %.2f GB/s of weights; read bandwidth (probe of %zu MiB, %d threads) %.2f GB/s median, "
                "%.2f best; roofline fraction %.2f (median of per-repetition pairs)\n",
                gbps, probe_bytes >> 20, pool.size(), membw, membw_best, roofline);
  std::printf("RSS: %.1f MB current, %.1f MB peak (file-backed %.1f MB, anonymous %.1f MB; in 2 MB pages: file-backed "
              "%.1f MB, anonymous %.1f MB; state %.2f MB)\n",
              rss.current / 1e6, rss.peak / 1e6, rss.file / 1e6, rss.anon / 1e6, rss.file_huge / 1e6, rss.anon_huge / 1e6,
              st_bytes / 1e6);
  if (rss.file > 256e6 && rss.file_huge < 0.5 * rss.file)
    std::printf("note: %.0f %% of the mapped weights are in 2 MB pages; weights stream slower from 4 KB pages (the page "
                "cache holds the file in small folios; --no-mmap copies them into 2 MB pages; docs/performance.md, "
                "\"Page size\")\n",
                100.0 * rss.file_huge / rss.file);
  if (multinode::active())
    for (const multinode::RankStats& r : ranks)
      std::printf("rank %d (%s): weights %.2f MB, RSS %.1f MB (file-backed %.1f MB); per generated token %.1f "
                  "messages, %.1f KB received, %.3f ms communicating\n",
                  r.rank, r.host.c_str(), r.weight_bytes / 1e6, r.rss_bytes / 1e6, r.rss_file_bytes / 1e6,
                  r.messages_per_token(),
                  r.tokens ? r.bytes / 1e3 / r.tokens : 0.0, r.tokens ? 1e3 * r.comm_seconds / r.tokens : 0.0);
  if (store && n > 0) {
    const json e = expert_report(es_sum, store->stats(), double(n) * reps);
    std::printf("experts per generated token: %.1f hits, %.1f misses (hit rate %.1f%%), %.2f MB read at %.2f GB/s "
                "(%.1f ms reading, %.1f ms stalled), prefetch %.1f issued / %.1f used, next-layer prediction %.1f%% "
                "right; cache %lld experts (%.1f MiB of %.1f MiB budget, %s, %s)\n",
                e["hits_per_token"].get<double>(), e["misses_per_token"].get<double>(),
                100 * e["hit_rate"].get<double>(), e["bytes_read_per_token"].get<double>() / 1e6,
                e["read_gbps"].get<double>(), 1e3 * e["read_busy_s_per_token"].get<double>(),
                1e3 * e["stall_s_per_token"].get<double>(), e["prefetched_per_token"].get<double>(),
                e["prefetch_used_per_token"].get<double>(), 100 * e["prediction_accuracy"].get<double>(),
                e["capacity_experts"].get<long long>(), e["allocated_bytes"].get<double>() / 1048576.0,
                e["budget_bytes"].get<double>() / 1048576.0, e["direct_io"].get<bool>() ? "O_DIRECT" : "buffered",
                e["io_engine"].get<std::string>().c_str());
  }
  if (spec_bench) cli::print_spec_bench(spec_out);
  if (profile) {
    if (p > 0) print_profile("prompt processing, time by op (one pass):", prof_pp, layers_pp);
    if (n > 0) print_profile("generation, time by op (median over the decoded tokens):", prof_tg, layers_tg);
  }
  return 0;
}

}  // namespace

K3_COMMAND("bench", "benchmark prompt processing and generation (llama-bench style)", cmd_bench);
