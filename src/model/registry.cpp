#include "model/registry.h"

#include <set>

#include "common/error.h"

namespace k3::model {

std::string Shape::str() const {
  std::string s = "[";
  for (uint32_t i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

bool Shape::operator==(const Shape& o) const {
  for (int i = 0; i < 4; ++i)
    if (ne[i] != o.ne[i]) return false;
  return true;  // trailing 1s are equal whatever n_dims says (conv may be 3-D or 4-D)
}

static Shape S(int64_t a) { return Shape{1, {a, 1, 1, 1}}; }
static Shape S(int64_t a, int64_t b) { return Shape{2, {a, b, 1, 1}}; }
static Shape S(int64_t a, int64_t b, int64_t c) { return Shape{3, {a, b, c, 1}}; }
static Shape S(int64_t a, int64_t b, int64_t c, int64_t d) { return Shape{4, {a, b, c, d}}; }

static constexpr Cut kWhole{}, kRows1{Cut::Rows, 1}, kHeads0{Cut::Heads, 0}, kHeads1{Cut::Heads, 1},
    kHeads2{Cut::Heads, 2};

using HP = const HParams&;
using W = Weights;
using LW = LayerWeights;
#define L "model.layers.%u."

// clang-format off
static const TensorDef kDefs[] = {
  // ---- global (before the layers) ----
  {"token_embd.weight", "model.embed_tokens.weight", Scope::Global, When::Always, TypeRule::Matrix, Transform::None, kRows1,
   [](HP hp, uint32_t) { return S(hp.n_embd, hp.n_vocab); }, &W::token_embd},

  // ---- every layer: attention side ----
  {"blk.%u.attn_res_score.weight", L "self_attention_res_norm.weight+" L "self_attention_res_proj.weight",
   Scope::Layer, When::AttnRes, TypeRule::KeepF32, Transform::FuseScore, kWhole, [](HP hp, uint32_t) { return S(hp.n_embd); }, nullptr, &LW::attn_res_score},
  {"blk.%u.attn_norm.weight", L "input_layernorm.weight", Scope::Layer, When::Always, TypeRule::KeepF32, Transform::ToF32, kWhole,
   [](HP hp, uint32_t) { return S(hp.n_embd); }, nullptr, &LW::attn_norm},

  // ---- KDA (model.md §4.3) ----
  {"blk.%u.attn_q.weight", L "self_attn.q_proj.weight", Scope::KDA, When::Always, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.d_inner(il)); }, nullptr, &LW::wq},
  {"blk.%u.attn_k.weight", L "self_attn.k_proj.weight", Scope::KDA, When::Always, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.d_inner(il)); }, nullptr, &LW::wk},
  {"blk.%u.attn_v.weight", L "self_attn.v_proj.weight", Scope::KDA, When::Always, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.d_inner(il)); }, nullptr, &LW::wv},
  {"blk.%u.ssm_conv1d_q.weight", L "self_attn.q_conv1d.weight", Scope::KDA, When::Always, TypeRule::KeepF32, Transform::ReshapeConv, kHeads2,
   [](HP hp, uint32_t il) { return S(hp.ssm_d_conv, 1, hp.d_inner(il), 1); }, nullptr, &LW::conv_q},
  {"blk.%u.ssm_conv1d_k.weight", L "self_attn.k_conv1d.weight", Scope::KDA, When::Always, TypeRule::KeepF32, Transform::ReshapeConv, kHeads2,
   [](HP hp, uint32_t il) { return S(hp.ssm_d_conv, 1, hp.d_inner(il), 1); }, nullptr, &LW::conv_k},
  {"blk.%u.ssm_conv1d_v.weight", L "self_attn.v_conv1d.weight", Scope::KDA, When::Always, TypeRule::KeepF32, Transform::ReshapeConv, kHeads2,
   [](HP hp, uint32_t il) { return S(hp.ssm_d_conv, 1, hp.d_inner(il), 1); }, nullptr, &LW::conv_v},
  {"blk.%u.ssm_f_a.weight", L "self_attn.f_a_proj.weight", Scope::KDA, When::Always, TypeRule::Matrix, Transform::None, kWhole,
   [](HP hp, uint32_t) { return S(hp.n_embd, hp.kda_head_dim); }, nullptr, &LW::f_a},
  {"blk.%u.ssm_f_b.weight", L "self_attn.f_b_proj.weight", Scope::KDA, When::Always, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.kda_head_dim, hp.d_inner(il)); }, nullptr, &LW::f_b},
  {"blk.%u.ssm_dt.bias", L "self_attn.dt_bias", Scope::KDA, When::Always, TypeRule::KeepF32, Transform::ToF32, kHeads0,
   [](HP hp, uint32_t il) { return S(hp.d_inner(il)); }, nullptr, &LW::dt_bias},
  {"blk.%u.ssm_a", L "self_attn.A_log", Scope::KDA, When::Always, TypeRule::KeepF32, Transform::NegExpALog, kHeads0,
   [](HP hp, uint32_t il) { return S(hp.n_head[il]); }, nullptr, &LW::ssm_a},
  {"blk.%u.ssm_beta.weight", L "self_attn.b_proj.weight", Scope::KDA, When::Always, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.n_head[il]); }, nullptr, &LW::beta},
  {"blk.%u.ssm_g.weight", L "self_attn.g_proj.weight", Scope::KDA, When::Always, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.d_inner(il)); }, nullptr, &LW::ssm_g},
  {"blk.%u.ssm_norm.weight", L "self_attn.o_norm.weight", Scope::KDA, When::Always, TypeRule::KeepF32, Transform::ToF32, kWhole,
   [](HP hp, uint32_t) { return S(hp.kda_head_dim); }, nullptr, &LW::ssm_norm},
  {"blk.%u.attn_output.weight", L "self_attn.o_proj.weight", Scope::KDA, When::Always, TypeRule::Matrix, Transform::None, kRows1,
   [](HP hp, uint32_t il) { return S(hp.d_inner(il), hp.n_embd); }, nullptr, &LW::wo},

  // ---- MLA (model.md §4.4) ----
  {"blk.%u.attn_q_a_norm.weight", L "self_attn.q_a_layernorm.weight", Scope::MLA, When::QLora, TypeRule::KeepF32, Transform::ToF32, kWhole,
   [](HP hp, uint32_t) { return S(hp.q_lora_rank); }, nullptr, &LW::q_a_norm},
  {"blk.%u.attn_q_a.weight", L "self_attn.q_a_proj.weight", Scope::MLA, When::QLora, TypeRule::Matrix, Transform::None, kWhole,
   [](HP hp, uint32_t) { return S(hp.n_embd, hp.q_lora_rank); }, nullptr, &LW::q_a},
  {"blk.%u.attn_q_b.weight", L "self_attn.q_b_proj.weight", Scope::MLA, When::QLora, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.q_lora_rank, hp.n_head[il] * hp.n_embd_head_k_mla); }, nullptr, &LW::q_b},
  {"blk.%u.attn_q.weight", L "self_attn.q_proj.weight", Scope::MLA, When::NoQLora, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.n_head[il] * hp.n_embd_head_k_mla); }, nullptr, &LW::wq},
  {"blk.%u.attn_kv_a_mqa.weight", L "self_attn.kv_a_proj_with_mqa.weight", Scope::MLA, When::Always, TypeRule::Matrix, Transform::None, kWhole,
   [](HP hp, uint32_t) { return S(hp.n_embd, hp.mla_row()); }, nullptr, &LW::kv_a},
  {"blk.%u.attn_kv_a_norm.weight", L "self_attn.kv_a_layernorm.weight", Scope::MLA, When::Always, TypeRule::KeepF32, Transform::ToF32, kWhole,
   [](HP hp, uint32_t) { return S(hp.kv_lora_rank); }, nullptr, &LW::kv_a_norm},
  {"blk.%u.attn_k_b.weight", L "self_attn.kv_b_proj.weight", Scope::MLA, When::Always, TypeRule::Matrix, Transform::SplitKb, kHeads2,
   [](HP hp, uint32_t il) { return S(hp.d_nope(), hp.kv_lora_rank, hp.n_head[il]); }, nullptr, &LW::k_b},
  {"blk.%u.attn_v_b.weight", L "self_attn.kv_b_proj.weight", Scope::MLA, When::Always, TypeRule::Matrix, Transform::SplitVb, kHeads2,
   [](HP hp, uint32_t il) { return S(hp.kv_lora_rank, hp.n_embd_head_v_mla, hp.n_head[il]); }, nullptr, &LW::v_b},
  {"blk.%u.attn_gate.weight", L "self_attn.g_proj.weight", Scope::MLA, When::AttnGate, TypeRule::Matrix, Transform::None, kHeads1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.n_head[il] * hp.n_embd_head_v_mla); }, nullptr, &LW::attn_gate},
  {"blk.%u.attn_output.weight", L "self_attn.o_proj.weight", Scope::MLA, When::Always, TypeRule::Matrix, Transform::None, kRows1,
   [](HP hp, uint32_t il) { return S(hp.n_head[il] * hp.n_embd_head_v_mla, hp.n_embd); }, nullptr, &LW::wo},

  // ---- every layer: FFN side ----
  {"blk.%u.ffn_res_score.weight", L "mlp_res_norm.weight+" L "mlp_res_proj.weight", Scope::Layer, When::AttnRes,
   TypeRule::KeepF32, Transform::FuseScore, kWhole, [](HP hp, uint32_t) { return S(hp.n_embd); }, nullptr, &LW::ffn_res_score},
  {"blk.%u.ffn_norm.weight", L "post_attention_layernorm.weight", Scope::Layer, When::Always, TypeRule::KeepF32, Transform::ToF32, kWhole,
   [](HP hp, uint32_t) { return S(hp.n_embd); }, nullptr, &LW::ffn_norm},

  // ---- dense FFN (model.md §4.5) ----
  {"blk.%u.ffn_gate.weight", L "mlp.gate_proj.weight", Scope::Dense, When::Always, TypeRule::Matrix, Transform::None, kRows1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.n_ff[il]); }, nullptr, &LW::ffn_gate},
  {"blk.%u.ffn_up.weight", L "mlp.up_proj.weight", Scope::Dense, When::Always, TypeRule::Matrix, Transform::None, kRows1,
   [](HP hp, uint32_t il) { return S(hp.n_embd, hp.n_ff[il]); }, nullptr, &LW::ffn_up},
  {"blk.%u.ffn_down.weight", L "mlp.down_proj.weight", Scope::Dense, When::Always, TypeRule::Matrix, Transform::None, kRows1,
   [](HP hp, uint32_t il) { return S(hp.n_ff[il], hp.n_embd); }, nullptr, &LW::ffn_down},

  // ---- latent MoE (model.md §4.6) ----
  {"blk.%u.ffn_gate_inp.weight", L "block_sparse_moe.gate.weight", Scope::MoE, When::Always, TypeRule::Router, Transform::ToF32, kRows1,
   [](HP hp, uint32_t) { return S(hp.n_embd, hp.n_expert); }, nullptr, &LW::gate_inp},
  {"blk.%u.exp_probs_b.bias", L "block_sparse_moe.gate.e_score_correction_bias", Scope::MoE, When::Always, TypeRule::KeepF32,
   Transform::ToF32, kWhole, [](HP hp, uint32_t) { return S(hp.n_expert); }, nullptr, &LW::exp_probs_b},
  {"blk.%u.ffn_routed_down.weight", L "block_sparse_moe.routed_expert_down_proj.weight", Scope::MoE, When::Latent,
   TypeRule::Matrix, Transform::None, kRows1, [](HP hp, uint32_t) { return S(hp.n_embd, hp.d_lat()); }, nullptr, &LW::routed_down},
  {"blk.%u.ffn_gate_exps.weight", L "block_sparse_moe.experts.{E}.w1.weight", Scope::MoE, When::Always, TypeRule::Experts,
   Transform::StackExperts, kRows1, [](HP hp, uint32_t il) { return S(hp.d_lat(), hp.n_ff_exp[il], hp.n_expert); }, nullptr, &LW::gate_exps},
  {"blk.%u.ffn_up_exps.weight", L "block_sparse_moe.experts.{E}.w3.weight", Scope::MoE, When::Always, TypeRule::Experts,
   Transform::StackExperts, kRows1, [](HP hp, uint32_t il) { return S(hp.d_lat(), hp.n_ff_exp[il], hp.n_expert); }, nullptr, &LW::up_exps},
  {"blk.%u.ffn_down_exps.weight", L "block_sparse_moe.experts.{E}.w2.weight", Scope::MoE, When::Always, TypeRule::Experts,
   Transform::StackExperts, kRows1, [](HP hp, uint32_t il) { return S(hp.n_ff_exp[il], hp.d_lat(), hp.n_expert); }, nullptr, &LW::down_exps},
  {"blk.%u.ffn_routed_norm.weight", L "block_sparse_moe.routed_expert_norm.weight", Scope::MoE, When::RoutedNorm,
   TypeRule::KeepF32, Transform::ToF32, kWhole, [](HP hp, uint32_t) { return S(hp.d_lat()); }, nullptr, &LW::routed_norm},
  {"blk.%u.ffn_routed_up.weight", L "block_sparse_moe.routed_expert_up_proj.weight", Scope::MoE, When::Latent,
   TypeRule::Matrix, Transform::None, kRows1, [](HP hp, uint32_t) { return S(hp.d_lat(), hp.n_embd); }, nullptr, &LW::routed_up},
  {"blk.%u.ffn_gate_shexp.weight", L "block_sparse_moe.shared_experts.gate_proj.weight", Scope::MoE, When::Shexp,
   TypeRule::Matrix, Transform::None, kRows1, [](HP hp, uint32_t il) { return S(hp.n_embd, hp.n_ff_shexp(il)); }, nullptr, &LW::gate_shexp},
  {"blk.%u.ffn_up_shexp.weight", L "block_sparse_moe.shared_experts.up_proj.weight", Scope::MoE, When::Shexp,
   TypeRule::Matrix, Transform::None, kRows1, [](HP hp, uint32_t il) { return S(hp.n_embd, hp.n_ff_shexp(il)); }, nullptr, &LW::up_shexp},
  {"blk.%u.ffn_down_shexp.weight", L "block_sparse_moe.shared_experts.down_proj.weight", Scope::MoE, When::Shexp,
   TypeRule::Matrix, Transform::None, kRows1, [](HP hp, uint32_t il) { return S(hp.n_ff_shexp(il), hp.n_embd); }, nullptr, &LW::down_shexp},

  // ---- global (after the layers) ----
  {"output_res_score.weight", "model.output_attn_res_norm.weight+model.output_attn_res_proj.weight", Scope::Global,
   When::AttnRes, TypeRule::KeepF32, Transform::FuseScore, kWhole, [](HP hp, uint32_t) { return S(hp.n_embd); }, &W::output_res_score},
  {"output_norm.weight", "model.norm.weight", Scope::Global, When::Always, TypeRule::KeepF32, Transform::ToF32, kWhole,
   [](HP hp, uint32_t) { return S(hp.n_embd); }, &W::output_norm},
  {"output.weight", "lm_head.weight", Scope::Global, When::Always, TypeRule::Matrix, Transform::None, kRows1,
   [](HP hp, uint32_t) { return S(hp.n_embd, hp.n_vocab); }, &W::output},
};
// clang-format on
#undef L

