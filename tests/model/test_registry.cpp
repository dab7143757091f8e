// Hyperparameters and the tensor registry: the released K3 shapes and counts of gguf-contract.md
// §5-§6, strict key types, consistency rules, metadata round trip.
#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "model/hparams.h"
#include "model/registry.h"
#include "model/synthetic.h"

using namespace k3;
using namespace k3::model;

namespace {

HParams k3_released() {
  HParams hp;
  const uint32_t L = 93;
  hp.n_ctx_train = 1048576, hp.n_embd = 7168, hp.n_layer = L, hp.n_vocab = 163840;
  hp.n_head.assign(L, 96);
  hp.n_head_kv = k3_layer_schedule(L);
  hp.n_ff.assign(L, 33792);
  hp.rms_eps = 1e-5f;
  hp.n_embd_head_k_mla = 192, hp.n_embd_head_v_mla = 128, hp.q_lora_rank = 1536, hp.kv_lora_rank = 512, hp.n_rot = 64;
  hp.ssm_d_conv = 4, hp.kda_head_dim = 128, hp.kda_gate_lb = -5.0f;
  hp.n_expert = 896;
  hp.n_expert_used.assign(L, 16);
  hp.n_ff_exp.assign(L, 3072);
  hp.n_expert_shared = 2, hp.n_layer_dense_lead = 1, hp.expert_weights_scale = 1.0f, hp.expert_weights_norm = true;
  hp.gating = Gating::Sigmoid, hp.n_embd_latent = 3584, hp.n_group_used = 1;
  hp.attn_res_block = 12, hp.situ_beta = 4.0f, hp.situ_linear_beta = 25.0f;
  hp.validate();
  return hp;
}

TEST(Registry, ReleasedScheduleAndCounts) {
  const HParams hp = k3_released();
  std::vector<uint32_t> mla;
  for (uint32_t il = 0; il < hp.n_layer; ++il)
    if (hp.attn_kind(il) == AttnKind::MLA) mla.push_back(il);
  std::vector<uint32_t> want;
  for (uint32_t il = 3; il < 93; il += 4) want.push_back(il);
  want.push_back(92);
  EXPECT_EQ(mla, want);
  EXPECT_EQ(hp.count(AttnKind::KDA), 69u);
  EXPECT_EQ(tensor_count(hp), 2573u);  // gguf-contract.md §6

  std::map<TypeRule, int> by_rule;
  std::map<std::string, Shape> shapes;
  for_each_tensor(hp, [&](const TensorRef& r) {
    ++by_rule[r.def.types];
    shapes[r.name] = r.shape;
  });
  EXPECT_EQ(by_rule[TypeRule::KeepF32] + by_rule[TypeRule::Router], 1112);  // the converter's F32 tensors
  EXPECT_EQ(by_rule[TypeRule::Router], 92);
  EXPECT_EQ(by_rule[TypeRule::Experts], 276);
  EXPECT_EQ(by_rule[TypeRule::Matrix], 1185);
  EXPECT_EQ(shapes["blk.3.attn_k_b.weight"].str(), "[128, 512, 96]");
  EXPECT_EQ(shapes["blk.3.attn_v_b.weight"].str(), "[512, 128, 96]");
  EXPECT_EQ(shapes["blk.3.attn_q_b.weight"].str(), "[1536, 18432]");
  EXPECT_EQ(shapes["blk.3.attn_kv_a_mqa.weight"].str(), "[7168, 576]");
  EXPECT_EQ(shapes["blk.0.ssm_conv1d_q.weight"].str(), "[4, 1, 12288, 1]");
  EXPECT_EQ(shapes["blk.0.ssm_a"].str(), "[96]");
  EXPECT_EQ(shapes["blk.0.ffn_down.weight"].str(), "[33792, 7168]");
  EXPECT_EQ(shapes["blk.1.ffn_gate_exps.weight"].str(), "[3584, 3072, 896]");
  EXPECT_EQ(shapes["blk.1.ffn_down_exps.weight"].str(), "[3072, 3584, 896]");
  EXPECT_EQ(shapes["blk.1.ffn_gate_shexp.weight"].str(), "[7168, 6144]");
  EXPECT_EQ(shapes["blk.92.attn_gate.weight"].str(), "[7168, 12288]");
  EXPECT_EQ(shapes.count("blk.0.ffn_gate_inp.weight"), 0u);  // layer 0 is dense
  EXPECT_EQ(shapes.count("blk.3.ssm_a"), 0u);                // layer 3 is MLA
}

TEST(Registry, HfNamesAndTransforms) {
  size_t n = 0;
  const TensorDef* defs = tensor_defs(&n);
  int fused = 0, split = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NE(defs[i].hf, nullptr);
    fused += defs[i].transform == Transform::FuseScore;
    split += defs[i].transform == Transform::SplitKb || defs[i].transform == Transform::SplitVb;
  }
  EXPECT_EQ(fused, 3);
  EXPECT_EQ(split, 2);
}

