// k3 detokenize: token ids -> text.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace k3;

const char* kUsage =
    "usage: k3 detokenize (-m MODEL | --vocab FILE [--config tokenizer_config.json]) [options] [IDS...]\n"
    "\n"
    "Turns token ids into text. The ids come from the arguments, or -f FILE, or stdin, separated by\n"
    "spaces, commas or newlines (a JSON array works too). The text is written as raw bytes, with a\n"
    "newline only when stdout is a terminal.\n"
    "\n"
    "  -m, --model FILE   a GGUF model (or the first part of a split set)\n"
    "  --vocab FILE       a GGUF file or a tiktoken.model\n"
    "  --config FILE      tokenizer_config.json for a tiktoken.model\n"
    "  --special          render control tokens (<|open|>, [EOS], ...); hidden by default\n"
    "  -f FILE            read the ids from FILE\n";

std::vector<int32_t> parse_ids(const std::string& s, const std::string& where) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == '[' || c == ']') {
      ++i;
      continue;
    }
    size_t j = i;
    if (s[j] == '-') ++j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i || (j == i + 1 && s[i] == '-') || j - i > 11)
      fail("%s: '%s' at byte %zu is not a token id", where.c_str(), s.substr(i, 20).c_str(), i);
    long long v = std::stoll(s.substr(i, j - i));
    if (v < INT32_MIN || v > INT32_MAX) fail("%s: %lld is not a token id", where.c_str(), v);
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

int cmd_detokenize(int argc, char** argv) {
  std::string model, vocab, config, file, args;
  tok::Tokenizer::Options opt;
  bool special = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail("%s needs a value (see k3 detokenize --help)", a.c_str());
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model") {
      model = value();
    } else if (a == "--vocab") {
      vocab = value();
    } else if (a == "--config") {
      config = value();
    } else if (a == "--pre") {
      opt.pre = value();
    } else if (a == "-f") {
      file = value();
    } else if (a == "--special") {
      special = true;
    } else if (a.size() > 1 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
      fail("unknown option '%s' (see k3 detokenize --help)", a.c_str());
    } else {
      args += a + " ";
    }
  }
  if (model.empty() == vocab.empty()) fail("give exactly one of -m MODEL and --vocab FILE (see k3 detokenize --help)");
  if (!file.empty() && !args.empty()) fail("give the ids either as arguments or with -f, not both");
  std::vector<int32_t> ids;
  if (!file.empty()) {
    std::ifstream f(file, std::ios::binary);
    if (!f) fail("%s: cannot open file", file.c_str());
    ids = parse_ids(std::string(std::istreambuf_iterator<char>(f), {}), file);
  } else if (!args.empty()) {
    ids = parse_ids(args, "arguments");
  } else {
    ids = parse_ids(std::string(std::istreambuf_iterator<char>(std::cin), {}), "stdin");
  }
  auto tok = tok::Tokenizer::from_file(model.empty() ? vocab : model, config, opt);
  std::string text = tok->decode(ids, special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (isatty(fileno(stdout))) std::fputc('\n', stdout);
  return 0;
}

}  // namespace

K3_COMMAND("detokenize", "token ids -> text", cmd_detokenize);
