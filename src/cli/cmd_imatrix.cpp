// k3 imatrix: importance matrix of a model over a text (llama.cpp's imatrix GGUF format).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "cli/text_cli.h"
#include "common/error.h"
#include "quantize/imatrix.h"
#include "quantize/perplexity.h"
#include "tensor/threadpool.h"

using namespace k3;

namespace {

std::string base_name(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

int cmd_imatrix(int argc, char** argv) {
  CLI::App app{"Collect an importance matrix: per column of every matrix product, the sum of the squared inputs "
               "over a text (per expert for the expert stacks, per head for attn_k_b/attn_v_b) and the number of "
               "rows, written in llama.cpp's imatrix GGUF format (k3 quantize --imatrix, llama-quantize --imatrix).",
               "k3 imatrix"};
  cli::ChunkedText ct;
  std::string out_path = "imatrix.gguf";
  std::vector<std::string> in_files;
  ct.add_options(app, "calibration text", "tokens per chunk (each chunk starts from an empty state)",
                 "use at most N chunks (0: all)");
  app.add_option("-o,--output", out_path, "output imatrix GGUF")->capture_default_str();
  app.add_option("--in-file", in_files, "add the statistics of an existing imatrix file (same model)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ct.load("imatrix");
  const quant::PplOptions& o = ct.o;
  const model::Model& m = *ct.model;
  const std::vector<int32_t>& tokens = ct.tokens;
  const int64_t n_chunks = ct.n_chunks;

  quant::ImatrixCollector col(m);
  ThreadPool pool(o.threads);
  model::RunOptions ropt;
  ropt.pool = &pool;
  ropt.f16_rule = model::default_f16_rule();
  ropt.observer = &col;
  std::vector<float> logits;  // every token's: the LM head's product is collected too (output.weight)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const std::vector<int32_t> ids(tokens.begin() + c * o.n_ctx, tokens.begin() + (c + 1) * o.n_ctx);
    model::State st = m.new_state(o.n_ctx);
    m.prefill(st, ids, o.n_batch, ropt, model::Logits::All, &logits);
    std::fprintf(stderr, "[%lld/%lld]\n", static_cast<long long>(c + 1), static_cast<long long>(n_chunks));
  }
  quant::Imatrix& im = col.imatrix();
  im.chunk_count = static_cast<uint32_t>(n_chunks);
  im.chunk_size = static_cast<uint32_t>(o.n_ctx);
  im.datasets = {base_name(ct.text_path)};
  for (const auto& f : in_files) {
    quant::Imatrix other = quant::Imatrix::load(f);
    other.check_model(m.file());
    im.merge(other);
  }
  im.save(out_path);
  std::printf("wrote %s: %zu entries, %u chunks of %u tokens\n", out_path.c_str(), im.entries.size(), im.chunk_count,
              im.chunk_size);
  return 0;
}

}  // namespace

K3_COMMAND("imatrix", "collect an importance matrix over a text (llama.cpp imatrix GGUF)", cmd_imatrix);
