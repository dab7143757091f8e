#include "vision/prompt.h"

#include "common/error.h"

namespace k3::vision {

int64_t ImagePrompt::image_rows() const {
  int64_t n = 0;
  for (const PromptImage& im : images) n += im.rows->n_tokens;
  return n;
}

ImagePrompt expand_media_pads(const std::vector<int32_t>& ids, int32_t pad_id,
                              const std::vector<std::shared_ptr<const ImageRows>>& images) {
  size_t pads = 0;
  for (int32_t id : ids) pads += id == pad_id;
  if (pads != images.size())
    fail("the prompt holds %zu <|media_pad|> tokens for %zu images (image placeholders must come only from image "
         "parts)",
         pads, images.size());
  ImagePrompt p;
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != pad_id) {
      p.ids.push_back(id);
      continue;
    }
    const auto& im = images[next++];
    p.images.push_back({static_cast<int64_t>(p.ids.size()), im});
    p.ids.insert(p.ids.end(), static_cast<size_t>(im->n_tokens), pad_id);
  }
  return p;
}

void input_rows(const std::vector<PromptImage>& images, int64_t begin, std::vector<model::InputRows>& out) {
  out.clear();
  for (const PromptImage& im : images) out.push_back({im.at - begin, im.rows->n_tokens, im.rows->rows.data()});
}

}  // namespace k3::vision
