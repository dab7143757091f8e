// The model's weights: views into the memory-mapped GGUF (never copied), one field per tensor of
// model.md §4. Which fields a layer fills is decided by the registry (registry.h) from the
// hyperparameters; unused fields stay empty.
#pragma once
#include <cstdint>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/matmul.h"
#include "tensor/types.h"

namespace k3::model {

// A weight as this process holds it: the whole tensor, or the share the loader cut for it
// (placement.h; ne then counts the share; info describes the file's tensor: the whole one, or the
// share itself in a file of one process's share).
struct Tensor {
  const gguf::TensorInfo* info = nullptr;
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t first = 0;  // index of the first held element of the cut axis (the first vocabulary row, ...)
  int64_t rows = 0;   // ne1 of the whole weight (0: ne[1])
  size_t nb2 = 0;     // bytes between the matrices of a 3-D stack (0: ne1 rows; more when rows are cut)

  explicit operator bool() const { return data != nullptr; }
  size_t row_bytes() const { return row_size(type, ne[0]); }
  size_t mat_stride() const { return nb2 ? nb2 : static_cast<size_t>(ne[1]) * row_bytes(); }
  // The 2-D matrix of a weight (ne = [IN, OUT]), or matrix e of a 3-D stack (ne = [IN, OUT, E]).
  WeightView mat(int64_t e = 0) const {
    return WeightView{type, data + static_cast<size_t>(e) * mat_stride(), ne[0], ne[1], row_bytes()};
  }
  // Rows (ne1) of the whole weight: the F16 rule depends on the whole shape (ops.h).
  int64_t whole_rows() const { return rows ? rows : ne[1]; }
  // Bytes this process holds.
  size_t bytes() const { return static_cast<size_t>(ne[1] * ne[2] * ne[3]) * row_bytes(); }
  const float* f32() const { return reinterpret_cast<const float*>(data); }  // only for F32 tensors
};

struct LayerWeights {
  // every layer
  Tensor attn_norm, ffn_norm;            // [H]
  Tensor attn_res_score, ffn_res_score;  // [H], AttnRes only
  // KDA (model.md §4.3)
  Tensor wq, wk, wv;                     // [H, D]    (MLA without q-LoRA: wq is [H, n_head*d_qk])
  Tensor conv_q, conv_k, conv_v;         // [K_conv, 1, D]
  Tensor f_a;                            // [H, d]
  Tensor f_b;                            // [d, D]
  Tensor dt_bias;                        // [D]
  Tensor ssm_a;                          // [n_head]  = -exp(A_log)
  Tensor beta;                           // [H, n_head]
  Tensor ssm_g;                          // [H, D]
  Tensor ssm_norm;                       // [d]
  Tensor wo;                             // [D, H] (KDA) or [n_head*d_v, H] (MLA)
  // MLA (model.md §4.4)
  Tensor q_a;                            // [H, r_q]
  Tensor q_a_norm;                       // [r_q]
  Tensor q_b;                            // [r_q, n_head*d_qk]
  Tensor kv_a;                           // [H, r_kv + d_pe]
  Tensor kv_a_norm;                      // [r_kv]
  Tensor k_b;                            // [d_nope, r_kv, n_head]
  Tensor v_b;                            // [r_kv, d_v, n_head]
  Tensor attn_gate;                      // [H, n_head*d_v]
  // dense FFN (model.md §4.5)
  Tensor ffn_gate, ffn_up;               // [H, f_d]
  Tensor ffn_down;                       // [f_d, H]
  // latent MoE (model.md §4.6)
  Tensor gate_inp;                       // [H, E]  router, F32
  Tensor exp_probs_b;                    // [E]
  Tensor gate_exps, up_exps;             // [d_lat, f_e, E]
  Tensor down_exps;                      // [f_e, d_lat, E]
  Tensor routed_down;                    // [H, d_lat]
  Tensor routed_up;                      // [d_lat, H]
  Tensor routed_norm;                    // [d_lat]
  Tensor gate_shexp, up_shexp;           // [H, f_sh]
  Tensor down_shexp;                     // [f_sh, H]
};

struct Weights {
  Tensor token_embd;        // [H, V]
  Tensor output_norm;       // [H]
  Tensor output;            // [H, V]
  Tensor output_res_score;  // [H], AttnRes only
  std::vector<LayerWeights> layers;
};

}  // namespace k3::model
