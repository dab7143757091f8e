// Input rows given instead of token embeddings (an image's rows from src/vision): row r of `data`
// ([n][n_embd] floats) is the input of the token at index at + r of a segment or prompt. The model
// uses the rows that fall inside the segment and ignores the rest, so a caller that cuts a prompt
// into chunks passes every image with `at` shifted by the chunk's start. The token ids at those
// positions still count (they must be ids of the vocabulary, e.g. <|media_pad|>), only their
// embeddings are replaced; nothing else in the model changes.
#pragma once
#include <cstdint>

namespace k3::model {

struct InputRows {
  int64_t at = 0;
  int64_t n = 0;
  const float* data = nullptr;
};

}  // namespace k3::model
