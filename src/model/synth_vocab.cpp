#include "model/synth_vocab.h"

#include <map>
#include <set>

#include "common/error.h"

namespace k3::model {

const std::string& synth_text() {
  static const std::string text =
      "The lighthouse keeper counted the ships that passed each night and wrote their names in a small "
      "blue book. Some nights there were none, and he wrote the weather instead: wind from the west, rain "
      "at midnight, a clear sky before dawn. Over the years the book became a record of the sea itself.\n"
      "In the spring the village held a market on the harbour wall. Fishermen sold their catch, bakers "
      "brought bread still warm from the oven, and children ran between the stalls with paper kites. "
      "The keeper walked down from the cliff to buy coffee, candles and thread, and to hear the news.\n"
      "One evening a storm came in faster than anyone expected. The waves climbed the rocks and the "
      "light turned slowly through the spray. He kept the lamp burning until morning, then wrote one "
      "line in the book: seven ships, all safe, the sea calm again by noon.\n"
      "Numbers matter in the log: 12 boats in March, 31 in April, 256 nets mended, 1024 steps from the "
      "door to the light. He liked to say that a careful count is a kind of kindness, because it means "
      "someone was watching and someone would remember.\n"
      "When the new engineers arrived to automate the light, they found the book and read it for hours. "
      "They asked him how he had known which ships would need help. He said he did not know; he only "
      "looked at the water, listened to the wind, and wrote down what he saw, every night, without fail.\n"
      "def count(items):\n    total = 0\n    for item in items:\n        total += item\n    return total\n"
      "print(count([1, 2, 3]))  # prints 6\n";
  return text;
}

// Pieces for BPE training: an optional leading space + letters, digits (up to 3), an optional
// space + punctuation, or whitespace runs. Merges never cross pieces.
static std::vector<std::string> pieces(const std::string& s) {
  auto alpha = [](unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; };
  auto digit = [](unsigned char c) { return c >= '0' && c <= '9'; };
  auto space = [](unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (s[j] == ' ' && j + 1 < s.size() && !space(s[j + 1])) ++j;
    if (alpha(s[j])) {
      while (j < s.size() && alpha(s[j])) ++j;
    } else if (digit(s[j])) {
      size_t n = 0;
      while (j < s.size() && digit(s[j]) && n < 3) ++j, ++n;
    } else if (space(s[j])) {
      while (j < s.size() && space(s[j])) ++j;
    } else {
      while (j < s.size() && !alpha(s[j]) && !digit(s[j]) && !space(s[j])) ++j;
    }
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

tok::VocabSpec synth_vocab(uint32_t n_vocab) {
  if (n_vocab < 2 * kSynthSpecials) fail("vocabulary size %u is too small (at least %u)", n_vocab, 2 * kSynthSpecials);
  if (n_vocab > kMaxSynthVocab) fail("vocabulary size %u is too large (at most %u, Kimi-K3's)", n_vocab, kMaxSynthVocab);
  const size_t n_ranked = n_vocab - kSynthSpecials;
  tok::VocabSpec spec;
  for (int b = 0; b < 256; ++b) spec.ranked.push_back(std::string(1, static_cast<char>(b)));
  std::set<std::string> known(spec.ranked.begin(), spec.ranked.end());

  std::map<std::string, int> counts;
  for (const auto& p : pieces(synth_text())) ++counts[p];
  std::vector<std::pair<std::vector<std::string>, int>> words;
  for (const auto& [w, c] : counts) {
    std::vector<std::string> toks;
    for (char ch : w) toks.push_back(std::string(1, ch));
    words.push_back({toks, c});
  }
  while (spec.ranked.size() < n_ranked) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [toks, c] : words)
      for (size_t i = 0; i + 1 < toks.size(); ++i) pairs[{toks[i], toks[i + 1]}] += c;
    if (pairs.empty()) break;  // the text has no more merges: the rest are reserved ids
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;  // ties: first in map order
    const auto [a, b] = best->first;
    const std::string ab = a + b;
    if (known.insert(ab).second) spec.ranked.push_back(ab);
    for (auto& [toks, c] : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < toks.size(); ++i) {
        if (i + 1 < toks.size() && toks[i] == a && toks[i + 1] == b) {
          merged.push_back(ab);
          ++i;
        } else {
          merged.push_back(toks[i]);
        }
      }
      toks = std::move(merged);
    }
  }

  const int32_t base = static_cast<int32_t>(n_ranked);  // ids from spec.ranked.size() to here: reserved
  const std::pair<int, const char*> specials[] = {
      {0, "[BOS]"}, {1, "[EOS]"}, {2, "<|end_of_msg|>"}, {3, "<|open|>"}, {4, "<|close|>"}, {5, "<|sep|>"},
      {6, "[start_header_id]"}, {7, "[end_header_id]"}, {9, "[EOT]"}, {18, "<|media_begin|>"},
      {19, "<|media_content|>"}, {20, "<|media_end|>"}, {21, "<|media_pad|>"}, {65, "<osagent_mode>"},
      {254, "[UNK]"}, {255, "[PAD]"}};
  for (const auto& [off, text] : specials) spec.specials.push_back({base + off, text});
  spec.n_vocab = static_cast<int32_t>(n_vocab);
  spec.bos_id = base + 0;
  spec.eos_id = base + 2;
  spec.pad_id = base + 255;
  return spec;
}

}  // namespace k3::model
