#include "vision/hparams.h"

#include "common/error.h"

namespace k3::vision {

const char* interp_name(PosInterp p) { return p == PosInterp::Bicubic ? "bicubic" : "bilinear"; }

void VisionHParams::validate() const {
  auto need = [](bool ok, const char* what) {
    if (!ok) fail("vision hyperparameters: %s", what);
  };
  need(patch > 0 && patch <= 64, "patch size must be 1..64");
  need(n_embd > 0 && n_head > 0 && n_ff > 0 && n_layer > 0, "widths and the block count must be positive");
  need(head_dim % 4 == 0, "head_dim must be a multiple of 4 (2-D RoPE rotates pairs in two halves)");
  need(pos_h > 0 && pos_w > 0, "the position table must not be empty");
  need(merge == 2, "only a 2 x 2 merge (scale_factor 2) is supported");
  need(proj_hidden > 0 && n_proj > 0, "projector widths must be positive");
  need(eps >= 0 && proj_eps >= 0, "norm epsilons must be >= 0");
  need(rope_theta > 0, "rope_theta must be positive");
  need(in_patch_limit >= 4, "in_patch_limit must be at least 4");
  for (int c = 0; c < 3; ++c) need(std[c] != 0, "image_std must not be 0");
}

void VisionHParams::to_metadata(gguf::Metadata& m) const {
  using gguf::Value;
  auto f3 = [](const float* v) {
    gguf::Array a;
    a.elem = gguf::ValueType::FLOAT32;
    a.data = std::vector<float>(v, v + 3);
    return Value::array(std::move(a));
  };
  m.set("general.architecture", Value::str(kArch));
  m.set("general.type", Value::str("mmproj"));
  m.set("clip.has_vision_encoder", Value::boolean(true));
  m.set("clip.projector_type", Value::str(kProjectorType));
  m.set("clip.vision.image_size", Value::u32(pos_h * patch));
  m.set("clip.vision.patch_size", Value::u32(patch));
  m.set("clip.vision.embedding_length", Value::u32(n_embd));
  m.set("clip.vision.feed_forward_length", Value::u32(n_ff));
  m.set("clip.vision.block_count", Value::u32(n_layer));
  m.set("clip.vision.attention.head_count", Value::u32(n_head));
  m.set("clip.vision.attention.head_dim", Value::u32(head_dim));
  m.set("clip.vision.attention.layer_norm_epsilon", Value::f32(eps));
  m.set("clip.vision.projection_dim", Value::u32(n_proj));
  m.set("clip.vision.projector.scale_factor", Value::u32(merge));
  m.set("clip.vision.image_mean", f3(mean));
  m.set("clip.vision.image_std", f3(std));
  m.set("clip.vision.image_min_pixels", Value::u32(8 * patch * patch));
  m.set("clip.vision.image_max_pixels", Value::u32(in_patch_limit * patch * patch));
  m.set("k3.vision.rope_theta", Value::f32(rope_theta));
  m.set("k3.vision.projector_norm_epsilon", Value::f32(proj_eps));
  m.set("k3.vision.pos_emb_interpolation", Value::str(interp_name(interp)));
  m.set("k3.vision.in_patch_limit", Value::u32(in_patch_limit));
}

VisionHParams VisionHParams::from_metadata(const gguf::Metadata& m) {
  const auto arch = m.get_str_opt("general.architecture");
  if (!arch || *arch != kArch)
    fail("general.architecture is '%s', an mmproj file has '%s'", arch ? arch->c_str() : "(missing)", kArch);
  const auto proj = m.get_str_opt("clip.projector_type");
  if (!proj || *proj != kProjectorType)
    fail("clip.projector_type is '%s'; k3 runs the Kimi-K3 projector '%s'", proj ? proj->c_str() : "(missing)",
         kProjectorType);
  VisionHParams hp;
  hp.patch = m.get_u32("clip.vision.patch_size");
  hp.n_embd = m.get_u32("clip.vision.embedding_length");
  hp.n_ff = m.get_u32("clip.vision.feed_forward_length");
  hp.n_layer = m.get_u32("clip.vision.block_count");
  hp.n_head = m.get_u32("clip.vision.attention.head_count");
  hp.head_dim = m.get_u32("clip.vision.attention.head_dim");
  hp.eps = m.get_f32("clip.vision.attention.layer_norm_epsilon");
  hp.n_proj = m.get_u32("clip.vision.projection_dim");
  hp.merge = m.get_u32_or("clip.vision.projector.scale_factor", 2);
  hp.rope_theta = m.get_f32_or("k3.vision.rope_theta", 10000.0f);
  hp.proj_eps = m.get_f32_or("k3.vision.projector_norm_epsilon", 1e-5f);
  hp.in_patch_limit = m.get_u32_or("k3.vision.in_patch_limit", 65536);
  const std::string interp = m.get_str_opt("k3.vision.pos_emb_interpolation").value_or("bicubic");
  if (interp == "bicubic") hp.interp = PosInterp::Bicubic;
  else if (interp == "bilinear") hp.interp = PosInterp::Bilinear;
  else fail("k3.vision.pos_emb_interpolation is '%s' (bicubic or bilinear)", interp.c_str());
  for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
    if (!m.has(key)) continue;
    const gguf::Array& a = m.get_array(key);
    const auto* v = std::get_if<std::vector<float>>(&a.data);
    if (!v || v->size() != 3) fail("%s must hold 3 float32 values", key);
    std::copy(v->begin(), v->end(), std::string(key).ends_with("mean") ? hp.mean : hp.std);
  }
  return hp;
}

std::string VisionHParams::summary() const {
  return strprintf("MoonViT: %u blocks, width %u, %u heads x %u, MLP %u, patch %u, position table %ux%u (%s), "
                   "merge %ux%u -> %u -> %u -> %u, eps %g / %g",
                   n_layer, n_embd, n_head, head_dim, n_ff, patch, pos_h, pos_w, interp_name(interp), merge, merge,
                   merged_width(), proj_hidden, n_proj, eps, proj_eps);
}

}  // namespace k3::vision
