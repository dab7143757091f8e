// k3 perplexity: perplexity of a model on a text, and KL divergence against a reference model.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/model_cli.h"
#include "cli/text_cli.h"
#include "common/error.h"
#include "multinode/multinode.h"
#include "quantize/perplexity.h"

using namespace k3;

namespace {

int cmd_perplexity(int argc, char** argv) {
  CLI::App app{"Perplexity of a model on a text (chunks of -c tokens, the second half of each scored), and the KL "
               "divergence of its next-token distributions from a reference model's: run the reference once with "
               "--save-kl-base FILE, then each quantized model with --kl-base FILE.",
               "k3 perplexity"};
  cli::ChunkedText ct;
  std::string save_base, kl_base, json_path;
  bool quiet = false;
  ct.add_options(app, "text file", "tokens per chunk", "score at most N chunks (0: all)", true);
  app.add_option("--save-kl-base", save_base, "write this model's log-probabilities as a KL base file");
  app.add_option("--kl-base", kl_base, "compare with the KL base file of a reference model");
  app.add_option("--json", json_path, "write the results as JSON to this file");
  app.add_flag("-q,--quiet", quiet, "no per-chunk progress");
  cli::add_pp_flag(app, ct.pp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ct.load("perplexity");
  if (!multinode::leader()) {
    ThreadPool pool(ct.o.threads);
    model::RunOptions opt{&pool, model::default_f16_rule(), nullptr};
    opt.experts = ct.o.experts;
    return multinode::follow(*ct.model, opt);
  }
  const quant::PplOptions& o = ct.o;
  const model::Model& m = *ct.model;

  std::unique_ptr<quant::KlBase> save, base;
  if (!save_base.empty())
    save = quant::KlBase::create(save_base, m.n_vocab(), o.n_ctx, o.n_ctx / 2, ct.tokens, ct.n_chunks);
  if (!kl_base.empty()) base = quant::KlBase::open(kl_base, m.n_vocab(), o.n_ctx, ct.tokens, ct.n_chunks);
  quant::KlStats kl;
  const quant::PplResult r = quant::perplexity(m, ct.tokens, o, save.get(), base.get(), &kl, [&](int64_t c, int64_t n, double p) {
    if (!quiet) std::fprintf(stderr, "[%lld/%lld] ppl %.4f\n", static_cast<long long>(c + 1), static_cast<long long>(n), p);
  });
  if (save) save->finish();
  std::printf("PPL = %.4f ± %.4f over %lld tokens (%lld chunks of %lld)\n", r.ppl(), r.ppl_stderr(),
              static_cast<long long>(r.n_tokens), static_cast<long long>(r.n_chunks), static_cast<long long>(r.n_ctx));
  if (base) kl.print(stdout);
  if (!json_path.empty()) {
    nlohmann::json j = {{"model", ct.model_path}, {"text", ct.text_path}, {"perplexity", r.to_json()}};
    if (base) j["kl"] = kl.to_json();
    std::ofstream f(json_path);
    f << j.dump(1) << '\n';
    if (!f) fail("cannot write '%s'", json_path.c_str());
  }
  return 0;
}

}  // namespace

K3_COMMAND("perplexity", "perplexity of a model on a text; KL divergence against a reference model", cmd_perplexity);
