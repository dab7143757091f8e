// Flags and set-up shared by k3 perplexity and k3 imatrix: a model run over the chunks of a text.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/model_cli.h"
#include "model/model.h"
#include "quantize/perplexity.h"

namespace k3::cli {

struct ChunkedText {
  std::string model_path, text_path;
  quant::PplOptions o;
  int threads = 0;
  int pp = 1;  // pipeline stages under mpirun (k3 perplexity --pp)
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::ExpertStore> experts;  // set in o.experts when streaming
  std::vector<int32_t> tokens;
  int64_t n_chunks = 0;

  // -m, -f, -c, -b, --chunks and -t, with these descriptions of the text, -c and --chunks; with
  // `stream`, the expert-streaming flags too (model_cli.h).
  void add_options(CLI::App& app, const char* text_help, const char* ctx_help, const char* chunks_help,
                   bool stream = false);
  // After parsing: loads the model (and the expert store the flags or the memory ask for),
  // tokenizes the text with its tokenizer, counts the chunks and prints "<what>: N tokens, C
  // chunks of c" on stderr. Under mpirun the processes other than the leader only load their
  // share of the model (multinode/multinode.h).
  void load(const char* what);

 private:
  bool stream_ = false;
  StreamFlags stream_flags_;
};

}  // namespace k3::cli
