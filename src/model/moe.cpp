#include "model/moe.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "model/expert_source.h"
#include "model/ffn.h"
#include "model/trace.h"
#include "tensor/kernels.h"
#include "tensor/matvec.h"

namespace k3::model {

namespace {

// One MoE layer's routed experts: from the mapping, or requested from ctx.experts when the router
// has chosen and released when the layer is done (also when it throws).
class ExpertLayer {
 public:
  ExpertLayer(ExpertSource* src, uint32_t il, std::vector<int32_t>& used, const float* x, int64_t T)
      : src_(src), il_(il) {
    if (!src_) return;
    try {
      src_->request(il_, used, x, T);
    } catch (...) {
      src_->release(il_);
      throw;
    }
  }
  ~ExpertLayer() {
    if (src_) src_->release(il_);
  }
  ExpertLayer(const ExpertLayer&) = delete;
  ExpertLayer& operator=(const ExpertLayer&) = delete;
  ExpertMats mats(const LayerWeights& w, int32_t e) const {
    if (src_) return src_->acquire(il_, e);
    return {w.gate_exps.mat(e), w.up_exps.mat(e), w.down_exps.mat(e)};
  }
  void done(int32_t e) const {
    if (src_) src_->done(il_, e);
  }

 private:
  ExpertSource* src_;
  uint32_t il_;
};

// One token (decode): y[j] = down_j situ(gate_j z, up_j z) for the k selected experts, in two
// parallel regions: the gate and up rows of all k experts (situ applied per chunk of rows, on the
// thread that produced them, and the quantization of its output too when this process holds every
// row), then the k down matrices. z is quantized once. Same bits as the per-expert linear() path.
void experts_one_token(Ctx& ctx, const ops::Situ& situ, const LayerWeights& w, const ExpertLayer& src,
                       const int32_t* sel, int64_t k, const float* z, int64_t dl, float* y) {
  const int64_t F = w.gate_exps.ne[1], F_all = w.down_exps.ne[0], dl_out = w.down_exps.ne[1];
  thread_local std::vector<float> g, u;                  // [k][F_all] gate (then situ) outputs, [k][F] up
  thread_local std::vector<uint8_t> zq_gate, zq_up, aq;  // quantized z (per partner type), situ outputs
  thread_local std::vector<Matvec> mv;
  thread_local std::vector<ExpertMats> mats;  // all k resident before the regions start
  g.resize(static_cast<size_t>(k) * F_all);
  u.resize(static_cast<size_t>(k) * F);
  mv.clear();
  mats.resize(k);
  for (int64_t j = 0; j < k; ++j) mats[j] = src.mats(w, sel[j]);
  const ExpertMats& first = mats[0];
  const void* zg = quantize_activation(first.gate.type, z, dl, zq_gate);
  const void* zu = kernels(first.up.type).vec_dot_type == kernels(first.gate.type).vec_dot_type
                       ? zg
                       : quantize_activation(first.up.type, z, dl, zq_up);
  const GgmlType at = kernels(first.down.type).vec_dot_type;
  const size_t aq_row = row_size(at, F_all);
  aq.resize(static_cast<size_t>(k) * aq_row);
  for (int64_t j = 0; j < k; ++j) {
    const ExpertMats& m = mats[j];
    if (ctx.observer) {  // the model's matrices, wherever a source serves them from
      ctx.observer->on_matmul(w.gate_exps.mat(sel[j]), z, 1);
      ctx.observer->on_matmul(w.up_exps.mat(sel[j]), z, 1);
    }
    mv.push_back({m.gate, zg, &g[j * F]});
    mv.push_back({m.up, zu, &u[j * F]});
  }
  const bool whole = F == F_all;  // else the rows are quantized once gathered
  const int64_t align = type_info(at).block;
  const auto from_float = kernels(at).from_float;
  // The callback runs on worker threads too: it must use these buffers, not its own thread_locals.
  float *const gp = g.data(), *const up = u.data();
  uint8_t* const aqp = aq.data();
  matvec_batch(mv.data(), mv.size(), 2, ctx.pool, align, [&](size_t j, int64_t r0, int64_t r1) {
    float* a = gp + j * F;
    situ.apply(a + r0, up + j * F + r0, r1 - r0);
    if (whole && at != GgmlType::F32) from_float(a + r0, aqp + j * aq_row + row_size(at, r0), r1 - r0);
  });
  gather(ctx, {{gp, F, F_all}}, k);
  if (!whole && at != GgmlType::F32)
    par_for(ctx, k, F_all, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) from_float(gp + j * F_all, aqp + j * aq_row, F_all);
    });
  mv.clear();
  for (int64_t j = 0; j < k; ++j) {
    const ExpertMats& m = mats[j];
    const float* a = &g[j * F_all];
    if (ctx.observer) ctx.observer->on_matmul(w.down_exps.mat(sel[j]), a, 1);
    mv.push_back({m.down, at == GgmlType::F32 ? static_cast<const void*>(a) : &aq[j * aq_row], y + j * dl_out});
  }
  matvec_batch(mv.data(), mv.size(), 1, ctx.pool);
  for (int64_t j = 0; j < k; ++j) src.done(sel[j]);
}

