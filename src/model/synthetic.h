// Random-initialised Kimi-K3 models that keep the real structure (k3 make-tiny, the built-in model
// of `k3 run`, the parity tests): the real layer schedule rule, dense leading layers, AttnRes,
// latent MoE with shared experts, q-LoRA MLA with output gate, KDA gate lower bound, and a small
// byte-level BPE vocabulary. Written tensor by tensor through gguf::Writer.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/hparams.h"
#include "model/registry.h"
#include "tensor/types.h"

namespace k3::model {

struct SynthOptions {
  // shape (every width and count is a make-tiny flag)
  uint32_t n_layer = 9, n_embd = 64, n_head = 2, head_dim = 32, d_conv = 4;
  uint32_t q_lora = 32, kv_lora = 32, qk_nope = 32, qk_rope = 16, v_head = 32;
  uint32_t n_expert = 8, n_expert_used = 2, n_ff_exp = 32, latent = 32, n_shared = 1;
  uint32_t n_ff = 128, n_dense = 1, attn_res_block = 4, n_vocab = 768, n_ctx = 4096;
  uint32_t mla_every = 4;  // MLA on layers with (il+1) % mla_every == 0, plus the last
  float rms_eps = 1e-5f, gate_lb = -5.0f, situ_beta = 4.0f, situ_linear_beta = 25.0f, weights_scale = 1.0f;
  bool softplus_gate = false, no_q_lora = false, no_latent = false, no_attn_gate = false, no_routed_norm = false;
  bool no_shared = false, weights_norm = true, softmax_gating = false;
  // weights
  uint64_t seed = 1;
  GgmlType type = GgmlType::F32;         // 2-D matrices, token_embd and output
  GgmlType expert_type = GgmlType::F32;  // 3-D expert stacks
  // attn_k_b / attn_v_b default to F32 in an F32 model and BF16 otherwise: llama.cpp's AMX buffer
  // mishandles F16/Q8_0 there (model.md §9). Overrides below still apply.
  // Per-tensor overrides applied last: a tensor whose name contains `first` gets `second`.
  std::vector<std::pair<std::string, GgmlType>> tensor_types;
  std::string name = "k3-synthetic";
  int threads = 0;  // generator threads (0: all CPUs); the values do not depend on it
};

// tiny | small | medium | k3-slice (see docs/model.md); throws for another name.
SynthOptions synth_preset(const std::string& preset);
// The hyperparameters the options describe (validated).
HParams synth_hparams(const SynthOptions& o);
// The storage type of one tensor of rule `rule` (after the llama-quantize fallbacks for block
// sizes): KeepF32 tensors are F32; the router is F32 unless an override names it.
GgmlType synth_tensor_type(const SynthOptions& o, const std::string& name, int64_t ne0, TypeRule rule);
// Writes the model (generated on o.threads threads); progress(bytes, tensor) is called after each
// piece written, if set.
void write_synthetic(const std::string& path, const SynthOptions& o,
                     const std::function<void(uint64_t, const std::string&)>& progress = nullptr);

}  // namespace k3::model
