#include "spec/dspark.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"
#include "model/embedding.h"
#include "model/sampler.h"
#include "tensor/gemm.h"

namespace k3::spec {

using model::Ctx;
using model::linear;
using model::norm_rows;

std::unique_ptr<DraftModel> DraftModel::load(const std::string& path, const model::Model& target, uint32_t block) {
  std::unique_ptr<DraftModel> d(new DraftModel());
  d->file_ = gguf::Model::open(path);
  try {
    d->p_ = DraftParams::from_metadata(d->file_.meta());
  } catch (const Error& e) {
    fail("%s: %s", path.c_str(), e.what());
  }
  d->w_ = bind_draft(d->file_, d->p_);
  check_fit(d->p_, d->w_, target, block, path);
  d->target_ = &target;

  // §7: frequencies, magnitude and softmax scale
  const DraftParams& p = d->p_;
  const double D = p.d_rope, theta = p.rope_base, s = p.yarn_factor;
  auto ym = [&](double m) { return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
  double lo = 0, hi = 0;
  if (p.yarn) {
    auto corr = [&](double r) { return D * std::log(p.yarn_orig_ctx / (2 * std::numbers::pi * r)) / (2 * std::log(theta)); };
    lo = std::max(std::floor(corr(p.yarn_beta_fast)), 0.0);
    hi = std::min(std::ceil(corr(p.yarn_beta_slow)), D - 1);
    if (lo == hi) hi += 0.001;
  }
  for (uint32_t i = 0; i < p.d_rope / 2; ++i) {
    const double f = std::pow(theta, 2.0 * i / D);
    const double ramp = p.yarn ? std::clamp((i - lo) / (hi - lo), 0.0, 1.0) : 0.0;
    d->omega_.push_back(ramp / (s * f) + (1 - ramp) / f);
  }
  const double all = p.yarn ? ym(p.yarn_mscale_all_dim) : 1.0;
  d->mscale_ = static_cast<float>(p.yarn ? ym(p.yarn_mscale) / all : 1.0);
  d->kappa_ = static_cast<float>(all * all / std::sqrt(static_cast<double>(p.d_qk())));
  return d;
}

uint64_t DraftModel::step_bytes() const {
  uint64_t n = w_.context_proj.bytes() + w_.markov_w2.bytes() + target_->weights().output.bytes();
  for (const DraftLayerWeights& l : w_.layers)
    for (const model::Tensor* t : {&l.q_a, &l.q_b, &l.kv_a, &l.k_b, &l.v_b, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down})
      n += t->bytes();
  return n;
}

std::string DraftModel::identity() const {
  const gguf::File& f = *file_.files().front();
  return strprintf("%s (%s, %zu bytes)", file_.meta().get_str_opt("general.name").value_or("unnamed").c_str(),
                   f.path().c_str(), f.size());
}

void DraftModel::rope(float* v, int64_t pos) const {
  for (size_t i = 0; i < omega_.size(); ++i) {
    const double phi = static_cast<double>(pos) * omega_[i];
    const float c = static_cast<float>(std::cos(phi) * mscale_), s = static_cast<float>(std::sin(phi) * mscale_);
    const float a = v[2 * i], b = v[2 * i + 1];
    v[2 * i] = a * c - b * s;
    v[2 * i + 1] = a * s + b * c;
  }
}

void DraftModel::add_context(Ctx& ctx, const float* taps, int64_t n, int64_t pos0, std::vector<float>& side) const {
  const int64_t H = p_.n_embd, row = p_.row(), r_kv = p_.kv_lora, L = p_.n_layer, W = L * row;
  K3_ASSERT(static_cast<int64_t>(side.size()) == pos0 * W);
  thread_local std::vector<float> c, kv;
  scratch_zeros(c, n * H), scratch_zeros(kv, n * row);
  // 1. c = rmsnorm(W_c T) * context_norm
  linear(ctx, w_.context_proj, taps, n, c.data());
  norm_rows(ctx, c.data(), w_.context_norm.f32(), c.data(), n, H, p_.eps);
  side.resize((pos0 + n) * W);
  for (int64_t l = 0; l < L; ++l) {
    // 2-3. per layer kv = W_kva c (no input norm), c_hat normed, k_hat rotated at its position
    const DraftLayerWeights& lw = w_.layers[l];
    linear(ctx, lw.kv_a, c.data(), n, kv.data());
    for (int64_t t = 0; t < n; ++t) {
      float* r = &kv[t * row];
      model::ops::rmsnorm_mul(r, lw.kv_a_norm.f32(), r, r_kv, p_.eps);
      rope(r + r_kv, pos0 + t);
      std::copy_n(r, row, side.data() + (pos0 + t) * W + l * row);
    }
  }
}

void DraftModel::propose(Ctx& ctx, const std::vector<float>& side, int32_t anchor, int64_t n_q,
                         std::vector<int32_t>& out, Debug* dbg) const {
  const int64_t H = p_.n_embd, row = p_.row(), r_kv = p_.kv_lora, d_rope = p_.d_rope, L = p_.n_layer, W = L * row;
  const int64_t nh = p_.n_head, d_nope = p_.d_nope, d_qk = p_.d_qk(), d_v = p_.d_v, F = p_.n_ff;
  const int64_t p = static_cast<int64_t>(side.size()) / W, N = p + n_q;  // keys: context rows, then block rows
  const int64_t V = p_.n_vocab;
  out.clear();
  if (n_q <= 0) return;
  thread_local struct {
    std::vector<float> x, y, qa, q, kv, qn, qt, Q, lat, oh, o, a, g, u, logits, m1, bias;
    std::vector<int32_t> ids;
    std::vector<model::LinearJob> jobs;
  } tls;
  auto& s = tls;
  scratch_zeros(s.x, n_q * H), scratch_zeros(s.y, n_q * H), scratch_zeros(s.qa, n_q * p_.q_lora);
  scratch_zeros(s.q, n_q * nh * d_qk), scratch_zeros(s.kv, n_q * row), scratch_zeros(s.qn, nh * n_q * d_nope);
  scratch_zeros(s.qt, nh * n_q * r_kv), scratch_zeros(s.Q, nh * n_q * row), scratch_zeros(s.lat, nh * n_q * r_kv);
  scratch_zeros(s.oh, nh * n_q * d_v), scratch_zeros(s.o, n_q * nh * d_v), scratch_zeros(s.a, n_q * H);
  scratch_zeros(s.g, n_q * F), scratch_zeros(s.u, n_q * F);

  // §6: row 0 is the anchor, the others the mask token
  s.ids.assign(n_q, static_cast<int32_t>(p_.mask_id));
  s.ids[0] = anchor;
  model::embed(w_.token_embd ? w_.token_embd : target_->weights().token_embd, s.ids.data(), n_q, s.x.data());

  for (int64_t l = 0; l < L; ++l) {
    const DraftLayerWeights& lw = w_.layers[l];
    // 1-2. y, the query (rope part rotated at the row's position)
    norm_rows(ctx, s.x.data(), lw.attn_norm.f32(), s.y.data(), n_q, H, p_.eps);
    linear(ctx, lw.q_a, s.y.data(), n_q, s.qa.data());
    norm_rows(ctx, s.qa.data(), lw.q_a_norm.f32(), s.qa.data(), n_q, p_.q_lora, p_.eps);
    linear(ctx, lw.q_b, s.qa.data(), n_q, s.q.data());
    // 3. the block's own rows, never cached
    linear(ctx, lw.kv_a, s.y.data(), n_q, s.kv.data());
    for (int64_t t = 0; t < n_q; ++t) {
      float* r = &s.kv[t * row];
      model::ops::rmsnorm_mul(r, lw.kv_a_norm.f32(), r, r_kv, p_.eps);
      rope(r + r_kv, p + t);
      for (int64_t h = 0; h < nh; ++h) rope(&s.q[(t * nh + h) * d_qk + d_nope], p + t);
    }
    // 4. absorbed attention: Q_h = [k_b_h q_nope | q_rope] against the rows [c_hat | k_hat]
    s.jobs.assign(nh, model::LinearJob{});
    for (int64_t h = 0; h < nh; ++h) {
      for (int64_t t = 0; t < n_q; ++t)
        std::copy_n(&s.q[(t * nh + h) * d_qk], d_nope, &s.qn[(h * n_q + t) * d_nope]);
      s.jobs[h] = {lw.k_b.mat(h), &s.qn[h * n_q * d_nope], &s.qt[h * n_q * r_kv], lw.k_b.whole_rows()};
    }
    model::linear_batch(ctx, s.jobs.data(), s.jobs.size(), n_q);
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t t = 0; t < n_q; ++t) {
        float* Qt = &s.Q[(h * n_q + t) * row];
        std::copy_n(&s.qt[(h * n_q + t) * r_kv], r_kv, Qt);
        std::copy_n(&s.q[(t * nh + h) * d_qk + d_nope], d_rope, Qt + r_kv);
      }
    // No mask: every row sees every context row and every block row.
    const float* ctx_rows = side.data() + l * row;
    const float* blk_rows = s.kv.data();
    model::par_for(ctx, nh, N * row * 2 * n_q, [&](int64_t h0, int64_t h1) {
      thread_local std::vector<float> sc;
      scratch_zeros(sc, n_q * N);
      for (int64_t h = h0; h < h1; ++h) {
        const float* Qh = &s.Q[h * n_q * row];
        if (p > 0) gemm_rows(GgmlType::F32, row, ctx_rows, W * sizeof(float), p, Qh, row * sizeof(float), n_q, sc.data(), N);
        gemm_rows(GgmlType::F32, row, blk_rows, row * sizeof(float), n_q, Qh, row * sizeof(float), n_q, sc.data() + p, N);
        for (int64_t t = 0; t < n_q; ++t) {
          float* pt = &sc[t * N];
          for (int64_t j = 0; j < N; ++j) pt[j] *= kappa_;
          model::ops::softmax(pt, N);
          float* o = &s.lat[(h * n_q + t) * r_kv];
          std::fill_n(o, r_kv, 0.0f);
          for (int64_t j = 0; j < N; ++j) {
            const float* c = j < p ? ctx_rows + j * W : blk_rows + (j - p) * row;
            const float pj = pt[j];
            for (int64_t i = 0; i < r_kv; ++i) o[i] += pj * c[i];
          }
        }
      }
    });
    // values per head, heads concatenated, output projection
    for (int64_t h = 0; h < nh; ++h) s.jobs[h] = {lw.v_b.mat(h), &s.lat[h * n_q * r_kv], &s.oh[h * n_q * d_v], lw.v_b.whole_rows()};
    model::linear_batch(ctx, s.jobs.data(), s.jobs.size(), n_q);
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t t = 0; t < n_q; ++t) std::copy_n(&s.oh[(h * n_q + t) * d_v], d_v, &s.o[(t * nh + h) * d_v]);
    linear(ctx, lw.wo, s.o.data(), n_q, s.a.data());
    for (int64_t i = 0; i < n_q * H; ++i) s.x[i] += s.a[i];
    // 5. SwiGLU MLP
    norm_rows(ctx, s.x.data(), lw.ffn_norm.f32(), s.y.data(), n_q, H, p_.eps);
    const model::LinearJob gu[] = {{lw.ffn_gate, s.y.data(), s.g.data()}, {lw.ffn_up, s.y.data(), s.u.data()}};
    model::linear_batch(ctx, gu, 2, n_q);
    model::ops::silu_n(s.g.data(), n_q * F);
    for (int64_t i = 0; i < n_q * F; ++i) s.g[i] *= s.u[i];
    linear(ctx, lw.ffn_down, s.g.data(), n_q, s.a.data());
    for (int64_t i = 0; i < n_q * H; ++i) s.x[i] += s.a[i];
  }
  // the draft's own final norm, then the target's output matrix: base logits
  norm_rows(ctx, s.x.data(), w_.output_norm.f32(), s.y.data(), n_q, H, p_.eps);
  scratch_zeros(s.logits, n_q * V);
  linear(ctx, target_->weights().output, s.y.data(), n_q, s.logits.data());
  if (dbg) {
    dbg->hidden.assign(s.y.begin(), s.y.begin() + n_q * H);
    dbg->base.assign(s.logits.begin(), s.logits.begin() + n_q * V);
  }
  // §8: the Markov chain, row after row: l_t = b_t + W_2 W_1[prev]
  scratch_zeros(s.m1, p_.markov_rank), scratch_zeros(s.bias, V);
  int32_t prev = anchor;
  for (int64_t t = 0; t < n_q; ++t) {
    model::embed(w_.markov_w1, &prev, 1, s.m1.data());
    linear(ctx, w_.markov_w2, s.m1.data(), 1, s.bias.data());
    float* lt = &s.logits[t * V];
    for (int64_t v = 0; v < V; ++v) lt[v] += s.bias[v];
    prev = model::Sampler::argmax(lt, static_cast<int32_t>(V));
    out.push_back(prev);
  }
}

}  // namespace k3::spec
