// k3 logits: raw logits of every position of a token sequence, for parity work.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_cli.h"
#include "common/error.h"
#include "multinode/multinode.h"
#include "model/model.h"
#include "model/trace.h"

using namespace k3;

static int cmd_logits(int argc, char** argv) {
  CLI::App app{"Print the logits of every position of --ids as JSON: {\"n_vocab\":V,\"rows\":[{\"pos\":i,\"logits\":[...]}]}.",
               "k3 logits"};
  std::string model_path, ids_str, out, mode = "batch", dump, f16_rule;
  int threads = 0, chunk = 0, pp = 1;
  int64_t n_ctx = 0;
  app.add_option("-m,--model", model_path, "GGUF model")->required();
  app.add_option("--ids", ids_str, "comma-separated token ids")->required();
  app.add_option("--out,-o", out, "output JSON file (default: stdout)");
  app.add_option("--mode", mode, "batch (one pass), incremental (token by token) or chunked (--chunk N)")
      ->check(CLI::IsMember({"batch", "incremental", "chunked"}));
  app.add_option("--chunk", chunk, "chunk size for --mode chunked");
  app.add_option("-t,--threads", threads, "threads (default: all cores)");
  app.add_option("-c,--ctx", n_ctx, "context size (default: the number of ids)");
  app.add_option("--dump", dump, "write named intermediates per layer to this directory (index.json + .f32 files)");
  app.add_option("--f16-rule", f16_rule, "amx | round: how F16 matrices round activations (default: from the CPU)");
  cli::StreamFlags stream;
  cli::add_stream_flags(app, stream);
  cli::add_pp_flag(app, pp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::vector<int32_t> ids = cli::parse_ids(ids_str);
  auto m = multinode::load(model_path, pp);
  const int64_t ctx = n_ctx > 0 ? n_ctx : static_cast<int64_t>(ids.size());
  auto store = cli::make_expert_store(*m, stream, true, model::state_bytes(m->hparams(), ctx));
  ThreadPool pool(cli::pick_threads(threads));
  model::RunOptions opt{&pool, cli::parse_f16_rule(f16_rule), nullptr};
  opt.experts = store.get();
  if (!multinode::leader()) return multinode::follow(*m, opt);
  std::unique_ptr<model::DumpTrace> trace;
  if (!dump.empty()) trace = std::make_unique<model::DumpTrace>(dump);
  opt.trace = trace.get();
  model::State st = m->new_state(ctx);

  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t step = n;
  if (mode == "incremental") step = 1;
  if (mode == "chunked") {
    if (chunk <= 0) fail("--mode chunked needs --chunk N > 0");
    step = chunk;
  }
  std::vector<float> logits;
  m->prefill(st, ids, step, opt, model::Logits::All, &logits);
  trace.reset();  // writes index.json

  const int32_t V = m->n_vocab();
  nlohmann::json j;
  j["n_vocab"] = V;
  j["rows"] = nlohmann::json::array();
  for (int64_t t = 0; t < n; ++t)
    j["rows"].push_back({{"pos", t}, {"logits", std::vector<float>(logits.begin() + t * V, logits.begin() + (t + 1) * V)}});
  const std::string s = j.dump();
  if (out.empty()) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
  } else {
    std::ofstream f(out, std::ios::binary);
    f << s << '\n';
    if (!f) fail("cannot write '%s'", out.c_str());
  }
  return 0;
}

K3_COMMAND("logits", "print the logits of every position (parity work; --dump for intermediates)", cmd_logits);