const TensorDef* tensor_defs(size_t* n) {
  *n = std::size(kDefs);
  return kDefs;
}

static bool in_scope(const HParams& hp, Scope s, uint32_t il) {
  switch (s) {
    case Scope::Global: return il == kNoLayer;
    case Scope::Layer: return il != kNoLayer;
    case Scope::KDA: return il != kNoLayer && hp.attn_kind(il) == AttnKind::KDA;
    case Scope::MLA: return il != kNoLayer && hp.attn_kind(il) == AttnKind::MLA;
    case Scope::Dense: return il != kNoLayer && hp.ffn_kind(il) == FfnKind::Dense;
    case Scope::MoE: return il != kNoLayer && hp.ffn_kind(il) == FfnKind::MoE;
  }
  return false;
}

static bool condition(const HParams& hp, When w) {
  switch (w) {
    case When::Always: return true;
    case When::AttnRes: return hp.attn_res();
    case When::QLora: return hp.q_lora();
    case When::NoQLora: return !hp.q_lora();
    case When::AttnGate: return hp.has_attn_gate;
    case When::Latent: return hp.latent();
    case When::RoutedNorm: return hp.latent() && hp.has_routed_norm;
    case When::Shexp: return hp.has_shexp;
  }
  return false;
}

static std::string layer_name(const char* pattern, uint32_t il) {
  return il == kNoLayer ? std::string(pattern) : strprintf(pattern, il);
}

