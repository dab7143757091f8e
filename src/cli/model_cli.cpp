#include "cli/model_cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "multinode/multinode.h"
#include "model/synthetic.h"
#include "tensor/threadpool.h"

namespace k3::cli {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX)
      fail("--ids: '%s' is not a token id", item.c_str());
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  if (ids.empty()) fail("--ids: empty list");
  return ids;
}

int pick_threads(int flag) {
  if (flag > 0) return flag;
  return ThreadPool::hardware_threads();
}

model::F16Rule parse_f16_rule(const std::string& s) {
  if (s.empty()) return model::default_f16_rule();
  if (s == "amx") return model::F16Rule::Amx;
  if (s == "round") return model::F16Rule::Round;
  fail("--f16-rule: expected 'amx' or 'round', got '%s'", s.c_str());
}

std::string builtin_model_path() {
  std::string dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = std::string(x) + "/k3";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache/k3";
  else fail("cannot find a cache directory for the built-in model (set XDG_CACHE_HOME or HOME, or pass -m)");
  const std::string path = dir + "/synthetic-tiny-v1.gguf";
  if (!multinode::leader()) {
    multinode::sync();  // the leader writes it
    return path;
  }
  std::fprintf(stderr,
               "k3: no model given (-m); using the built-in synthetic model %s.\n"
               "k3: its weights are RANDOM, so the text it writes is meaningless (bytes that are not UTF-8 show as such).\n"
               "k3: to run a real model: k3 run -m MODEL.gguf -p \"...\" (k3 convert makes a GGUF from the Hugging\n"
               "k3: Face checkpoint, k3 quantize sizes it to your memory; README.md shows the steps).\n",
               path.c_str());
  if (!std::filesystem::exists(path)) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail("cannot create %s: %s", dir.c_str(), ec.message().c_str());
    std::fprintf(stderr, "k3: writing it once (a few seconds)...\n");
    model::SynthOptions o = model::synth_preset("tiny");
    o.name = "k3-builtin-tiny";
    model::write_synthetic(path, o);
  }
  multinode::sync();
  return path;
}

std::string place_images(const std::string& text, const std::vector<std::shared_ptr<const vision::ImageRows>>& images) {
  static const std::string kPlaceholder = "<|kimi_image_placeholder|>";
  size_t n = 0;
  for (size_t at = text.find(kPlaceholder); at != std::string::npos; at = text.find(kPlaceholder, at + 1)) ++n;
  std::string out;
  if (n == 0) {
    for (const auto& im : images) out += im->prompt();
    return out + text;
  }
  if (n != images.size()) fail("the prompt has %zu %s placeholders for %zu images", n, kPlaceholder.c_str(), images.size());
  size_t from = 0, i = 0;
  for (size_t at; (at = text.find(kPlaceholder, from)) != std::string::npos; from = at + kPlaceholder.size())
    out += text.substr(from, at - from) + images[i++]->prompt();
  return out + text.substr(from);
}

void add_pp_flag(CLI::App& app, int& pp) {
  app.add_option("--pp", pp,
                 "pipeline stages under mpirun: the processes are split into this many stages of layers, each a "
                 "tensor-parallel group (docs/multinode.md)")
      ->capture_default_str();
}

nlohmann::json ranks_json(const std::vector<multinode::RankStats>& now, const std::vector<multinode::RankStats>& before) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < now.size(); ++i) {
    multinode::RankStats r = now[i];
    if (i < before.size()) {
      r.comm_seconds -= before[i].comm_seconds;
      r.messages -= before[i].messages, r.bytes -= before[i].bytes, r.tokens -= before[i].tokens;
    }
    out.push_back({{"rank", r.rank},
                   {"host", r.host},
                   {"weight_bytes", r.weight_bytes},
                   {"rss_bytes", r.rss_bytes},
                   {"rss_file_bytes", r.rss_file_bytes},
                   {"comm_seconds", r.comm_seconds},
                   {"messages", r.messages},
                   {"bytes_received", r.bytes},
                   {"tokens", r.tokens},
                   {"messages_per_token", r.messages_per_token()},
                   {"bytes_per_token", r.tokens ? double(r.bytes) / double(r.tokens) : 0.0}});
  }
  return out;
}

