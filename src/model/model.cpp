#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "model/attnres.h"
#include "model/embedding.h"
#include "model/ffn.h"
#include "model/kda.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/registry.h"
#include "model/trace.h"

namespace k3::model {

std::unique_ptr<Model> Model::load(const std::string& path) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = gguf::Model::open(path);
  try {
    m->hp_ = HParams::from_metadata(m->file_.meta());
  } catch (const Error& e) {
    fail("%s: %s", path.c_str(), e.what());
  }
  m->w_ = bind_weights(m->file_, m->hp_);
  return m;
}

void Model::forward(State& st, const int32_t* ids, int64_t T, const RunOptions& opt, Logits want,
                    std::vector<float>* logits) const {
  K3_ASSERT(opt.pool != nullptr);
  if (T <= 0) fail("forward: empty batch");
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= n_vocab())
      fail("token id %d at index %lld is outside the vocabulary (0..%d)", ids[t], static_cast<long long>(t),
           n_vocab() - 1);
  const int64_t n_past = st.n_past_;
  if (n_past + T > st.n_ctx_)
    fail("context size exceeded: %lld tokens in the sequence + %lld new > context size %lld (use -c to raise it)",
         static_cast<long long>(n_past), static_cast<long long>(T), static_cast<long long>(st.n_ctx_));

  const HParams& hp = hp_;
  const int64_t H = hp.n_embd;
  const float eps = hp.rms_eps;
  Ctx ctx{*opt.pool, opt.f16_rule, opt.trace, opt.observer, opt.experts};
  auto trace = [&](const char* name, int il, const float* v, int64_t rows, int64_t n) {
    if (opt.trace) opt.trace->record(name, il, v, rows, n);
  };

  // h: running stream, u/v: mixes, xn: normed block input, a: block output, p: post-attention stream
  std::vector<float> h(T * H), mix(T * H), xn(T * H), a(T * H), p(T * H);
  embed(w_.token_embd, ids, T, h.data());
  trace("inp_embd", -1, h.data(), T, H);

  Bank bank{T, H, {}};
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& lw = w_.layers[il];
    const int li = static_cast<int>(il);
    // attention: u = Mix(bank, h) with the bank before this layer; bank h if banking
    if (hp.attn_res()) attnres_mix(bank, h.data(), lw.attn_res_score.f32(), eps, mix.data());
    else mix = h;
    trace("attn_res_mix", li, mix.data(), T, H);
    const bool banked = hp.banks(il);
    if (banked) bank.push(h.data());
    ops::rmsnorm_rows(mix.data(), lw.attn_norm.f32(), xn.data(), T, H, eps);
    trace("attn_norm", li, xn.data(), T, H);
    if (hp.attn_kind(il) == AttnKind::KDA) {
      kda_forward(ctx, hp, lw, il, st.layers[il], xn.data(), T, a.data());
      trace("kda_out", li, a.data(), T, H);
    } else {
      mla_forward(ctx, hp, lw, il, st.layers[il], n_past, xn.data(), T, a.data());
      trace("mla_out", li, a.data(), T, H);
    }
    if (banked) p = a;
    else
      for (int64_t i = 0; i < T * H; ++i) p[i] = h[i] + a[i];
    trace("ffn_inp", li, p.data(), T, H);

    // FFN: v = Mix(bank, p) with the bank including this layer's entry
    if (hp.attn_res()) attnres_mix(bank, p.data(), lw.ffn_res_score.f32(), eps, mix.data());
    else mix = p;
    trace("ffn_res_mix", li, mix.data(), T, H);
    ops::rmsnorm_rows(mix.data(), lw.ffn_norm.f32(), xn.data(), T, H, eps);
    trace("ffn_norm", li, xn.data(), T, H);
    if (hp.ffn_kind(il) == FfnKind::Dense) {
      ffn_forward(ctx, hp, lw, il, xn.data(), T, a.data());
      trace("ffn_out", li, a.data(), T, H);
    } else {
      moe_forward(ctx, hp, lw, il, xn.data(), T, a.data());
      trace("ffn_moe_out", li, a.data(), T, H);
    }
    for (int64_t i = 0; i < T * H; ++i) h[i] = p[i] + a[i];
    trace("l_out", li, h.data(), T, H);
  }
  st.n_past_ = n_past + T;

  if (want == Logits::None) return;
  // head: final mix, norm and LM head, only for the rows whose logits are wanted
  const int64_t first = want == Logits::Last ? T - 1 : 0, rows = T - first;
  Bank tail{rows, H, {}};
  for (const auto& e : bank.entries) tail.entries.emplace_back(e.begin() + first * H, e.end());
  if (hp.attn_res()) attnres_mix(tail, h.data() + first * H, w_.output_res_score.f32(), eps, mix.data());
  else std::copy(h.begin() + first * H, h.end(), mix.begin());
  ops::rmsnorm_rows(mix.data(), w_.output_norm.f32(), xn.data(), rows, H, eps);
  trace("result_norm", -1, xn.data(), rows, H);
  logits->resize(static_cast<size_t>(rows) * hp.n_vocab);
  linear(ctx, w_.output, xn.data(), rows, logits->data());
  trace("result_output", -1, logits->data(), rows, hp.n_vocab);
}

void Model::prefill(State& st, const std::vector<int32_t>& ids, int64_t n_batch, const RunOptions& opt, Logits want,
                    std::vector<float>* logits) const {
  if (ids.empty()) fail("prefill: no tokens");
  if (n_batch <= 0) n_batch = static_cast<int64_t>(ids.size());
  const int64_t n = static_cast<int64_t>(ids.size());
  if (st.n_past() + n > st.n_ctx())
    fail("context size exceeded: %lld tokens in the sequence + %lld new > context size %lld (use -c to raise it)",
         static_cast<long long>(st.n_past()), static_cast<long long>(n), static_cast<long long>(st.n_ctx()));
  for (int64_t t = 0; t < n; ++t)
    if (ids[t] < 0 || ids[t] >= n_vocab())
      fail("token id %d at index %lld is outside the vocabulary (0..%d)", ids[t], static_cast<long long>(t),
           n_vocab() - 1);
  if (logits) logits->clear();
  std::vector<float> part;
  for (int64_t b = 0; b < n; b += n_batch) {
    const int64_t T = std::min(n_batch, n - b);
    const bool last_chunk = b + T == n;
    const Logits w = want == Logits::All ? Logits::All : (want == Logits::Last && last_chunk ? Logits::Last : Logits::None);
    forward(st, ids.data() + b, T, opt, w, &part);
    if (w != Logits::None && logits) logits->insert(logits->end(), part.begin(), part.end());
  }
}

}  // namespace k3::model
