#include "model/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/synth_rng.h"
#include "gguf/writer.h"
#include "model/registry.h"
#include "model/synth_vocab.h"
#include "tensor/fp16.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"
#include "tensor/threadpool.h"
#include "tokenizer/vocab.h"

namespace k3::model {

SynthOptions synth_preset(const std::string& preset) {
  SynthOptions o;  // defaults = tiny
  if (preset == "tiny") return o;
  if (preset == "small") {
    o.n_layer = 13, o.n_embd = 256, o.n_head = 4, o.head_dim = 64;
    o.q_lora = 128, o.kv_lora = 64, o.qk_nope = 64, o.qk_rope = 32, o.v_head = 64;
    o.n_expert = 16, o.n_expert_used = 4, o.n_ff_exp = 128, o.latent = 128, o.n_shared = 2;
    o.n_ff = 512, o.attn_res_block = 4;
    return o;
  }
  if (preset == "medium") {  // ~3.5 GB with BF16 trunk and MXFP4 experts: for benchmarks
    o.n_layer = 13, o.n_embd = 2048, o.n_head = 16, o.head_dim = 128;
    o.q_lora = 512, o.kv_lora = 256, o.qk_nope = 128, o.qk_rope = 64, o.v_head = 128;
    o.n_expert = 128, o.n_expert_used = 8, o.n_ff_exp = 1024, o.latent = 1024, o.n_shared = 2;
    o.n_ff = 8192, o.attn_res_block = 6;
    o.type = GgmlType::BF16, o.expert_type = GgmlType::MXFP4;
    return o;
  }
  if (preset == "k3-slice") {  // Kimi-K3's own widths (model.md §2) with a few layers: real-scale benchmarks
    o.n_layer = 3, o.n_embd = 7168, o.n_head = 96, o.head_dim = 128;
    o.q_lora = 1536, o.kv_lora = 512, o.qk_nope = 128, o.qk_rope = 64, o.v_head = 128;
    o.n_expert = 896, o.n_expert_used = 16, o.n_ff_exp = 3072, o.latent = 3584, o.n_shared = 2;
    o.n_ff = 33792, o.attn_res_block = 12, o.n_vocab = 163840, o.n_ctx = 1048576;
    o.type = GgmlType::Q8_0, o.expert_type = GgmlType::MXFP4;
    return o;
  }
  fail("unknown preset '%s' (tiny, small, medium, k3-slice)", preset.c_str());
}

HParams synth_hparams(const SynthOptions& o) {
  HParams hp;
  const uint32_t L = o.n_layer;
  hp.n_ctx_train = o.n_ctx;
  hp.n_embd = o.n_embd;
  hp.n_layer = L;
  hp.n_vocab = o.n_vocab;
  hp.n_head.assign(L, o.n_head);
  hp.n_head_kv = k3_layer_schedule(L, o.mla_every);
  hp.n_ff.assign(L, o.n_ff);
  hp.rms_eps = o.rms_eps;
  hp.n_embd_head_k_mla = o.qk_nope + o.qk_rope;
  hp.n_embd_head_v_mla = o.v_head;
  hp.q_lora_rank = o.no_q_lora ? 0 : o.q_lora;
  hp.kv_lora_rank = o.kv_lora;
  hp.n_rot = o.qk_rope;
  hp.ssm_d_conv = o.d_conv;
  hp.kda_head_dim = o.head_dim;
  if (!o.softplus_gate) hp.kda_gate_lb = o.gate_lb;
  hp.n_expert = o.n_expert;
  hp.n_expert_used.assign(L, o.n_expert_used);
  hp.n_ff_exp.assign(L, o.n_ff_exp);
  hp.n_expert_shared = o.no_shared ? 0 : o.n_shared;
  hp.n_layer_dense_lead = o.n_dense;
  hp.expert_weights_scale = o.weights_scale;
  hp.expert_weights_norm = o.weights_norm;
  hp.gating = o.softmax_gating ? Gating::Softmax : Gating::Sigmoid;
  hp.n_embd_latent = o.no_latent ? 0 : o.latent;
  hp.n_group_used = 1;
  hp.attn_res_block = o.attn_res_block;
  hp.situ_beta = o.situ_beta;
  hp.situ_linear_beta = o.situ_linear_beta;
  hp.has_attn_gate = !o.no_attn_gate;
  hp.has_routed_norm = hp.latent() && !o.no_routed_norm;
  hp.has_shexp = hp.n_expert_shared > 0;
  hp.validate();
  return hp;
}

GgmlType synth_tensor_type(const SynthOptions& o, const std::string& name, int64_t ne0, TypeRule rule) {
  if (rule == TypeRule::KeepF32) return GgmlType::F32;
  GgmlType t = rule == TypeRule::Router ? GgmlType::F32 : rule == TypeRule::Experts ? o.expert_type : o.type;
  const bool kbvb = name.find("attn_k_b") != std::string::npos || name.find("attn_v_b") != std::string::npos;
  if (kbvb && t != GgmlType::F32) t = GgmlType::BF16;
  for (const auto& [pat, ty] : o.tensor_types)
    if (name.find(pat) != std::string::npos) t = ty;
  return fallback_type(t, ne0);
}

namespace {

using Rng = SynthRng;

bool ends_with(const std::string& s, const char* suf) {
  const size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

// Fills n values (a chunk starting at flat element `off`) of tensor `name` with shape ne.
void init_values(const SynthOptions& o, const HParams& hp, Rng& rng, const std::string& name, const int64_t* ne,
                 float* v, int64_t n) {
  const double fan_in = static_cast<double>(ne[0]);
  auto normal = [&](double mean, double sd) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(mean + sd * rng.normal());
  };
  auto uniform = [&](double lo, double hi) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(lo + (hi - lo) * rng.uniform());
  };
  if (name == "token_embd.weight") return normal(0, 1);
  if (name == "output.weight") return normal(0, 2.0 / std::sqrt(fan_in));
  if (ends_with(name, "_res_score.weight")) return normal(0, 1.0 / std::sqrt(fan_in));
  if (ends_with(name, "norm.weight")) return normal(1.0, 0.1);
  if (ends_with(name, ".ssm_a")) {  // -exp(A_log), A_log ~ U(0, log 4)
    uniform(0.0, std::log(4.0));
    for (int64_t i = 0; i < n; ++i) v[i] = -std::exp(v[i]);
    return;
  }
  if (ends_with(name, "ssm_dt.bias")) return o.softplus_gate ? normal(-2.0, 0.5) : normal(0.0, 0.5);
  if (name.find("ssm_conv1d") != std::string::npos) return normal(0, 1.0 / std::sqrt(fan_in));
  if (ends_with(name, "exp_probs_b.bias")) return normal(0, 0.1);
  (void)hp;
  return normal(0, 1.0 / std::sqrt(fan_in));  // matrices: N(0, 1/fan_in)
}

// nr rows of ne0 floats in `type` (F32/F16/BF16 converted, other types quantized) into out.
void encode_rows(GgmlType type, const float* f, int64_t nr, int64_t ne0, std::vector<uint8_t>& out) {
  const int64_t n = nr * ne0;
  out.resize(row_size(type, ne0) * nr);
  if (type == GgmlType::F32) {
    std::memcpy(out.data(), f, out.size());
  } else if (type == GgmlType::F16 || type == GgmlType::BF16) {
    auto* d = reinterpret_cast<uint16_t*>(out.data());
    for (int64_t j = 0; j < n; ++j) d[j] = type == GgmlType::F16 ? fp32_to_fp16(f[j]) : fp32_to_bf16(f[j]);
  } else {
    // Random weights have no activations to weigh them by: where ggml's quantizer needs an
    // importance matrix (IQ2_XXS, IQ2_XS, IQ1_S), every column weighs the same.
    const std::vector<float> flat(ref::requires_imatrix(type) ? ne0 : 0, 1.0f);
    quantize_rows(type, f, out.data(), nr, ne0, flat.empty() ? nullptr : flat.data());
  }
}

}  // namespace

