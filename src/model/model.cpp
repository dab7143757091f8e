#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/mmap.h"
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
  for (const auto& f : m->file_.files()) populate_pages(f->base(), f->size());  // no page fault per first read
  return m;
}

namespace {

// Errors name the segment when the batch has several.
std::string seg_prefix(size_t i, size_t n_seg) {
  return n_seg > 1 ? strprintf("sequence %zu of the batch: ", i) : std::string();
}

}  // namespace

void Model::forward(State& st, const int32_t* ids, int64_t T, const RunOptions& opt, Logits want,
                    std::vector<float>* logits) const {
  const Segment seg{&st, ids, T, want, logits};
  forward(std::span<const Segment>(&seg, 1), opt);
}

void Model::forward(std::span<const Segment> batch, const RunOptions& opt) const {
  K3_ASSERT(opt.pool != nullptr);
  if (batch.empty()) fail("forward: empty batch");
  // Everything is checked before any state changes.
  const size_t n_seg = batch.size();
  // Scratch (ops.h): kept per thread, named through references.
  thread_local struct {
    std::vector<SegRows> segs;
    std::vector<float> h, mix, xn, a, p, all;
    std::vector<int64_t> rows;
    Bank bank, tail;
  } tls;
  std::vector<SegRows>& segs = tls.segs;
  segs.assign(n_seg, SegRows{});
  int64_t T = 0;
  for (size_t i = 0; i < n_seg; ++i) {
    const Segment& sg = batch[i];
    K3_ASSERT(sg.state != nullptr && (sg.want == Logits::None || sg.logits != nullptr));
    for (const InputRows& r : sg.rows) K3_ASSERT(r.n >= 0 && (r.n == 0 || r.data != nullptr));
    auto bad = [&](const std::string& msg) { throw SegmentError(i, seg_prefix(i, n_seg) + msg); };
    if (sg.n <= 0) bad("forward: no tokens");
    for (int64_t t = 0; t < sg.n; ++t)
      if (sg.ids[t] < 0 || sg.ids[t] >= n_vocab())
        bad(strprintf("token id %d at index %lld is outside the vocabulary (0..%d)", sg.ids[t],
                      static_cast<long long>(t), n_vocab() - 1));
    const State& st = *sg.state;
    if (st.n_past_ + sg.n > st.n_ctx_)
      bad(strprintf("context size exceeded: %lld tokens in the sequence + %lld new > context size %lld (use -c to "
                    "raise it)",
                    static_cast<long long>(st.n_past_), static_cast<long long>(sg.n),
                    static_cast<long long>(st.n_ctx_)));
    for (size_t j = 0; j < i; ++j)
      if (batch[j].state == sg.state) bad(strprintf("the same state as sequence %zu", j));
    segs[i] = {sg.state, st.n_past_, T, sg.n};
    T += sg.n;
  }

  const HParams& hp = hp_;
  const int64_t H = hp.n_embd;
  const float eps = hp.rms_eps;
  Ctx ctx{*opt.pool, opt.f16_rule, opt.trace, opt.observer, opt.experts};
  auto trace = [&](const char* name, int il, const float* v, int64_t rows, int64_t n) {
    if (opt.trace) opt.trace->record(name, il, v, rows, n);
  };

  // h: running stream, u/v: mixes, xn: normed block input, a: block output, p: post-attention stream
  std::vector<float>&h = tls.h, &mix = tls.mix, &xn = tls.xn, &a = tls.a, &p = tls.p;
  scratch_zeros(h, T * H), scratch_zeros(mix, T * H), scratch_zeros(xn, T * H), scratch_zeros(a, T * H), scratch_zeros(p, T * H);
  for (size_t i = 0; i < n_seg; ++i) {
    float* x = h.data() + segs[i].row0 * H;
    embed(w_.token_embd, batch[i].ids, segs[i].n, x);
    for (const InputRows& r : batch[i].rows) {
      const int64_t lo = std::max<int64_t>(r.at, 0), hi = std::min(r.at + r.n, segs[i].n);
      if (lo < hi) std::copy_n(r.data + (lo - r.at) * H, (hi - lo) * H, x + lo * H);
    }
  }
  trace("inp_embd", -1, h.data(), T, H);

  Bank& bank = tls.bank;
  bank.reset(T, H);
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
      kda_forward(ctx, hp, lw, il, segs, xn.data(), a.data());
      trace("kda_out", li, a.data(), T, H);
    } else {
      mla_forward(ctx, hp, lw, il, segs, xn.data(), a.data());
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
  for (const SegRows& sg : segs) sg.state->n_past_ = sg.n_past + sg.n;
  scratch_trim();

  // head: final mix, norm and LM head over the rows whose logits are wanted, gathered in batch order
  std::vector<int64_t>& rows = tls.rows;
  rows.clear();
  const Segment* only = nullptr;  // the one segment that wants logits, if only one does
  size_t n_want = 0;
  for (size_t i = 0; i < n_seg; ++i) {
    if (batch[i].want == Logits::None) continue;
    const int64_t first = batch[i].want == Logits::Last ? segs[i].n - 1 : 0;
    for (int64_t t = first; t < segs[i].n; ++t) rows.push_back(segs[i].row0 + t);
    only = &batch[i];
    ++n_want;
  }
  if (rows.empty()) return;
  const int64_t R = static_cast<int64_t>(rows.size());
  auto gather = [&](const float* src, float* dst) {
    for (int64_t r = 0; r < R; ++r) std::copy_n(src + rows[r] * H, H, dst + r * H);
  };
  Bank& tail = tls.tail;
  tail.reset(R, H);
  for (size_t j = 0; j < bank.n; ++j) gather(bank.entries[j].data(), tail.add());
  gather(h.data(), p.data());
  if (hp.attn_res()) attnres_mix(tail, p.data(), w_.output_res_score.f32(), eps, mix.data());
  else std::copy_n(p.begin(), R * H, mix.begin());
  ops::rmsnorm_rows(mix.data(), w_.output_norm.f32(), xn.data(), R, H, eps);
  trace("result_norm", -1, xn.data(), R, H);
  const int64_t V = hp.n_vocab;
  std::vector<float>& all = tls.all;
  std::vector<float>* out = n_want == 1 ? only->logits : &all;
  out->resize(static_cast<size_t>(R) * V);
  linear(ctx, w_.output, xn.data(), R, out->data());
  trace("result_output", -1, out->data(), R, V);
  if (n_want == 1) return;
  int64_t r = 0;
  for (const Segment& sg : batch) {
    if (sg.want == Logits::None) continue;
    const int64_t n = sg.want == Logits::Last ? 1 : sg.n;
    sg.logits->assign(all.begin() + r * V, all.begin() + (r + n) * V);
    r += n;
  }
}

void Model::prefill(State& st, const std::vector<int32_t>& ids, int64_t n_batch, const RunOptions& opt, Logits want,
                    std::vector<float>* logits, std::span<const InputRows> rows) const {
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
  std::vector<InputRows> shifted(rows.begin(), rows.end());
  for (int64_t b = 0; b < n; b += n_batch) {
    const int64_t T = std::min(n_batch, n - b);
    const bool last_chunk = b + T == n;
    const Logits w = want == Logits::All ? Logits::All : (want == Logits::Last && last_chunk ? Logits::Last : Logits::None);
    for (size_t i = 0; i < rows.size(); ++i) shifted[i].at = rows[i].at - b;
    const Segment seg{&st, ids.data() + b, T, w, &part, shifted};
    forward(std::span<const Segment>(&seg, 1), opt);
    if (w != Logits::None && logits) logits->insert(logits->end(), part.begin(), part.end());
  }
}

}  // namespace k3::model
