#include "cli/text_cli.h"

#include <cstdio>
#include <fstream>
#include <iterator>

#include "common/error.h"
#include "multinode/multinode.h"
#include "tensor/threadpool.h"
#include "tokenizer/tokenizer.h"

namespace k3::cli {

void ChunkedText::add_options(CLI::App& app, const char* text_help, const char* ctx_help, const char* chunks_help,
                              bool stream) {
  app.add_option("-m,--model", model_path, "GGUF model")->required();
  app.add_option("-f,--file", text_path, text_help)->required();
  app.add_option("-c,--ctx", o.n_ctx, ctx_help)->capture_default_str();
  app.add_option("-b,--batch", o.n_batch, "tokens per forward pass")->capture_default_str();
  app.add_option("--chunks", o.max_chunks, chunks_help)->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: all CPUs)");
  stream_ = stream;
  if (stream) add_stream_flags(app, stream_flags_);
}

void ChunkedText::load(const char* what) {
  o.threads = threads > 0 ? threads : ThreadPool::hardware_threads();
  model = multinode::load(model_path, pp);
  if (stream_) {
    experts = make_expert_store(*model, stream_flags_, false, model::state_bytes(model->hparams(), o.n_ctx));
    o.experts = experts.get();
  }
  if (!multinode::leader()) return;
  std::ifstream f(text_path, std::ios::binary);
  if (!f) fail("cannot read '%s'", text_path.c_str());
  const std::string text(std::istreambuf_iterator<char>(f), {});
  tokens = tok::Tokenizer::from_metadata(model->meta())->encode(text, false);
  n_chunks = quant::count_chunks(static_cast<int64_t>(tokens.size()), o);
  std::fprintf(stderr, "%s: %zu tokens, %lld chunks of %lld\n", what, tokens.size(), static_cast<long long>(n_chunks),
               static_cast<long long>(o.n_ctx));
}

}  // namespace k3::cli
