// Generated token ids -> text for the client: detokenizing (with the K3 structural special tokens
// kept as text for the chat parser) and stop strings.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace k3::server {

// Streaming detokenizer. Ordinary tokens go through tok::StreamDecoder (incomplete UTF-8 held
// back). With keep_markers, the K3 structural special tokens (<|open|>, <|close|>, <|sep|>,
// <|end_of_msg|>) become their text, which the K3 output parser needs; every other special
// token is dropped, so none leaks into client text.
class Detokenizer {
 public:
  Detokenizer(const tok::Tokenizer& tok, bool keep_markers);
  std::string push(int32_t id);
  std::string flush();

 private:
  const tok::Tokenizer& tok_;
  bool keep_markers_;
  tok::StreamDecoder dec_;
};

// Finds the first occurrence of any stop string in a text that arrives in pieces. push() returns
// the text that can no longer be the start of a stop string; a tail that could be is held back
// until the next piece decides. After a hit, hit() is true, the text before the stop string has
// been returned and everything after it is discarded.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  std::string push(std::string_view text);
  std::string flush();  // end of generation without a hit: the held-back tail
  bool hit() const { return hit_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool hit_ = false;
  std::string matched_;
};

}  // namespace k3::server
