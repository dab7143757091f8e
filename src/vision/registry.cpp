#include "vision/registry.h"

#include "common/error.h"

namespace k3::vision {

void for_each_vision_tensor(const VisionHParams& hp, const std::function<void(const VTensor&)>& fn) {
  const int64_t C = hp.n_embd, Q = hp.qkv_width(), F = hp.n_ff, p = hp.patch;
  const int64_t M = hp.merged_width(), P = hp.proj_hidden, D = hp.n_proj;
  auto emit = [&](std::string name, std::string hf, std::vector<int64_t> ne, bool matrix, int layer = -1,
                  VTransform xf = VTransform::Copy) {
    fn(VTensor{std::move(name), std::move(hf), std::move(ne), xf, matrix, layer});
  };
  emit("v.patch_embd.weight", "vision_tower.patch_embed.proj.weight", {p, p, 3, C}, false);
  emit("v.position_embd.weight", "vision_tower.patch_embed.pos_emb.weight", {C, hp.pos_w, hp.pos_h}, false);
  for (uint32_t i = 0; i < hp.n_layer; ++i) {
    const int il = static_cast<int>(i);
    const std::string g = strprintf("v.blk.%u.", i), h = strprintf("vision_tower.encoder.blocks.%u.", i);
    emit(g + "ln1.weight", h + "norm0.weight", {C}, false, il);
    emit(g + "attn_qkv.weight", h + "wqkv.weight", {C, 3 * Q}, true, il, VTransform::PermuteQK);
    emit(g + "attn_out.weight", h + "wo.weight", {Q, C}, true, il);
    emit(g + "ln2.weight", h + "norm1.weight", {C}, false, il);
    emit(g + "ffn_up.weight", h + "mlp.fc0.weight", {C, F}, true, il);
    emit(g + "ffn_down.weight", h + "mlp.fc1.weight", {F, C}, true, il);
  }
  emit("v.post_ln.weight", "vision_tower.encoder.final_layernorm.weight", {C}, false);
  emit("mm.1.weight", "mm_projector.proj.0.weight", {M, P}, true);
  emit("mm.2.weight", "mm_projector.proj.2.weight", {P, D}, true);
  emit("mm.post_norm.weight", "mm_projector.post_norm.weight", {D}, false);
}

bool is_vision_tensor_name(const std::string& name) { return name.starts_with("v.") || name.starts_with("mm."); }

bool is_vision_source_name(const std::string& name) {
  for (const char* p : {"vision_tower.", "mm_projector.", "multi_modal_projector.", "vision_model."})
    if (name.starts_with(p)) return true;
  return false;
}

int64_t qkv_source_row(int64_t row, const VisionHParams& hp) {
  const int64_t Q = hp.qkv_width(), D = hp.head_dim;
  if (row >= 2 * Q) return row;  // V
  const int64_t part = row / Q * Q, in_part = row % Q;
  const int64_t h = in_part / D, j = in_part % D;
  const int64_t s = j / (D / 2), rest = j % (D / 2), i = rest / 2, c = rest % 2;
  return part + h * D + 4 * i + 2 * s + c;
}

}  // namespace k3::vision