void for_each_tensor(const HParams& hp, const std::function<void(const TensorRef&)>& fn) {
  const size_t n = std::size(kDefs);
  size_t first_layer = 0;
  while (first_layer < n && kDefs[first_layer].scope == Scope::Global) ++first_layer;
  auto visit = [&](const TensorDef& d, uint32_t il) {
    if (!in_scope(hp, d.scope, il) || !condition(hp, d.when)) return;
    fn(TensorRef{d, il, layer_name(d.gguf, il), d.shape(hp, il == kNoLayer ? 0 : il)});
  };
  for (size_t i = 0; i < first_layer; ++i) visit(kDefs[i], kNoLayer);
  for (uint32_t il = 0; il < hp.n_layer; ++il)
    for (size_t i = first_layer; i < n; ++i)
      if (kDefs[i].scope != Scope::Global) visit(kDefs[i], il);
  for (size_t i = first_layer; i < n; ++i)
    if (kDefs[i].scope == Scope::Global) visit(kDefs[i], kNoLayer);
}

size_t tensor_count(const HParams& hp) {
  size_t c = 0;
  for_each_tensor(hp, [&](const TensorRef&) { ++c; });
  return c;
}

bool type_allowed(const TensorDef& def, GgmlType t, int64_t ne0, std::string* why) {
  const TypeInfo& ti = type_info(t);
  if (def.types == TypeRule::KeepF32) {
    if (t == GgmlType::F32) return true;
    if (why)
      *why = strprintf("has type %s, must be f32 (kimi-k3 applies it element-wise%s, which llama.cpp computes only in f32)",
                       ti.name, def.transform == Transform::ReshapeConv ? " in the short convolution" : "");
    return false;
  }
  if (!ti.computable || t == GgmlType::Q8_1 || t == GgmlType::Q8_K) {  // Q8_1/Q8_K: activation formats only
    if (why) *why = strprintf("has type %s, which k3 cannot compute", ti.name);
    return false;
  }
  if (ne0 % ti.block != 0) {
    if (why) *why = strprintf("has type %s but its row length %lld is not a multiple of the block size %lld", ti.name,
                              static_cast<long long>(ne0), static_cast<long long>(ti.block));
    return false;
  }
  return true;
}

