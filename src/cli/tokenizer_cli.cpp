#include "cli/tokenizer_cli.h"

#include <fstream>
#include <iostream>
#include <iterator>

#include "common/error.h"

namespace k3::cli {

bool TokenizerArgs::parse(int argc, char** argv, int& i) {
  const std::string a = argv[i];
  auto value = [&]() -> std::string {
    if (i + 1 >= argc) fail("%s needs a value (see k3 %s --help)", a.c_str(), cmd.c_str());
    return argv[++i];
  };
  if (a == "-m" || a == "--model")
    model = value();
  else if (a == "--vocab")
    vocab = value();
  else if (a == "--config")
    config = value();
  else if (a == "--pre")
    opt.pre = value();
  else if (a == "-f")
    file = value();
  else if (a == "--special")
    special = true;
  else
    return false;
  return true;
}

void TokenizerArgs::check(bool has_positional) const {
  if (model.empty() == vocab.empty())
    fail("give exactly one of -m MODEL and --vocab FILE (see k3 %s --help)", cmd.c_str());
  if (!config.empty() && vocab.empty()) fail("--config goes with --vocab");
  if (!file.empty() && has_positional) fail("give the input either as arguments or with -f, not both");
}

std::unique_ptr<tok::Tokenizer> TokenizerArgs::load() const {
  return tok::Tokenizer::from_file(model.empty() ? vocab : model, config, opt);
}

std::string TokenizerArgs::read_input(const std::string* positional, std::string* where) const {
  if (!file.empty()) {
    std::ifstream f(file, std::ios::binary);
    if (!f) fail("%s: cannot open file", file.c_str());
    *where = file;
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  if (positional) {
    *where = "arguments";
    return *positional;
  }
  *where = "stdin";
  return std::string(std::istreambuf_iterator<char>(std::cin), {});
}

}  // namespace k3::cli
