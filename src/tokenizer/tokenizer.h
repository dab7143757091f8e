// Byte-level BPE tokenizer loaded from a GGUF vocabulary (tokenizer.ggml.* keys), with the
// pre-tokenizer selected by tokenizer.ggml.pre, and a streaming detokenizer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace k3::tok {

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_metadata(const gguf::Metadata& meta);
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> encode(std::string_view text, bool parse_special) const = 0;
  // Raw bytes of one token (special tokens as their text).
  virtual const std::string& piece(int32_t id) const = 0;
  std::string decode(const std::vector<int32_t>& ids, bool render_special) const;

  virtual int32_t n_vocab() const = 0;
  virtual bool is_special(int32_t id) const = 0;       // CONTROL (or user-defined) token
  virtual bool is_eog(int32_t id) const = 0;           // end of generation (chat.md §4)
  virtual int32_t bos() const = 0;                     // -1 if none
  virtual int32_t eos() const = 0;
  virtual int32_t token_id(std::string_view text) const = 0;  // exact token text lookup, -1 if none
};

// Turns a token stream into text as it arrives: incomplete UTF-8 sequences are held back until
// complete; special tokens rendered or hidden.
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