// llama-quantize's fallbacks; it has none for Q1_0 and NVFP4 (it stops there), k3 gives them the
// nearest type that fits more rows: Q4_0 (as Q2_0), MXFP4 (the same E2M1 codes per 32).
GgmlType fallback_type(GgmlType want, int64_t ne0) {
  auto fits = [&](GgmlType t) { return ne0 % type_info(t).block == 0; };
  if (fits(want)) return want;
  GgmlType fb = GgmlType::F16;
  switch (want) {
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q2_0: case GgmlType::TQ1_0: case GgmlType::TQ2_0:
    case GgmlType::Q1_0: fb = GgmlType::Q4_0; break;
    case GgmlType::NVFP4: fb = GgmlType::MXFP4; break;
    case GgmlType::Q4_K: fb = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: fb = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: fb = GgmlType::Q8_0; break;
    case GgmlType::IQ4_XS: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::IQ1_S: case GgmlType::IQ1_M:
      fb = GgmlType::IQ4_NL; break;
    default: break;
  }
  return fits(fb) ? fb : GgmlType::F16;
}

// A presence feature is on if any layer of its scope has the tensor.
static bool probe(const gguf::Model& file, const HParams& hp, const char* pattern, Scope scope) {
  for (uint32_t il = 0; il < hp.n_layer; ++il)
    if (in_scope(hp, scope, il) && file.find(strprintf(pattern, il))) return true;
  return false;
}