// The fused path rounds the activation to the partner format like matmul; F16 stacks under the AMX
// rule go through linear(), which widens the weights instead.
bool fused_ok(const Ctx& ctx, const LayerWeights& w) {
  for (const Tensor* t : {&w.gate_exps, &w.up_exps, &w.down_exps})
    if (t->type == GgmlType::F16 && ctx.f16_rule == F16Rule::Amx) return false;
  return true;
}

}  // namespace

void moe_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, const float* x, int64_t T,
                 float* out) {
  const int64_t H = hp.n_embd, E = hp.n_expert, k = hp.n_expert_used[il], dl = hp.d_lat();
  const ops::Situ situ(hp.situ_beta, hp.situ_linear_beta);
  auto trace = [&](const char* name, const float* v, int64_t n) {
    if (ctx.trace) ctx.trace->record(name, static_cast<int>(il), v, T, n);
  };

  // sel/wt: [T][k] in selection order. Scratch (ops.h): kept per thread, named through references.
  thread_local struct {
    std::vector<float> probs, wt, s, zbuf, y, zin, a, b, ye, m, ash, sh;
    std::vector<int32_t> sel, idx, used;
    std::vector<std::vector<int64_t>> rows;  // grouped path: (t * k + slot) per expert
  } tls;
  std::vector<float>&probs = tls.probs, &wt = tls.wt, &s = tls.s, &zbuf = tls.zbuf, &y = tls.y, &zin = tls.zin,
                     &a = tls.a, &b = tls.b, &ye = tls.ye, &m = tls.m, &ash = tls.ash, &sh = tls.sh;
  std::vector<int32_t>&sel = tls.sel, &idx = tls.idx, &used = tls.used;
  std::vector<std::vector<int64_t>>& rows = tls.rows;
  // This process's rows (all of them alone): F of the F_all expert hidden rows, dl_out of the expert
  // outputs (of d_lat), H_out of the H outputs.
  const int64_t F = w.gate_exps.ne[1], F_all = w.down_exps.ne[0], dl_out = w.down_exps.ne[1];
  const int64_t H_out = hp.latent() ? w.routed_up.ne[1] : dl_out;
  for (auto* v : {&zin, &ye}) release_if_oversized(*v, T * dl);  // the grouped path's, per expert
  for (auto* v : {&a, &b}) release_if_oversized(*v, T * F_all);

  // 1, 6. the products of the layer input, gathered in one exchange: router logits, z = the input
  // down to the latent (or the input itself), the shared experts' hidden layer
  scratch_zeros(probs, T * E);
  linear(ctx, w.gate_inp, x, T, probs.data());
  Slice cut[3] = {{probs.data(), w.gate_inp.ne[1], E}};  // this process's rows of each
  size_t n_cut = 1;
  const float* z = x;
  if (hp.latent()) {
    scratch_zeros(zbuf, T * dl);
    linear(ctx, w.routed_down, x, T, zbuf.data());
    z = zbuf.data();
    cut[n_cut++] = {zbuf.data(), w.routed_down.ne[1], dl};
  }
  if (w.gate_shexp) {
    const int64_t sh_all = w.down_shexp.ne[0];
    scratch_zeros(ash, T * sh_all);
    situ_hidden(ctx, situ, w.gate_shexp, w.up_shexp, x, T, ash.data());
    cut[n_cut++] = {ash.data(), w.gate_shexp.ne[1], sh_all};
  }
  gather(ctx, std::span<const Slice>(cut, n_cut), T);

  // 2-5. gating, selection, weights
  if (hp.gating == Gating::Sigmoid)
    ops::sigmoid_n(probs.data(), T * E);
  else
    for (int64_t t = 0; t < T; ++t) ops::softmax(&probs[t * E], E);
  sel.assign(T * k, 0);
  scratch_zeros(wt, T * k);
  {
    scratch_zeros(s, E);
    idx.assign(E, 0);
    const float* bias = w.exp_probs_b.f32();
    for (int64_t t = 0; t < T; ++t) {
      const float* p = &probs[t * E];
      for (int64_t e = 0; e < E; ++e) s[e] = p[e] + bias[e];
      std::iota(idx.begin(), idx.end(), 0);
      const auto above = [&](int32_t a, int32_t b) { return s[a] > s[b]; };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), above);
      // llama.cpp ranks with std::sort over all experts (its argsort); on equal scores the order, and
      // which tied expert takes the last place, is that sort's, so it decides those (quantized
      // routers can tie exactly).
      bool tie = false;
      for (int64_t j = 1; j < k; ++j) tie = tie || s[idx[j]] == s[idx[j - 1]];
      for (int64_t j = k; j < E; ++j) tie = tie || s[idx[j]] == s[idx[k - 1]];
      if (tie) {
        std::iota(idx.begin(), idx.end(), 0);
        std::sort(idx.begin(), idx.end(), above);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        sel[t * k + j] = idx[j];
        wt[t * k + j] = p[idx[j]];
        sum += wt[t * k + j];
      }
      if (hp.expert_weights_norm) {
        const float den = std::max(static_cast<float>(sum), 6.103515625e-5f);
        for (int64_t j = 0; j < k; ++j) wt[t * k + j] = wt[t * k + j] / den;
      }
      if (hp.expert_weights_scale != 0.0f && hp.expert_weights_scale != 1.0f)
        for (int64_t j = 0; j < k; ++j) wt[t * k + j] = wt[t * k + j] * hp.expert_weights_scale;
    }
  }
  trace("ffn_moe_weights", wt.data(), k);

  // 7. experts: tokens grouped by expert, one product per expert over its tokens. y: [T][k][dl_out]
  scratch_zeros(y, T * k * dl_out);
  const bool one_token = T == 1 && fused_ok(ctx, w);
  used.clear();  // ascending expert ids
  if (one_token) {
    used.assign(sel.begin(), sel.end());  // a token's k experts are distinct
    std::sort(used.begin(), used.end());
  } else {
    rows.resize(E);
    for (auto& r : rows) r.clear();
    for (int64_t i = 0; i < T * k; ++i) rows[sel[i]].push_back(i);
    for (int32_t e = 0; e < E; ++e)
      if (!rows[e].empty()) used.push_back(e);
  }
  ExpertLayer src(ctx.experts, il, used, x, T);
  if (one_token) {
    experts_one_token(ctx, situ, w, src, sel.data(), k, z, dl, y.data());
  } else {
    const int64_t whole_rows = w.gate_exps.whole_rows();
    Ctx quiet = ctx;  // the observer is told of the model's matrices, wherever a source serves them from
    quiet.observer = nullptr;
    for (const int32_t e : used) {
      const auto& r = rows[e];
      const int64_t n = static_cast<int64_t>(r.size());
      zin.resize(n * dl);
      a.resize(n * F_all);
      b.resize(n * F);
      ye.resize(n * dl_out);
      for (int64_t m = 0; m < n; ++m) std::copy_n(z + (r[m] / k) * dl, dl, &zin[m * dl]);
      const ExpertMats me = src.mats(w, e);
      if (ctx.observer) {
        ctx.observer->on_matmul(w.gate_exps.mat(e), zin.data(), n);
        ctx.observer->on_matmul(w.up_exps.mat(e), zin.data(), n);
      }
      linear(quiet, me.gate, zin.data(), n, a.data(), whole_rows);
      linear(quiet, me.up, zin.data(), n, b.data(), whole_rows);
      situ_rows(ctx, situ, a.data(), b.data(), n, F);
      gather(ctx, {{a.data(), F, F_all}}, n);
      if (ctx.observer) ctx.observer->on_matmul(w.down_exps.mat(e), a.data(), n);
      linear(quiet, me.down, a.data(), n, ye.data(), w.down_exps.whole_rows());
      src.done(e);
      for (int64_t m = 0; m < n; ++m) std::copy_n(&ye[m * dl_out], dl_out, &y[r[m] * dl_out]);
    }
  }

  // 8. weighted combine, left to right in selection order (each process its rows)
  scratch_zeros(m, T * dl);
  for (int64_t t = 0; t < T; ++t) {
    float* mt = &m[t * dl_out];
    for (int64_t j = 0; j < k; ++j) {
      const float* ye = &y[(t * k + j) * dl_out];
      const float wj = wt[t * k + j];
      if (j == 0)
        for (int64_t i = 0; i < dl_out; ++i) mt[i] = ye[i] * wj;
      else
        for (int64_t i = 0; i < dl_out; ++i) mt[i] = mt[i] + ye[i] * wj;
    }
  }
  trace("ffn_moe_combined", m.data(), dl_out);

  // 9-10. latent norm, up-projection
  if (hp.latent()) {
    gather(ctx, {{m.data(), dl_out, dl}}, T);
    if (w.routed_norm) norm_rows(ctx, m.data(), w.routed_norm.f32(), m.data(), T, dl, hp.rms_eps);
    linear(ctx, w.routed_up, m.data(), T, out);
  } else {
    std::copy_n(m.begin(), T * dl_out, out);
  }
  trace("ffn_moe_routed", out, H_out);

  // 11-12. shared experts on the un-projected input
  if (w.gate_shexp) {
    scratch_zeros(sh, T * H_out);
    linear(ctx, w.down_shexp, ash.data(), T, sh.data());
    trace("ffn_shexp", sh.data(), H_out);
    for (int64_t i = 0; i < T * H_out; ++i) out[i] = out[i] + sh[i];
  }
  gather(ctx, {{out, H_out, H}}, T);
}

}  // namespace k3::model
