// Flags shared by k3 tokenize and k3 detokenize: where the tokenizer comes from and where the
// input is read from.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace k3::cli {

struct TokenizerArgs {
  explicit TokenizerArgs(std::string command) : cmd(std::move(command)) {}
  std::string cmd;  // "tokenize" / "detokenize", for messages
  std::string model, vocab, config, file;
  tok::Tokenizer::Options opt;
  bool special = false;

  // Consumes argv[i] (and its value, advancing i) when it is -m/--model, --vocab, --config, --pre,
  // -f or --special; false for any other argument.
  bool parse(int argc, char** argv, int& i);
  // Exactly one of -m and --vocab, --config only with --vocab, and -f only without positional input.
  void check(bool has_positional) const;
  std::unique_ptr<tok::Tokenizer> load() const;
  // The input: the file of -f, else `positional` when there is any, else all of stdin. `where`
  // receives a name for messages (the file, "arguments" or "stdin").
  std::string read_input(const std::string* positional, std::string* where) const;
};

}  // namespace k3::cli
