// The small byte-level BPE vocabulary of synthetic models: 256 single bytes, then byte sequences
// learned greedily (BPE) from a fixed built-in text, then the K3 special tokens (conversion.md
// §5.3) at the same offsets after the ranked ids as in the real vocabulary.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace k3::model {

inline constexpr uint32_t kSynthSpecials = 256;  // reserved ids after the ranked ones, like K3

// n_vocab = ranked + 256; throws if n_vocab < 512 or the built-in text cannot supply the merges.
tok::VocabSpec synth_vocab(uint32_t n_vocab);
// The built-in text (also a handy prompt for tests).
const std::string& synth_text();

}  // namespace k3::model