void write_synthetic(const std::string& path, const SynthOptions& o,
                     const std::function<void(uint64_t, const std::string&)>& progress) {
  const HParams hp = synth_hparams(o);
  gguf::Metadata meta;
  hp.to_metadata(meta);
  meta.set("general.name", gguf::Value::str(o.name));
  meta.set("general.type", gguf::Value::str("model"));
  meta.set("general.quantization_version", gguf::Value::u32(2));
  tok::write_vocab(synth_vocab(o.n_vocab), meta);

  struct Plan {
    std::string name;
    GgmlType type;
    int64_t ne[4];
    uint32_t n_dims;
  };
  std::vector<Plan> plan;
  std::vector<gguf::TensorSpec> specs;
  for_each_tensor(hp, [&](const TensorRef& r) {
    const GgmlType t = synth_tensor_type(o, r.name, r.shape.ne[0], r.def.types);
    std::string why;
    if (!type_allowed(r.def, t, r.shape.ne[0], &why)) fail("make-tiny: tensor '%s' %s", r.name.c_str(), why.c_str());
    if (t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16 && !can_quantize(t))
      fail("make-tiny: cannot write tensor '%s' as %s (no quantizer)", r.name.c_str(), type_name(t));
    plan.push_back({r.name, t, {r.shape.ne[0], r.shape.ne[1], r.shape.ne[2], r.shape.ne[3]}, r.shape.n_dims});
    specs.push_back({r.name, t, std::vector<int64_t>(r.shape.ne, r.shape.ne + r.shape.n_dims)});
  });

  gguf::Writer writer(path, std::move(meta), specs);
  // Whole rows of about kChunk floats per unit of work; a round of up to kRound units is made in
  // parallel, then written in order.
  constexpr int64_t kChunk = 1 << 22;
  ThreadPool pool(o.threads > 0 ? o.threads : ThreadPool::hardware_threads());
  const int64_t kRound = 2 * pool.size();
  struct Unit {
    std::vector<float> f;
    std::vector<uint8_t> out;
  };
  std::vector<Unit> units(static_cast<size_t>(kRound));
  for (const Plan& p : plan) {
    const int64_t ne0 = p.ne[0], rows = p.ne[1] * p.ne[2] * p.ne[3];
    const int64_t rows_per = std::max<int64_t>(1, kChunk / ne0);
    const int64_t n_chunks = (rows + rows_per - 1) / rows_per;
    for (int64_t c0 = 0; c0 < n_chunks; c0 += kRound) {
      const int64_t nc = std::min(kRound, n_chunks - c0);
      pool.chunks(nc, 1, [&](int64_t u0, int64_t u1) {
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t c = c0 + u, r0 = c * rows_per, nr = std::min(rows_per, rows - r0);
          Unit& un = units[static_cast<size_t>(u)];
          un.f.resize(nr * ne0);
          Rng rng(o.seed, p.name, static_cast<uint64_t>(c));
          init_values(o, hp, rng, p.name, p.ne, un.f.data(), nr * ne0);
          encode_rows(p.type, un.f.data(), nr, ne0, un.out);
        }
      });
      for (int64_t u = 0; u < nc; ++u) {
        const Unit& un = units[static_cast<size_t>(u)];
        writer.write(un.out.data(), un.out.size());
        if (progress) progress(un.out.size(), p.name);
      }
    }
  }
  writer.finish();
}

}  // namespace k3::model
