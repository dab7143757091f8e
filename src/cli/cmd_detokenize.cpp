// k3 detokenize: token ids -> text.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/tokenizer_cli.h"
#include "common/error.h"

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
  cli::TokenizerArgs ta("detokenize");
  std::string args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (ta.parse(argc, argv, i)) {
    } else if (a.size() > 1 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
      fail("unknown option '%s' (see k3 detokenize --help)", a.c_str());
    } else {
      args += a + " ";
    }
  }
  ta.check(!args.empty());
  std::string where;
  const std::string in = ta.read_input(args.empty() ? nullptr : &args, &where);
  const std::vector<int32_t> ids = parse_ids(in, where);
  auto tok = ta.load();
  std::string text = tok->decode(ids, ta.special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (isatty(fileno(stdout))) std::fputc('\n', stdout);
  return 0;
}

}  // namespace

K3_COMMAND("detokenize", "token ids -> text", cmd_detokenize);
