#include "model/moe.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "model/expert_source.h"
#include "model/ffn.h"
#include "model/trace.h"
#include "tensor/kernels.h"
#include "tensor/matvec.h"

namespace k3::model {

namespace {

// Up to this many tokens a pass, the experts are computed as one token's are (experts_rows): the
// rows of a verify pass (dspark.md §9) read each chosen expert once in a few parallel regions.
constexpr int64_t kFusedTokens = 16;

// One MoE layer's routed experts: from the mapping, or requested from ctx.experts when the router
// has chosen and released when the layer is done (also when it throws); and the groups they are
// computed in: consecutive entries of `used`, per_group() at a time. Alone, `used` is in the
// source's order (the experts it holds first), k at a time (a source holds one token's experts at
// once), or all at once when mapped. With other processes holding rows of the experts, the rows
// are exchanged group by group, and the processes may hold different experts and budgets (one maps,
// one streams): every process takes the same groups, k experts at a time by ascending id, whatever
// it holds, when any of them streams; all at once when they all map.
class ExpertLayer {
 public:
  ExpertLayer(const Ctx& ctx, uint32_t il, std::vector<int32_t>& used, const float* x, int64_t T, int64_t k)
      : src_(ctx.experts), il_(il) {
    const bool shared = ctx.group && ctx.group->placement().tp_size > 1;
    const bool streamed = shared ? ctx.group->any_streams(src_ != nullptr) : src_ != nullptr;
    per_group_ = streamed ? static_cast<size_t>(k) : used.size();
    if (!src_) return;
    try {
      src_->request(il_, used, x, T);
    } catch (...) {
      src_->release(il_);
      throw;
    }
    if (shared) std::sort(used.begin(), used.end());
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
  size_t per_group() const { return per_group_; }

 private:
  ExpertSource* src_;
  uint32_t il_;
  size_t per_group_;
};

// A few tokens (a decode step, the rows of a verify pass): y[t][j] = down_e situ(gate_e z_t, up_e z_t)
// for every token's k selected experts e, in two parallel regions (the gate and up rows of every
// expert for all the tokens that chose it, situ applied per chunk of rows on the thread that
// produced them, and the quantization of its output too when this process holds every row; then the
// downs) per group of experts (ExpertLayer: all of them, or k at a time). Each z_t is quantized
// once; each expert's rows are read once for all its tokens (matvec_batch over several tokens). zq:
// z of one token already quantized (gathered so), or null. Under mpirun a share of whole blocks of the activation is quantized where
// it is computed and travels so (exchange_format). Same bits as the per-expert linear() path.
void experts_rows(Ctx& ctx, const ops::Situ& situ, const LayerWeights& w, const ExpertLayer& src,
                  const std::vector<int32_t>& used, const int32_t* sel, int64_t T, int64_t k, const float* z,
                  const void* zq, int64_t dl, float* y) {
  const int64_t F = w.gate_exps.ne[1], F_all = w.down_exps.ne[0], dl_out = w.down_exps.ne[1];
  thread_local std::vector<float> g, u, yd;  // [pairs][F_all] gate (then situ), [pairs][F] up, [pairs][dl_out] down
  thread_local std::vector<uint8_t> zq_gate, zq_up, aq;  // z rows quantized (per partner type) by pair, situ outputs
  thread_local std::vector<Matvec> mv;
  thread_local std::vector<ExpertMats> mats;  // by position in `used`
  thread_local std::vector<int64_t> pairs;    // t * k + j of the group's (token, expert) pairs, by expert
  thread_local std::vector<int64_t> first;    // [experts of the group + 1]: an expert's first pair
  thread_local std::vector<int32_t> pos;      // [E]: an expert's position in `used`
  pos.assign(w.gate_exps.ne[2], -1);
  for (size_t i = 0; i < used.size(); ++i) pos[used[i]] = static_cast<int32_t>(i);
  const ExpertMats first_mats = src.mats(w, used[0]);
  const GgmlType gt = first_mats.gate.type, ut = first_mats.up.type, at = kernels(first_mats.down.type).vec_dot_type;
  const bool shared_q = kernels(ut).vec_dot_type == kernels(gt).vec_dot_type;
  const size_t zg_row = row_size(kernels(gt).vec_dot_type, dl), zu_row = row_size(kernels(ut).vec_dot_type, dl);
  thread_local std::vector<uint8_t> one;  // one row's quantization
  thread_local std::vector<uint8_t> zt_gate, zt_up;  // z rows quantized by token
  auto quantize_rows = [&](GgmlType wt, size_t row, std::vector<uint8_t>& buf) {
    buf.resize(static_cast<size_t>(T) * row);
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(buf.data() + t * row, zq ? zq : quantize_activation(wt, z + t * dl, dl, one), row);
  };
  quantize_rows(gt, zg_row, zt_gate);
  if (!shared_q) quantize_rows(ut, zu_row, zt_up);
  // The activations of the expert whose pairs are [f, f + c): its token's row (shared with the other
  // experts of that token: packed once), or the rows of its tokens copied in pair order into buf
  // (sized for every pair).
  auto act_rows = [&](const std::vector<uint8_t>& zt, size_t row, std::vector<uint8_t>& buf, int64_t f, int64_t c) {
    if (c == 1) return zt.data() + pairs[f] / k * row;
    for (int64_t i = f; i < f + c; ++i) std::memcpy(buf.data() + i * row, zt.data() + pairs[i] / k * row, row);
    return static_cast<const uint8_t*>(buf.data() + f * row);
  };
  const size_t aq_row = row_size(at, F_all);
  // the rows of every process, quantized where they are computed (exchange_format), or floats
  const GgmlType moved = ctx.group ? exchange_format(at, F_all, 1, ctx.group->placement().tp_size, 1) : at;
  // quantized here: every row (F == F_all), or a share of whole blocks (rows [i][row_size(at, F)]
  // before the gather); else once gathered
  const bool here = at != GgmlType::F32 && (F == F_all || moved == at);
  const size_t stride = F == F_all ? aq_row : row_size(at, F);
  const int64_t align = type_info(at).block;
  const auto from_float = kernels(at).from_float;
  const size_t n_used = used.size(), per_group = src.per_group();
  mats.assign(n_used, first_mats);
  for (size_t g0 = 0; g0 < n_used; g0 += per_group) {
    const size_t g1 = std::min(n_used, g0 + per_group);
    for (size_t i = g0; i < g1; ++i)
      if (i > 0) mats[i] = src.mats(w, used[i]);
    pairs.clear();
    for (int64_t p = 0; p < T * k; ++p)
      if (static_cast<size_t>(pos[sel[p]]) >= g0 && static_cast<size_t>(pos[sel[p]]) < g1) pairs.push_back(p);
    // by expert id, not by position in `used`: under mpirun the rows of every process are exchanged
    // in this order, and each process's source orders `used` by what it holds (request())
    std::sort(pairs.begin(), pairs.end(), [&](int64_t a, int64_t b) { return std::pair(sel[a], a) < std::pair(sel[b], b); });
    first.assign(1, 0);
    for (size_t i = 0; i < pairs.size(); ++i)
      if (i + 1 == pairs.size() || sel[pairs[i + 1]] != sel[pairs[i]])
        first.push_back(static_cast<int64_t>(i + 1));
    const int64_t n = static_cast<int64_t>(pairs.size());
    g.resize(static_cast<size_t>(n) * F_all);
    u.resize(static_cast<size_t>(n) * F);
    aq.resize(static_cast<size_t>(n) * aq_row);
    yd.resize(static_cast<size_t>(n) * dl_out);
    zq_gate.resize(static_cast<size_t>(n) * zg_row);
    zq_up.resize(shared_q ? 0 : static_cast<size_t>(n) * zu_row);
    if (ctx.observer)  // the model's matrices, wherever a source serves them from
      for (const int64_t p : pairs) {
        ctx.observer->on_matmul(w.gate_exps.mat(sel[p]), z + p / k * dl, 1);
        ctx.observer->on_matmul(w.up_exps.mat(sel[p]), z + p / k * dl, 1);
      }
    mv.clear();
    for (size_t x = 0; x + 1 < first.size(); ++x) {
      const int64_t f = first[x], c = first[x + 1] - f;
      const ExpertMats& m = mats[pos[sel[pairs[f]]]];
      const uint8_t* ag = act_rows(zt_gate, zg_row, zq_gate, f, c);
      mv.push_back({m.gate, ag, &g[f * F], c, zg_row, F});
      mv.push_back({m.up, shared_q ? ag : act_rows(zt_up, zu_row, zq_up, f, c), &u[f * F], c, zu_row, F});
    }
    // The callback runs on worker threads too: it must use these buffers, not its own thread_locals.
    float *const gp = g.data(), *const up = u.data();
    uint8_t* const aqp = aq.data();
    const int64_t* const fp = first.data();
    matvec_batch(mv.data(), mv.size(), 2, ctx.pool, align, [&](size_t x, int64_t r0, int64_t r1) {
      for (int64_t i = fp[x]; i < fp[x + 1]; ++i) {
        float* a = gp + i * F;
        situ.apply(a + r0, up + i * F + r0, r1 - r0);
        if (here) from_float(a + r0, aqp + i * stride + row_size(at, r0), r1 - r0);
      }
    });
    if (here) gather(ctx, {{aqp, F, F_all, 1, at}}, n);
    else gather(ctx, {{gp, F, F_all}}, n);
    if (!here && at != GgmlType::F32)
      par_for(ctx, n, F_all, [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) from_float(gp + j * F_all, aqp + j * aq_row, F_all);
      });
    if (ctx.observer)
      for (int64_t i = 0; i < n; ++i) ctx.observer->on_matmul(w.down_exps.mat(sel[pairs[i]]), &g[i * F_all], 1);
    mv.clear();
    for (size_t x = 0; x + 1 < first.size(); ++x) {
      const int64_t f = first[x], c = first[x + 1] - f;
      const ExpertMats& m = mats[pos[sel[pairs[f]]]];
      float* out = c == 1 ? y + pairs[f] * dl_out : &yd[f * dl_out];  // several: copied below
      if (at == GgmlType::F32) mv.push_back({m.down, &g[f * F_all], out, c, F_all * sizeof(float), dl_out});
      else mv.push_back({m.down, &aq[f * aq_row], out, c, aq_row, dl_out});
    }
    matvec_batch(mv.data(), mv.size(), 1, ctx.pool);
    for (size_t x = 0; x + 1 < first.size(); ++x)
      for (int64_t i = first[x]; first[x + 1] - first[x] > 1 && i < first[x + 1]; ++i)
        std::copy_n(&yd[i * dl_out], dl_out, y + pairs[i] * dl_out);
    for (size_t i = g0; i < g1; ++i) src.done(used[i]);
  }
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
    std::vector<float> probs, wt, s, zbuf, y, zin, a, b, ye, m, ash, ush, sh;
    std::vector<uint8_t> zq, shq;
    std::vector<int32_t> sel, idx, used;
    std::vector<std::vector<int64_t>> rows;  // grouped path: (t * k + slot) per expert
  } tls;
  std::vector<float>&probs = tls.probs, &wt = tls.wt, &s = tls.s, &zbuf = tls.zbuf, &y = tls.y, &zin = tls.zin,
                     &a = tls.a, &b = tls.b, &ye = tls.ye, &m = tls.m, &ash = tls.ash, &ush = tls.ush,
                     &sh = tls.sh;
  std::vector<int32_t>&sel = tls.sel, &idx = tls.idx, &used = tls.used;
  std::vector<std::vector<int64_t>>& rows = tls.rows;
  // This process's rows (all of them alone): F of the F_all expert hidden rows, dl_out of the expert
  // outputs (of d_lat), H_out of the H outputs.
  const int64_t F = w.gate_exps.ne[1], F_all = w.down_exps.ne[0], dl_out = w.down_exps.ne[1];
  const int64_t H_out = hp.latent() ? w.routed_up.ne[1] : dl_out;
  for (auto* v : {&zin, &ye}) release_if_oversized(*v, T * dl);  // the grouped path's, per expert
  for (auto* v : {&a, &b}) release_if_oversized(*v, T * F_all);