static const char* scope_name(Scope s) {
  switch (s) {
    case Scope::Global: return "global";
    case Scope::Layer: return "layer";
    case Scope::KDA: return "KDA layer";
    case Scope::MLA: return "MLA layer";
    case Scope::Dense: return "dense FFN layer";
    case Scope::MoE: return "MoE layer";
  }
  return "?";
}

// Whether `where` holds tensor r: the layers of its stage, token_embd on the first stage and the
// head (output_res_score, output_norm, output) on the last.
static bool held(const TensorRef& r, const HParams& hp, const Placement& where) {
  if (r.il != kNoLayer) return stage_layers(hp.n_layer, where).has(r.il);
  return r.def.global == &Weights::token_embd ? where.stage == 0 : where.stage == where.n_stages - 1;
}

// Narrows t (the whole tensor) to the share of `where` that the table entry's cut gives it; a
// tensor already cut to it (`stored`, a file of that share) keeps its bytes.
static void cut(Tensor& t, const TensorRef& r, const HParams& hp, const Placement& where, const std::string& path,
                bool stored) {
  const Cut c = r.def.cut;
  if (c.kind == Cut::Whole || where.tp_size == 1) return;
  const int a = c.axis;
  const int64_t n = r.shape.ne[a];
  const int64_t unit = c.kind == Cut::Heads ? n / hp.n_head[r.il] : 1;
  if (unit <= 0 || n % unit != 0)
    fail("%s: tensor '%s' has %lld values on axis %d, not a whole number per head (%u heads)", path.c_str(),
         r.name.c_str(), static_cast<long long>(n), a, hp.n_head[r.il]);
  const int64_t units = n / unit;
  const int64_t b = share_begin(units, where.tp_size, where.tp_rank) * unit;
  const int64_t e = share_begin(units, where.tp_size, where.tp_rank + 1) * unit;
  size_t stride = t.row_bytes();  // bytes per index of the cut axis
  if (a == 0) {
    K3_ASSERT(t.type == GgmlType::F32);
    stride = sizeof(float);
  }
  for (int i = 1; i < a; ++i) stride *= static_cast<size_t>(t.ne[i]);
  for (int i = a + 1; i < 4; ++i) K3_ASSERT(t.ne[i] == 1 || (a == 1 && i == 2));  // a byte range, or rows of a stack
  t.first = b;
  if (stored) {
    if (t.ne[a] != e - b)
      fail("%s: tensor '%s' holds %lld of its %lld values on axis %d; this process's share is %lld", path.c_str(),
           r.name.c_str(), static_cast<long long>(t.ne[a]), static_cast<long long>(n), a, static_cast<long long>(e - b));
    return;
  }
  if (a == 1 && t.ne[2] > 1) t.nb2 = static_cast<size_t>(t.ne[1]) * t.row_bytes();
  t.data += static_cast<size_t>(b) * stride;
  t.ne[a] = e - b;
}

