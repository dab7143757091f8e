#include "model/kda.h"

#include <cmath>
#include <vector>

#include "model/trace.h"
#include "tensor/vecmath.h"

namespace k3::model {

namespace {

// Causal depthwise conv over time + silu (§6.3 step 2) of channels [c0, c1); the arguments are
// VecMath::causal_conv's.
void conv_silu(const VecMath& vm, const float* p, const float* conv_w, float* state, int64_t T, int64_t D,
               int64_t K, int64_t c0, int64_t c1, float* y) {
  vm.causal_conv(p, conv_w, state, T, D, K, c0, c1, y);
  for (int64_t t = 0; t < T; ++t) ops::silu_n(y + t * D + c0, c1 - c0);
}

// l2n over one head (§5): rmsnorm(x; eps/n), then a separate multiplication by 1/sqrt(n).
void l2n(float* x, int64_t n, float eps) {
  const float c = ops::rms_scale(x, n, eps / static_cast<float>(n));
  const float s = 1.0f / sqrtf(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * c;
    x[i] = v * s;
  }
}

// One token of the gated delta rule on one head's state S (§6.3 step 6); eg: d floats of scratch.
void delta_token(const VecMath& vm, float* S, int64_t d, const float* g, const float* k, const float* q,
                 const float* v, float beta, float* eg, float* o) {
  for (int64_t i = 0; i < d; ++i) eg[i] = g[i];
  ops::exp_n(eg, d);
  vm.delta_rule(S, d, eg, k, q, v, beta, 1.0f / sqrtf(static_cast<float>(d)), o);
}

// dst = n rows of w values from src.
void keep(std::vector<float>& dst, const float* src, int64_t n, int64_t w) { dst.assign(src, src + n * w); }

}  // namespace

void kda_replay(const KdaJournal& j, int64_t d, int64_t n, int64_t m, float* rec, ThreadPool& pool) {
  const int64_t nh = static_cast<int64_t>(j.beta.size()) / n, D = nh * d;
  const VecMath& vm = vecmath();
  pool.chunks(nh, 1, [&](int64_t h0, int64_t h1) {
    thread_local std::vector<float> eg, o;
    scratch_zeros(eg, d), scratch_zeros(o, d);
    for (int64_t h = h0; h < h1; ++h) {
      float* S = rec + h * d * d;
      std::copy_n(j.rec0.data() + h * d * d, d * d, S);
      for (int64_t t = 0; t < m; ++t)
        delta_token(vm, S, d, &j.g[t * D + h * d], &j.k[t * D + h * d], &j.q[t * D + h * d], &j.v[t * D + h * d],
                    j.beta[t * nh + h], eg.data(), o.data());
    }
  });
}

void kda_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, std::span<const SegRows> segs,
                 const float* x, float* out) {
  const int64_t T = batch_rows(segs), n_seg = static_cast<int64_t>(segs.size());
  // This process's heads (all of them alone): nh heads, D of the D_all channels; H_out of the H outputs.
  const int64_t nh = w.ssm_a.ne[0], d = hp.kda_head_dim, D = nh * d, D_all = w.wo.ne[0], K = hp.ssm_d_conv;
  const int64_t H = hp.n_embd, H_out = w.wo.ne[1];
  const float eps = hp.rms_eps;
  const VecMath& vm = vecmath();
  auto trace = [&](const char* name, const float* v, int64_t n) {
    if (ctx.trace) ctx.trace->record(name, static_cast<int>(il), v, T, n);
  };

  // 1-2. every projection of x (one parallel region for a single token), conv + silu per stream
  // Scratch (ops.h): kept per thread, named through references.
  thread_local struct {
    std::vector<float> proj, q, k, v, fa, beta, gate, g, o;
    std::vector<uint8_t> oq;
  } tls;
  std::vector<float>&proj = tls.proj, &q = tls.q, &k = tls.k, &v = tls.v, &fa = tls.fa, &beta = tls.beta,
                     &gate = tls.gate, &g = tls.g, &o = tls.o;
  // every value written by the products and the conv
  scratch_size(proj, 3 * T * D), scratch_size(q, T * D), scratch_size(k, T * D), scratch_size(v, T * D);
  scratch_size(fa, T * d), scratch_size(beta, T * nh), scratch_size(gate, T * D);
  for (const SegRows& sg : segs)
    if (KdaJournal* j = sg.state->journal(il, sg.n)) {  // the window before the conv moves it
      const std::vector<float>& c = sg.state->layers[il].conv;
      j->conv0.assign(c.begin(), c.end());
    }
  // The conv of q, k and v runs on the rows of each projection as they come (channels are
  // independent), on the thread that computed them: inside the region, not after it.
  const Tensor* conv[3] = {&w.conv_q, &w.conv_k, &w.conv_v};
  float* dst[3] = {q.data(), k.data(), v.data()};
  auto conv_rows = [&](size_t s, int64_t c0, int64_t c1) {
    if (s >= 3) return;  // f_a, beta, the gate
    for (const SegRows& sg : segs)
      conv_silu(vm, &proj[s * T * D] + sg.row0 * D, conv[s]->f32(),
                sg.state->layers[il].conv.data() + s * D * (K - 1), sg.n, D, K, c0, c1, dst[s] + sg.row0 * D);
  };
  const LinearJob jobs[] = {{w.wq, x, &proj[0]},         {w.wk, x, &proj[T * D]}, {w.wv, x, &proj[2 * T * D]},
                            {w.f_a, x, fa.data()},        {w.beta, x, beta.data()}, {w.ssm_g, x, gate.data()}};
  linear_batch(ctx, jobs, 6, T, conv_rows);
  for (const SegRows& sg : segs)
    if (KdaJournal* j = sg.state->journal(il, sg.n)) {  // the projections, which the conv leaves as they are
      j->proj.resize(3 * sg.n * D);
      for (int s = 0; s < 3; ++s) std::copy_n(&proj[s * T * D] + sg.row0 * D, sg.n * D, &j->proj[s * sg.n * D]);
    }
  static const char* names[3] = {"kda_q_conv", "kda_k_conv", "kda_v_conv"};
  for (int s = 0; s < 3; ++s) trace(names[s], dst[s], D);

  // 3. decay gate g [T][D]
  scratch_size(g, T * D);
  linear(ctx, w.f_b, fa.data(), T, g.data());
  const float* dt_bias = w.dt_bias.f32();
  const float* A = w.ssm_a.f32();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < d; ++i) {
        float& gi = g[t * D + h * d + i];
        const float r = gi + dt_bias[h * d + i];
        gi = hp.kda_gate_lb ? -1.0f * (r * A[h]) : A[h] * ops::softplus(r);
      }
  if (hp.kda_gate_lb) {  // lb * sigmoid(-(r A)), the sigmoid vectorised like the other gates
    ops::sigmoid_n(g.data(), T * D);
    const float lb = *hp.kda_gate_lb;
    for (int64_t i = 0; i < T * D; ++i) g[i] = g[i] * lb;
  }
  trace("kda_gate", g.data(), D);

  // 4. beta [T][n_head]
  ops::sigmoid_n(beta.data(), T * nh);

  // 5. l2-normalise q and k per head
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nh; ++h) {
      l2n(&q[t * D + h * d], d, eps);
      l2n(&k[t * D + h * d], d, eps);
    }

  // 6. recurrence, per (segment, head), tokens in order. S row j (value channel) holds S[i][j] over i.
  // A journal (State::keep_rows) gets what a rewind needs: the inputs and the states before the
  // pass (Inputs), or the state after each token but the last (States).
  for (const SegRows& sg : segs) {
    KdaJournal* j = sg.state->journal(il, sg.n);
    if (!j) continue;
    const size_t rec = sg.state->layers[il].rec.size();
    if (sg.state->keep_mode() == KeepMode::States) {
      j->recs.resize((sg.n - 1) * rec);
      continue;
    }
    j->rec0.resize(rec);
    keep(j->q, &q[sg.row0 * D], sg.n, D), keep(j->k, &k[sg.row0 * D], sg.n, D), keep(j->v, &v[sg.row0 * D], sg.n, D);
    keep(j->g, &g[sg.row0 * D], sg.n, D), keep(j->beta, &beta[sg.row0 * nh], sg.n, nh);
  }
  scratch_zeros(o, T * D_all);  // [T][D] here, all heads after the gather
  par_for(ctx, n_seg * nh, (T + n_seg - 1) / n_seg * d * d * 4, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> eg;
    scratch_zeros(eg, d);
    for (int64_t sh = i0; sh < i1; ++sh) {
      const SegRows& sg = segs[sh / nh];
      const int64_t h = sh % nh;
      float* S = sg.state->layers[il].rec.data() + h * d * d;
      KdaJournal* j = sg.state->journal(il, sg.n);
      const bool states = j && sg.state->keep_mode() == KeepMode::States;
      if (j && !states) std::copy_n(S, d * d, j->rec0.data() + h * d * d);
      for (int64_t t = sg.row0; t < sg.row0 + sg.n; ++t) {
        delta_token(vm, S, d, &g[t * D + h * d], &k[t * D + h * d], &q[t * D + h * d], &v[t * D + h * d],
                    beta[t * nh + h], eg.data(), &o[t * D + h * d]);
        if (states && t + 1 < sg.row0 + sg.n)
          std::copy_n(S, d * d, j->recs.data() + ((t - sg.row0) * nh + h) * d * d);
      }
    }
  });
  trace("kda_core", o.data(), D);

  // 7. per-head norm, then the full-rank gate
  ops::sigmoid_n(gate.data(), T * D);
  const float* nw = w.ssm_norm.f32();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < nh; ++h) {
      float* oh = &o[t * D + h * d];
      ops::rmsnorm_mul(oh, nw, oh, d, eps);
      for (int64_t j = 0; j < d; ++j) oh[j] = oh[j] * gate[t * D + h * d + j];
    }
  trace("kda_gated", o.data(), D);

  // 8. output projection over every head
  linear_gathered(ctx, w.wo, o.data(), D, D_all, d, T, out, tls.oq);
  gather(ctx, {{out, H_out, H}}, T);
}

}  // namespace k3::model
