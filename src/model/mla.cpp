#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/trace.h"
#include "tensor/kernels.h"

namespace k3::model {

void mla_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, std::span<const SegRows> segs,
                 const float* x, float* out) {
  const int64_t T = batch_rows(segs);
  const int64_t nh = hp.n_head[il], r_kv = hp.kv_lora_rank, d_pe = hp.n_rot, d_qk = hp.n_embd_head_k_mla;
  const int64_t d_nope = hp.d_nope(), d_v = hp.n_embd_head_v_mla, row = hp.mla_row();
  const float eps = hp.rms_eps;
  auto trace = [&](const char* name, const float* v, int64_t n) {
    if (ctx.trace) ctx.trace->record(name, static_cast<int>(il), v, T, n);
  };

  // 1. query [T][nh*d_qk]: per head d_nope values then d_pe values
  std::vector<float> q(T * nh * d_qk);
  if (hp.q_lora()) {
    std::vector<float> qa(T * hp.q_lora_rank);
    linear(ctx, w.q_a, x, T, qa.data());
    ops::rmsnorm_rows(qa.data(), w.q_a_norm.f32(), qa.data(), T, hp.q_lora_rank, eps);
    linear(ctx, w.q_b, qa.data(), T, q.data());
  } else {
    linear(ctx, w.wq, x, T, q.data());
  }
  trace("mla_q", q.data(), nh * d_qk);

  // 2-3. kv latent: cache row [rmsnorm(c) * kv_a_norm | k_pe], appended for all of a segment's tokens
  std::vector<float> kv(T * row);
  linear(ctx, w.kv_a, x, T, kv.data());
  for (int64_t t = 0; t < T; ++t) ops::rmsnorm_mul(&kv[t * row], w.kv_a_norm.f32(), &kv[t * row], r_kv, eps);
  trace("mla_kv_row", kv.data(), row);
  std::vector<const SegRows*> seg_of(T);  // the segment of each row
  int64_t max_kv = 0;                     // longest cache after the append
  for (const SegRows& sg : segs) {
    std::vector<float>& cache = sg.state->layers[il].kv;
    cache.resize(static_cast<size_t>(sg.n_past + sg.n) * row);
    std::copy_n(&kv[sg.row0 * row], sg.n * row, cache.data() + sg.n_past * row);
    std::fill_n(seg_of.begin() + sg.row0, sg.n, &sg);
    max_kv = std::max(max_kv, sg.n_past + sg.n);
  }

  // 4. absorb k_b: Q_h = [k_b_h q_nope_h (r_kv) | q_pe_h (d_pe)], per head a [T] x [d_nope -> r_kv] product
  std::vector<float> Q(nh * T * row);  // [nh][T][row]
  {
    std::vector<float> qn(T * d_nope), qt(T * r_kv);
    for (int64_t h = 0; h < nh; ++h) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < d_nope; ++i) qn[t * d_nope + i] = q[t * nh * d_qk + h * d_qk + i];
      linear(ctx, w.k_b.mat(h), qn.data(), T, qt.data());
      for (int64_t t = 0; t < T; ++t) {
        float* Qt = &Q[(h * T + t) * row];
        for (int64_t j = 0; j < r_kv; ++j) Qt[j] = qt[t * r_kv + j];
        for (int64_t i = 0; i < d_pe; ++i) Qt[r_kv + i] = q[t * nh * d_qk + h * d_qk + d_nope + i];
      }
    }
  }

  // 5-6a. causal softmax attention over the latent cache; latent read-out per head [nh][T][r_kv]
  std::vector<float> lat(nh * T * r_kv);
  const float kappa = 1.0f / sqrtf(static_cast<float>(d_qk));
  const QuantKernels& f32 = kernels(GgmlType::F32);
  par_for(ctx, nh * T, max_kv * row * 2, [&](int64_t b, int64_t e) {
    std::vector<float> p(max_kv);
    for (int64_t ht = b; ht < e; ++ht) {
      const SegRows& sg = *seg_of[ht % T];
      const float* cache = sg.state->layers[il].kv.data();
      const int64_t n_kv = sg.n_past + (ht % T - sg.row0) + 1;
      const float* Qt = &Q[ht * row];
      for (int64_t s = 0; s < n_kv; ++s) {
        float dot;
        f32.vec_dot(row, &dot, cache + s * row, Qt);
        p[s] = dot * kappa;
      }
      ops::softmax(p.data(), n_kv);
      float* o = &lat[ht * r_kv];
      for (int64_t j = 0; j < r_kv; ++j) o[j] = 0.0f;
      for (int64_t s = 0; s < n_kv; ++s) {
        const float* c = cache + s * row;
        const float ps = p[s];
        for (int64_t j = 0; j < r_kv; ++j) o[j] += ps * c[j];
      }
    }
  });

  // 6b. value up-projection per head, heads concatenated: o [T][nh*d_v]
  std::vector<float> o(T * nh * d_v);
  {
    std::vector<float> oh(T * d_v);
    for (int64_t h = 0; h < nh; ++h) {
      linear(ctx, w.v_b.mat(h), &lat[h * T * r_kv], T, oh.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t m = 0; m < d_v; ++m) o[t * nh * d_v + h * d_v + m] = oh[t * d_v + m];
    }
  }
  trace("mla_attn", o.data(), nh * d_v);

  // 7. output gate from the normed layer input
  if (w.attn_gate) {
    std::vector<float> gate(T * nh * d_v);
    linear(ctx, w.attn_gate, x, T, gate.data());
    for (size_t i = 0; i < o.size(); ++i) o[i] = o[i] * ops::sigmoid(gate[i]);
  }

  // 8. output projection
  linear(ctx, w.wo, o.data(), T, out);
}

}  // namespace k3::model
