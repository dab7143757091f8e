// k3 tokenize: text -> token ids (and pieces) with a model's or a vocabulary file's tokenizer.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/tokenizer_cli.h"
#include "common/error.h"
#include "tokenizer/unicode.h"

namespace {

using namespace k3;

const char* kUsage =
    "usage: k3 tokenize (-m MODEL | --vocab FILE [--config tokenizer_config.json]) [options] [TEXT...]\n"
    "\n"
    "Tokenizes TEXT (the arguments joined by spaces), or the contents of -f FILE, or stdin, and\n"
    "prints the token ids on one line separated by spaces.\n"
    "\n"
    "  -m, --model FILE   a GGUF model (or the first part of a split set)\n"
    "  --vocab FILE       a GGUF file or a tiktoken.model (imported like the converter does)\n"
    "  --config FILE      tokenizer_config.json for a tiktoken.model (added tokens, bos/eos, ...)\n"
    "  --pre NAME         pre-tokenizer: kimi-k2 (llama.cpp's, the default for K3), kimi-k2-regex\n"
    "                     (the official Kimi regex), cl100k_base, o200k_base, default\n"
    "  --special          match special-token texts (<|open|>, [EOS], ...) as special tokens\n"
    "  --bos              prepend the BOS token (default: as tokenizer.ggml.add_bos_token says)\n"
    "  -f FILE            read the text from FILE\n"
    "  --json             print {\"ids\": [...], \"pieces\": [...]}; a piece that is not valid UTF-8\n"
    "                     on its own is an array of its byte values\n"
    "  --pieces           print one token per line: id, tab, the piece as a JSON string\n"
    "\n"
    "Text that is not valid UTF-8 is tokenized as if each ill-formed sequence were U+FFFD.\n";

nlohmann::json piece_json(const std::string& p) {
  if (tok::utf8_valid_prefix(p) == p.size()) return p;
  nlohmann::json bytes = nlohmann::json::array();
  for (unsigned char c : p) bytes.push_back(c);
  return bytes;
}

int cmd_tokenize(int argc, char** argv) {
  cli::TokenizerArgs ta("tokenize");
  bool json = false, pieces = false, force_bos = false;
  std::vector<std::string> words;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (ta.parse(argc, argv, i)) {
    } else if (a == "--json") {
      json = true;
    } else if (a == "--pieces") {
      pieces = true;
    } else if (a == "--bos") {
      force_bos = true;
    } else if (a == "--") {
      for (++i; i < argc; ++i) words.push_back(argv[i]);
    } else if (a.size() > 1 && a[0] == '-') {
      fail("unknown option '%s' (see k3 tokenize --help)", a.c_str());
    } else {
      words.push_back(a);
    }
  }
  ta.check(!words.empty());
  auto tok = ta.load();
  std::string joined, where;
  for (size_t i = 0; i < words.size(); ++i) joined += (i ? " " : "") + words[i];
  const std::string text = ta.read_input(words.empty() ? nullptr : &joined, &where);

  std::vector<int32_t> ids;
  if ((force_bos || tok->add_bos()) && tok->bos() >= 0) ids.push_back(tok->bos());
  std::vector<int32_t> body = tok->encode(text, ta.special);
  ids.insert(ids.end(), body.begin(), body.end());

  if (json) {
    nlohmann::json j = {{"ids", ids}, {"pieces", nlohmann::json::array()}};
    for (int32_t id : ids) j["pieces"].push_back(piece_json(tok->piece(id)));
    std::printf("%s\n", j.dump().c_str());
  } else if (pieces) {
    for (int32_t id : ids) {
      nlohmann::json p = tok->piece(id);  // dump() escapes; invalid bytes shown as U+FFFD
      std::printf("%d\t%s\n", id, p.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  } else {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(ids[i]);
    }
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

}  // namespace

K3_COMMAND("tokenize", "text -> token ids with a model's or a vocabulary's tokenizer", cmd_tokenize);
