// The byte-level BPE vocabulary of synthetic models: 256 single bytes, then byte sequences learned
// greedily (BPE) from a fixed built-in text (a few hundred: what the text supplies), then reserved
// control ids (<|reserved_token_N|>) up to n_vocab - 256, then the K3 special tokens (conversion.md
// §5.3) at the same offsets from there as in the real vocabulary. So --vocab 163840 gives K3's
// ids, specials and LM-head shape.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace k3::model {

inline constexpr uint32_t kSynthSpecials = 256;     // reserved ids after the ranked ones, like K3
inline constexpr uint32_t kMaxSynthVocab = 163840;  // Kimi-K3's vocabulary size

// n_vocab = ranked + reserved + 256; throws if n_vocab < 512 or > kMaxSynthVocab.
tok::VocabSpec synth_vocab(uint32_t n_vocab);
// The built-in text (also a handy prompt for tests).
const std::string& synth_text();

}  // namespace k3::model
