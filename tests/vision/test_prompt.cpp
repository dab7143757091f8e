// Image geometry (vision.md §4.2), the patch rows, and the image rows' way into a prompt: each
// <|media_pad|> becomes the image's n_tokens positions, InputRows per chunk.
#include <gtest/gtest.h>

#include "vision/preprocess.h"
#include "vision/prompt.h"

namespace k3::vision {
namespace {

VisionHParams hp_limit(uint32_t limit) {
  VisionHParams hp;
  hp.in_patch_limit = limit;
  return hp;
}

TEST(VisionGeometry, NeverEnlargesAndPadsToMergeCells) {
  const Geometry g = plan_geometry(100, 30, hp_limit(65536));
  EXPECT_EQ(g.rw, 100u);
  EXPECT_EQ(g.rh, 30u);
  EXPECT_EQ(g.grid_w, 8u);  // 112 / 14
  EXPECT_EQ(g.grid_h, 4u);  // 56 / 14
  EXPECT_EQ(g.n_tokens(2), 8);
  const Geometry one = plan_geometry(1, 1, hp_limit(65536));
  EXPECT_EQ(one.grid_w, 2u);
  EXPECT_EQ(one.n_tokens(2), 1);
}

TEST(VisionGeometry, PatchLimitAndMaxSide) {
  // 1024 x 1024 = 73 x 73 patches; limit 1024 -> s = sqrt(1024 / 5329)
  const Geometry g = plan_geometry(1024, 1024, hp_limit(1024));
  EXPECT_EQ(g.rw, 448u);
  EXPECT_EQ(g.rh, 448u);
  // wider than 7168 pixels: scaled to that side
  const Geometry w = plan_geometry(10000, 20, hp_limit(65536));
  EXPECT_EQ(w.rw, 7168u);
  EXPECT_EQ(w.rh, 14u);
}

TEST(VisionGeometry, MaxTokensHoldsForEveryShape) {
  for (auto [w, h] : {std::pair<uint32_t, uint32_t>{1024, 1024}, {4000, 30}, {30, 4000}, {333, 777}, {1, 9000}})
    for (uint32_t t : {1u, 3u, 40u, 256u}) {
      const Geometry g = plan_geometry(w, h, hp_limit(65536), t);
      EXPECT_LE(g.n_tokens(2), t) << w << "x" << h << " max " << t;
      EXPECT_GE(g.rw, 1u);
    }
}

TEST(VisionPatches, NormalisedRowsInKernelOrder) {
  VisionHParams hp = hp_limit(65536);
  Image im;
  im.width = 3, im.height = 2;
  im.rgb = {0, 255, 51, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150};
  const Geometry g = plan_geometry(3, 2, hp);
  std::vector<float> p;
  patchify(im, g, hp, p);
  ASSERT_EQ(p.size(), 4u * 588);
  EXPECT_FLOAT_EQ(p[0], -1.0f);                      // R of (0, 0) = 0
  EXPECT_FLOAT_EQ(p[196], 1.0f);                     // G of (0, 0) = 255
  EXPECT_FLOAT_EQ(p[392], (51 / 255.0f - 0.5f) / 0.5f);
  EXPECT_FLOAT_EQ(p[14 + 1], (100 / 255.0f - 0.5f) / 0.5f);  // R of (x 1, y 1)
  EXPECT_FLOAT_EQ(p[3], -1.0f);                      // padding is black
  EXPECT_FLOAT_EQ(p[588 + 5], -1.0f);
}

std::shared_ptr<const ImageRows> rows(int64_t n, float v) {
  auto r = std::make_shared<ImageRows>();
  r->n_tokens = n, r->n_embd = 2;
  r->rows.assign(n * 2, v);
  return r;
}

TEST(VisionPrompt, PadsBecomeImageRows) {
  const int32_t pad = 21;
  const ImagePrompt p = expand_media_pads({5, 21, 6, 7, 21, 8}, pad, {rows(3, 1), rows(2, 2)});
  EXPECT_EQ(p.ids, (std::vector<int32_t>{5, 21, 21, 21, 6, 7, 21, 21, 8}));
  ASSERT_EQ(p.images.size(), 2u);
  EXPECT_EQ(p.images[0].at, 1);
  EXPECT_EQ(p.images[1].at, 6);
  EXPECT_EQ(p.image_rows(), 5);
  std::vector<model::InputRows> in;
  input_rows(p.images, 4, in);
  EXPECT_EQ(in[0].at, -3);
  EXPECT_EQ(in[1].at, 2);
  EXPECT_EQ(in[1].n, 2);
  EXPECT_EQ(in[1].data[0], 2.0f);
  EXPECT_THROW(expand_media_pads({5, 21, 21}, pad, {rows(3, 1)}), Error);
  EXPECT_THROW(expand_media_pads({5, 6}, pad, {rows(3, 1)}), Error);
}

}  // namespace
}  // namespace k3::vision
