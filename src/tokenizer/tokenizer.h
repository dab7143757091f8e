// Byte-level BPE tokenizer loaded from a GGUF vocabulary (tokenizer.ggml.* keys), with the
// pre-tokenizer selected by tokenizer.ggml.pre, and a streaming detokenizer.
//
// Text that is not well-formed UTF-8 is first decoded the way a replacing UTF-8 decoder does
// (each maximal ill-formed subpart becomes U+FFFD): what llama.cpp receives through
// node-llama-cpp's strings and what tiktoken's str API implies (llama.cpp's C API, given the raw
// bytes, has its own lenient decoding). encode() never fails on bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace k3::tok {

// tokenizer.ggml.token_type values.
enum TokenType : int32_t { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };

class Tokenizer {
 public:
  struct Options {
    std::string pre;  // overrides tokenizer.ggml.pre, e.g. "kimi-k2-regex" for the official regex
  };
  // Needs tokenizer.ggml.model = gpt2 and tokenizer.ggml.tokens; token_type, merges, pre and the
  // special ids are optional (absent pre: llama.cpp's default GPT-2 pattern). Errors name the key.
  static std::unique_ptr<Tokenizer> from_metadata(const gguf::Metadata& meta);
  static std::unique_ptr<Tokenizer> from_metadata(const gguf::Metadata& meta, const Options& opt);
  // tiktoken-style: rank-based BPE over `ranked` (id = rank), specials as CONTROL tokens.
  static std::unique_ptr<Tokenizer> from_ranks(std::vector<std::string> ranked, std::vector<SpecialToken> specials,
                                               std::string_view pre);
  // A GGUF file (or the first part of a split set), or a tiktoken.model with an optional
  // tokenizer_config.json (imported as the converter does: write_vocab, pre kimi-k2 unless
  // opt.pre says otherwise, merge-list BPE).
  static std::unique_ptr<Tokenizer> from_file(const std::string& path, const std::string& config_path = "",
                                              const Options& opt = {});
  virtual ~Tokenizer() = default;

  // parse_special: CONTROL (and UNKNOWN) token texts in the text become those tokens, longest
  // first; USER_DEFINED token texts always do (as in llama.cpp). No BOS/EOS is added.
  virtual std::vector<int32_t> encode(std::string_view text, bool parse_special) const = 0;
  // Raw bytes of one token (special tokens as their text). Throws k3::Error for an id out of range.
  virtual const std::string& piece(int32_t id) const = 0;
  // Concatenated pieces; CONTROL/UNKNOWN/UNUSED tokens only when render_special.
  std::string decode(const std::vector<int32_t>& ids, bool render_special) const;

  virtual int32_t n_vocab() const = 0;
  virtual bool is_special(int32_t id) const = 0;       // CONTROL (or user-defined) token
  virtual bool is_eog(int32_t id) const = 0;           // end of generation (chat.md §4)
  virtual int32_t bos() const = 0;                     // -1 if none
  virtual int32_t eos() const = 0;
  virtual int32_t token_id(std::string_view text) const = 0;  // exact token text lookup, -1 if none

  virtual int32_t token_type(int32_t id) const = 0;   // TokenType; throws for an id out of range
  virtual const std::string& token_text(int32_t id) const = 0;  // as stored in the vocabulary
  virtual int32_t eot() const = 0;                     // -1 if none
  virtual int32_t pad() const = 0;                     // -1 if none
  virtual bool add_bos() const = 0;                    // tokenizer.ggml.add_bos_token (default false)
  virtual const std::vector<int32_t>& eog_ids() const = 0;
  virtual const char* pre_name() const = 0;            // the pre-tokenizer in use
  bool hidden(int32_t id) const;                       // not rendered unless render_special
};

// Turns a token stream into text as it arrives: incomplete UTF-8 sequences are held back until
// complete; special tokens rendered or hidden. The concatenation of push() results and flush()
// is exactly decode(ids, render_special): bytes are never altered, only delayed.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool render_special) : tok_(tok), render_special_(render_special) {}
  std::string push(int32_t id);  // the text that became complete
  std::string flush();           // what is left (invalid/incomplete bytes as they are)

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::string pending_;
};

}  // namespace k3::tok