// A file of one process's share (placement.h: k3.share.*) must be the share of `where`.
static bool share_file(const gguf::Model& file, const Placement& where, const std::string& path) {
  const gguf::Metadata& meta = file.meta();
  if (!meta.has(kShareRank)) return false;
  const int rank = static_cast<int>(meta.get_u32(kShareRank)), n = static_cast<int>(meta.get_u32(kShareProcesses)),
            pp = static_cast<int>(meta.get_u32(kShareStages));
  if (n < 1 || pp < 1 || n % pp != 0 || rank >= n) fail("%s: bad %s keys", path.c_str(), kShareRank);
  if (placement_of(rank, n, pp) == where) return true;
  if (where.whole())
    fail("%s: holds the share of process %d of %d (k3 split --tp %d%s): start %d processes with mpirun -np %d, each "
         "opens its own file",
         path.c_str(), rank, n, n / pp, pp > 1 ? strprintf(" --pp %d", pp).c_str() : "", n, n);
  fail("%s: holds the share of process %d of %d%s; this is process %d of %d%s", path.c_str(), rank, n,
       pp > 1 ? strprintf(" in %d stages", pp).c_str() : "", where.process(), where.processes(),
       where.n_stages > 1 ? strprintf(" in %d stages", where.n_stages).c_str() : "");
}