  // 1, 6. the products of the layer input, gathered in one exchange: router logits, z = the input
  // down to the latent (or the input itself), the shared experts' hidden layer; z and the hidden
  // layer in the formats their products take them (GatheredInput) where they can be
  const bool fused = T <= kFusedTokens && fused_ok(ctx, w);
  // Their products run in one parallel region (at T = 1 one fork, not three).
  scratch_size(probs, T * E);  // products' outputs: every value written
  LinearJob jobs[4] = {{w.gate_inp, x, probs.data()}};
  size_t n_jobs = 1;
  if (hp.latent()) {
    scratch_size(zbuf, T * dl);
    jobs[n_jobs++] = {w.routed_down, x, zbuf.data()};
  }
  const int64_t sh_all = w.gate_shexp ? w.down_shexp.ne[0] : 0, sh_local = w.gate_shexp ? w.gate_shexp.ne[1] : 0;
  if (w.gate_shexp) {
    scratch_size(ash, T * sh_all);
    scratch_size(ush, T * sh_local);
    jobs[n_jobs++] = {w.gate_shexp, x, ash.data()};
    jobs[n_jobs++] = {w.up_shexp, x, ush.data()};
  }
  linear_batch(ctx, jobs, n_jobs, T);
  if (w.gate_shexp) situ_rows(ctx, situ, ash.data(), ush.data(), T, sh_local);
  Slice cut[3] = {{probs.data(), w.gate_inp.ne[1], E}};  // this process's rows of each
  size_t n_cut = 1;
  const float* z = x;
  const void* zq = nullptr;  // z gathered in the experts' input format
  if (hp.latent()) {
    z = zbuf.data();
    const int64_t local = w.routed_down.ne[1];
    cut[n_cut] = {zbuf.data(), local, dl};
    const GgmlType vt = kernels(w.gate_exps.type).vec_dot_type;
    if (T == 1 && fused && ctx.group && !ctx.observer && vt == kernels(w.up_exps.type).vec_dot_type &&
        exchange_format(vt, dl, 1, ctx.group->placement().tp_size, T) == vt) {
      scratch_size(tls.zq, row_size(vt, dl));
      kernels(vt).from_float(zbuf.data(), tls.zq.data(), local);
      cut[n_cut] = {tls.zq.data(), local, dl, 1, vt};
      zq = tls.zq.data();
    }
    ++n_cut;
  }
  std::optional<GatheredInput> sh_in;  // the shared experts' hidden layer, input of down_shexp
  if (w.gate_shexp) {
    sh_in.emplace(ctx, w.down_shexp, ash.data(), sh_local, sh_all, 1, T, tls.shq);
    cut[n_cut++] = sh_in->part();
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

  // 7. experts. A few tokens: every (token, expert) product in a few parallel regions; more: tokens
  // grouped by expert, one product per expert over its tokens. y: [T][k][dl_out]
  scratch_size(y, T * k * dl_out);  // every (token, slot) row written below
  used.clear();  // ascending expert ids
  if (fused) {
    used.assign(sel.begin(), sel.end());
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
  } else {
    rows.resize(E);
    for (auto& r : rows) r.clear();
    for (int64_t i = 0; i < T * k; ++i) rows[sel[i]].push_back(i);
    for (int32_t e = 0; e < E; ++e)
      if (!rows[e].empty()) used.push_back(e);
  }
  ExpertLayer src(ctx, il, used, x, T, k);
  if (fused) {
    experts_rows(ctx, situ, w, src, used, sel.data(), T, k, z, zq, dl, y.data());
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
      const LinearJob gate_up[] = {{me.gate, zin.data(), a.data(), whole_rows}, {me.up, zin.data(), b.data(), whole_rows}};
      linear_batch(quiet, gate_up, 2, n);  // one quantized input, one region
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
    scratch_size(sh, T * H_out);
    sh_in->product(sh.data());
    trace("ffn_shexp", sh.data(), H_out);
    for (int64_t i = 0; i < T * H_out; ++i) out[i] = out[i] + sh[i];
  }
  gather(ctx, {{out, H_out, H}}, T);
}

}  // namespace k3::model