TEST(Registry, FallbackTypes) {
  EXPECT_EQ(fallback_type(GgmlType::Q4_K, 128), GgmlType::Q5_0);
  EXPECT_EQ(fallback_type(GgmlType::Q2_K, 128), GgmlType::Q4_0);
  EXPECT_EQ(fallback_type(GgmlType::Q6_K, 128), GgmlType::Q8_0);
  EXPECT_EQ(fallback_type(GgmlType::Q4_K, 512), GgmlType::Q4_K);
  EXPECT_EQ(fallback_type(GgmlType::Q8_0, 48), GgmlType::F16);
  // docs/formats.md: llama-quantize's Q4_0 for the 2-bit and ternary types, IQ4_NL for IQ3; k3's
  // Q4_0 for Q1_0 and MXFP4 for NVFP4 (llama-quantize has none); F16 where the fallback fits no better.
  for (GgmlType t : {GgmlType::Q2_0, GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::Q1_0})
    EXPECT_EQ(fallback_type(t, 96), GgmlType::Q4_0) << type_name(t);
  EXPECT_EQ(fallback_type(GgmlType::Q1_0, 128), GgmlType::Q1_0);
  EXPECT_EQ(fallback_type(GgmlType::IQ3_XXS, 160), GgmlType::IQ4_NL);
  EXPECT_EQ(fallback_type(GgmlType::IQ3_S, 128), GgmlType::IQ4_NL);
  EXPECT_EQ(fallback_type(GgmlType::NVFP4, 96), GgmlType::MXFP4);
  EXPECT_EQ(fallback_type(GgmlType::NVFP4, 64), GgmlType::NVFP4);
  EXPECT_EQ(fallback_type(GgmlType::NVFP4, 48), GgmlType::F16);
  size_t n = 0;
  const TensorDef* defs = tensor_defs(&n);
  std::string why;
  EXPECT_FALSE(type_allowed(defs[1], GgmlType::F16, 64, &why));  // a score vector must stay F32
  EXPECT_NE(why.find("must be f32"), std::string::npos);
  EXPECT_FALSE(type_allowed(defs[0], GgmlType::Q8_0, 48, &why));
  EXPECT_NE(why.find("block size"), std::string::npos);
}

gguf::Metadata tiny_meta() {
  gguf::Metadata m;
  synth_hparams(synth_preset("tiny")).to_metadata(m);
  return m;
}

void expect_error(const gguf::Metadata& m, const std::string& needle) {
  try {
    HParams::from_metadata(m);
    ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HParams, MetadataRoundTrip) {
  const HParams a = synth_hparams(synth_preset("small"));
  gguf::Metadata m;
  a.to_metadata(m);
  const HParams b = HParams::from_metadata(m);
  EXPECT_EQ(a.n_head_kv, b.n_head_kv);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.summary(), b.summary());
  EXPECT_EQ(b.kda_gate_lb.value_or(0), -5.0f);
  EXPECT_EQ(m.find("kimi-k3.attention.head_count_kv")->type, gguf::ValueType::ARRAY);
  EXPECT_EQ(m.find("kimi-k3.context_length")->type, gguf::ValueType::UINT32);
}

TEST(HParams, StrictTypesAndConsistency) {
  {
    auto m = tiny_meta();
    m.set("kimi-k3.context_length", gguf::Value::i32(4096));
    expect_error(m, "kimi-k3.context_length");
  }
  {
    auto m = tiny_meta();
    m.set("kimi-k3.attention.layer_norm_rms_epsilon", gguf::Value::u32(1));
    expect_error(m, "layer_norm_rms_epsilon");
  }
  {
    auto m = tiny_meta();  // schedule array shorter than block_count
    gguf::Array a;
    a.elem = gguf::ValueType::INT32;
    a.data = std::vector<int32_t>{0, 0, 0, 1};
    m.set("kimi-k3.attention.head_count_kv", gguf::Value::array(a));
    expect_error(m, "head_count_kv");
  }
  {
    auto m = tiny_meta();
    m.set("kimi-k3.expert_used_count", gguf::Value::u32(99));
    expect_error(m, "expert_used_count");
  }
  {
    auto m = tiny_meta();
    m.set("kimi-k3.expert_gating_func", gguf::Value::u32(4));
    expect_error(m, "expert_gating_func");
  }
  {
    auto m = tiny_meta();
    m.set("kimi-k3.attention.key_length", gguf::Value::u32(7));
    expect_error(m, "key_length");
  }
  {
    auto m = tiny_meta();
    m.erase("kimi-k3.kda.head_dim");
    expect_error(m, "kda.head_dim");
  }
  {
    auto m = tiny_meta();
    m.set("general.architecture", gguf::Value::str("llama"));
    expect_error(m, "general.architecture");
  }
  {
    auto m = tiny_meta();
    m.set("kimi-k3.block_count", gguf::Value::u32(0));
    expect_error(m, "block_count");
  }
}

}  // namespace