Weights bind_weights(const gguf::Model& file, HParams& hp, const Placement& where) {
  const std::string& path = file.files().front()->path();
  hp.has_attn_gate = probe(file, hp, "blk.%u.attn_gate.weight", Scope::MLA);
  hp.has_routed_norm = probe(file, hp, "blk.%u.ffn_routed_norm.weight", Scope::MoE);
  hp.has_shexp = probe(file, hp, "blk.%u.ffn_gate_shexp.weight", Scope::MoE);
  try {
    hp.validate();
  } catch (const Error& e) {
    fail("%s: %s", path.c_str(), e.what());
  }

  Weights w;
  w.layers.resize(hp.n_layer);
  std::set<std::string, std::less<>> consumed;
  const bool shared = share_file(file, where, path);
  for_each_tensor(hp, [&](const TensorRef& r) {
    const gguf::TensorInfo* ti = file.find(r.name);
    const bool here = held(r, hp, where);
    if (!ti && shared && !here) return;  // another stage's
    if (!ti) {
      if (r.il == kNoLayer) fail("%s: missing tensor '%s'", path.c_str(), r.name.c_str());
      fail("%s: missing tensor '%s' (layer %u is a %s)", path.c_str(), r.name.c_str(), r.il, scope_name(r.def.scope));
    }
    Shape got{ti->n_dims, {ti->ne[0], ti->ne[1], ti->ne[2], ti->ne[3]}};
    // a share file holds the whole tensor, or this process's share of its cut axis
    Shape cut_shape = r.shape;
    if (shared && r.def.cut.kind != Cut::Whole) cut_shape.ne[r.def.cut.axis] = got.ne[r.def.cut.axis];
    const bool stored = !(got == r.shape) && got == cut_shape;
    if (!(got == r.shape) && !stored)
      fail("%s: tensor '%s' has shape %s, expected %s", path.c_str(), r.name.c_str(), got.str().c_str(),
           r.shape.str().c_str());
    std::string why;
    if (!type_allowed(r.def, ti->type, ti->ne[0], &why))
      fail("%s: tensor '%s' %s", path.c_str(), r.name.c_str(), why.c_str());
    consumed.insert(r.name);
    if (!here) return;
    Tensor t;
    t.info = ti;
    t.type = ti->type;
    t.data = ti->data;
    for (int i = 0; i < 4; ++i) t.ne[i] = ti->ne[i];
    t.rows = r.shape.ne[1];
    cut(t, r, hp, where, path, stored);
    if (r.il == kNoLayer)
      w.*(r.def.global) = t;
    else
      w.layers[r.il].*(r.def.layer) = t;
  });
  auto printable = [](const std::string& n) {
    std::string o;
    for (unsigned char c : n.substr(0, 80)) o += (c >= 0x20 && c < 0x7f) ? std::string(1, c) : strprintf("\\x%02x", c);
    return o;
  };
  for (const gguf::TensorInfo* ti : file.tensors())
    if (!consumed.count(ti->name))
      fail("%s: unexpected tensor '%s' (not part of a kimi-k3 model with these hyperparameters; %zu expected, file "
           "has %zu)",
           path.c_str(), printable(ti->name).c_str(), consumed.size(), file.tensors().size());
  return w;
}

}  // namespace k3::model
