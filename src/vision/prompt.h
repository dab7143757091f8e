// Images into a tokenised prompt (vision.md §7): each <|media_pad|> token, one per image in order,
// becomes as many positions as the image has rows, and the rows go to the model as InputRows.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/input_rows.h"
#include "vision/encoder.h"

namespace k3::vision {

struct PromptImage {
  int64_t at = 0;  // first position of the image's rows in the prompt
  std::shared_ptr<const ImageRows> rows;
};

struct ImagePrompt {
  std::vector<int32_t> ids;
  std::vector<PromptImage> images;
  int64_t image_rows() const;
};

// Throws k3::Error unless ids hold exactly images.size() pad tokens.
ImagePrompt expand_media_pads(const std::vector<int32_t>& ids, int32_t pad_id,
                              const std::vector<std::shared_ptr<const ImageRows>>& images);

// The InputRows of the images, with positions relative to prompt index `begin` (for a segment or
// prompt chunk starting there; the model ignores what falls outside it).
void input_rows(const std::vector<PromptImage>& images, int64_t begin, std::vector<model::InputRows>& out);

}  // namespace k3::vision