void add_stream_flags(CLI::App& app, StreamFlags& f) {
  app.add_option("--expert-cache", f.cache,
                 "stream routed experts from disk into a cache of SIZE bytes (K/M/G suffix), 'auto' (sized from the "
                 "memory available, cgroup limit included) or 'off' (map them); default: auto when the mapped model "
                 "does not fit in the memory available, else off");
  app.add_option("--cache-policy", f.policy, "expert cache eviction: freq (frequency-aware) | lru")
      ->capture_default_str();
  app.add_flag("--no-prefetch", f.no_prefetch, "do not prefetch the next layer's predicted experts");
  app.add_flag("--no-mmap", f.no_mmap,
               "copy the weights into anonymous memory (2 MB pages where the kernel gives them) instead of "
               "reading them through the file mapping; needs the whole model in memory (no streamed experts)");
  app.add_flag("--no-repack", f.no_repack,
               "keep the weights in the file's layout instead of repacking Q8_0, MXFP4 and Q4_K matrices into "
               "the kernels' faster in-memory layouts (for comparisons; the same results but for the order in "
               "which Q4_K and, on AVX-512, Q2_K sums are added); with streamed experts nothing is repacked");
  app.add_option("--io-threads", f.io_threads, "pread threads for expert reads (without io_uring)")
      ->capture_default_str();
  app.add_flag("--no-io-uring", f.no_uring, "read experts with a pread thread pool even where io_uring works");
  app.add_option("--warmup", f.warmup, "fill the expert cache before running: 'uniform' or a routing trace FILE");
  app.add_option("--pin-hot", f.pin, "with --warmup: fraction of the cache pinned to the hottest experts (0-1)");
  app.add_option("--routing-trace", f.trace,
                 "record the experts each MoE layer requests to FILE for k3 cache-sim (streams experts, with "
                 "--expert-cache auto unless given)");
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("%s: cannot open", path.c_str());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void add_spec_flags(CLI::App& app, SpecFlags& f) {
  app.add_option("--model-draft", f.draft, "(-md) DSpark draft GGUF: speculative decoding with it (output unchanged)");
  app.add_option("--spec-type", f.type,
                 "ngram: drafts from earlier occurrences of the last tokens (no model); dspark: the -md draft "
                 "(default with -md)");
  app.add_option("--draft-max", f.draft_max,
                 "most drafted tokens a step (default: chosen per step from the measured verify cost and acceptance)")
      ->capture_default_str();
  app.add_option("--draft-min", f.draft_min, "fewer drafts than this: a plain step")->capture_default_str();
}

spec::SpecOptions spec_options(const SpecFlags& f) {
  spec::SpecOptions o;
  if (f.type.empty()) o.type = f.draft.empty() ? spec::SpecType::None : spec::SpecType::Dspark;
  else if (f.type == "ngram") o.type = spec::SpecType::Ngram;
  else if (f.type == "dspark") o.type = spec::SpecType::Dspark;
  else fail("--spec-type '%s': expected ngram or dspark", f.type.c_str());
  if (o.type == spec::SpecType::Ngram && !f.draft.empty()) fail("--spec-type ngram takes no draft model (-md)");
  if (o.type == spec::SpecType::Dspark && f.draft.empty()) fail("--spec-type dspark needs a draft model (-md FILE)");
  if (o.type == spec::SpecType::None && (f.draft_max || f.draft_min))
    fail("--draft-max / --draft-min need a draft model (-md) or --spec-type");
  if (f.draft_max < 0 || f.draft_min < 0) fail("--draft-max and --draft-min must be >= 0");
  o.draft_max = f.draft_max, o.draft_min = f.draft_min;
  if (const char* k = std::getenv("K3_SPEC_KEEP")) {
    if (std::string(k) == "states") o.keep = model::KeepMode::States;
    else if (std::string(k) != "inputs") fail("K3_SPEC_KEEP=%s: expected inputs or states", k);
  }
  return o;
}

SpecSetup load_spec(const model::Model& target, const SpecFlags& f) {
  SpecSetup s;
  s.options = spec_options(f);
  if (s.options.type == spec::SpecType::Dspark)
    s.draft = spec::DraftModel::load(f.draft, target, static_cast<uint32_t>(f.draft_max));
  return s;
}

nlohmann::json spec_json(const spec::SpecStats& s, spec::SpecType type) {
  return {{"type", spec::spec_type_name(type)},
          {"passes", s.passes},
          {"steps", s.steps},
          {"draft_tokens", s.drafted},
          {"draft_accepted", s.accepted},
          {"accepted_hist", s.accepted_hist},
          {"tokens_per_pass", s.steps ? double(s.emitted) / double(s.steps) : 0.0},
          {"draft_s", s.draft_s}};
}

std::unique_ptr<model::ExpertStore> make_expert_store(model::Model& m, const StreamFlags& f, bool quiet,
                                                      uint64_t state_bytes) {
  bool stream = !f.cache.empty() || !f.trace.empty();
  if (f.cache == "off") {
    if (!f.trace.empty()) fail("--routing-trace streams experts; it cannot go with --expert-cache off");
    stream = false;
  } else if (!stream) {
    // what this process maps, in its share of the machine's memory (several processes on it)
    const uint64_t mapped = m.weight_bytes(), avail = available_memory() / multinode::host_processes();
    stream = model::auto_stream(mapped, model::expert_stack_bytes(m), state_bytes, avail);
    if (stream && f.no_mmap)
      fail("--no-mmap: the model (%.2f GB) does not fit in the memory available to this process (%.2f GB, cgroup "
           "limit included); without --no-mmap its routed experts are streamed",
           mapped / 1e9, avail / 1e9);
    if (stream && multinode::leader())
      std::fprintf(stderr,
                   "k3: the model (%.2f GB) does not fit in the memory available to this process (%.2f GB, cgroup "
                   "limit included): streaming routed experts (--expert-cache auto; --expert-cache off maps them)\n",
                   mapped / 1e9, avail / 1e9);
  }
  if (!stream) {
    if (!f.warmup.empty() || f.pin > 0) fail("--warmup and --pin-hot need --expert-cache");
    if (f.no_mmap) {
      // each process maps the whole file and reads only its share
      if (multinode::active()) fail("--no-mmap under mpirun: every process would copy the whole file");
      m.file().copy_to_anonymous();
    }
    if (!f.no_repack) m.repack_weights();
    return nullptr;
  }
  if (f.no_mmap)
    fail("--no-mmap keeps every weight in memory; it cannot go with streamed experts (--expert-cache, "
         "--routing-trace)");
  if (f.pin < 0 || f.pin > 1) fail("--pin-hot: expected a fraction in [0, 1], got %g", f.pin);
  if (f.io_threads < 1) fail("--io-threads must be >= 1");
  model::ExpertStoreOptions o;
  if (!f.cache.empty() && f.cache != "auto") {
    try {
      o.budget_bytes = model::parse_size(f.cache);
    } catch (const Error& e) {
      fail("--expert-cache: %s", e.what());
    }
  } else {
    o.budget_bytes = std::max<uint64_t>(1, model::auto_expert_budget(m, state_bytes, multinode::host_processes()));
  }
  o.policy = f.policy;
  o.prefetch = !f.no_prefetch;
  o.io_threads = f.io_threads;
  o.io_uring = !f.no_uring;
  o.trace_path = f.trace;
  o.quiet = quiet || !multinode::leader();
  auto store = std::make_unique<model::ExpertStore>(m, o);
  const model::ExpertStats s = store->stats();
  if (!o.quiet)
    std::fprintf(stderr,
                 "k3: streaming experts: cache %.1f MiB = %lld experts of %.2f MiB, %s %s reads, policy %s, "
                 "prefetch %s\n",
                 s.budget_bytes / 1048576.0, static_cast<long long>(s.capacity), s.slot_bytes / 1048576.0,
                 s.direct_io ? "O_DIRECT" : "buffered", s.io_engine, f.policy.c_str(), f.no_prefetch ? "off" : "on");
  if (!f.warmup.empty()) {
    std::vector<double> w;
    if (f.warmup != "uniform") w = store->trace_weights(model::RoutingTrace::load(f.warmup));
    store->warmup(w, f.pin);
  } else if (f.pin > 0) {
    fail("--pin-hot needs --warmup");
  }
  return store;
}

}  // namespace k3::cli
