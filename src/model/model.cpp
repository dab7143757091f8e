#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

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
#include "tensor/repack.h"

namespace k3::model {

namespace {

// Faults in the pages of the weights a process of a group holds (its share of each tensor, every
// expert's rows of a cut stack), and hardly any others: each range is read ahead (MADV_WILLNEED)
// before its pages are mapped, so the faults find them cached and read nothing further. (Measured
// on the medium preset at 2 processes from a cold cache: 2.2-2.5 s, 2-15 % more pages read than
// the share; with random-access advice on the mapping 4x slower after the read-ahead, 300x
// without it.) Skipped when the shares exceed half of memory.
void populate_share(const HParams& hp, const Weights& w) {
  std::vector<std::pair<const uint8_t*, size_t>> ranges;
  size_t total = 0;
  for_each_tensor(hp, [&](const TensorRef& r) {
    const Tensor& t = bound(w, r);
    if (!t) return;
    const size_t mat = static_cast<size_t>(t.ne[1]) * t.row_bytes();
    if (t.nb2)
      for (int64_t e = 0; e < t.ne[2]; ++e) ranges.emplace_back(t.data + e * t.nb2, mat);
    else
      ranges.emplace_back(t.data, t.bytes());
    total += t.bytes();
  });
  const long page = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_PHYS_PAGES);
  if (page <= 0 || pages <= 0 || total / static_cast<size_t>(page) > static_cast<size_t>(pages) / 2) return;
  const uintptr_t mask = ~static_cast<uintptr_t>(page - 1);
  for (const auto& [p, n] : ranges) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p) & mask;
    madvise(reinterpret_cast<void*>(a), reinterpret_cast<uintptr_t>(p) + n - a, MADV_WILLNEED);
  }
  for (const auto& [p, n] : ranges) populate_pages(p, n);
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, Group* group) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = gguf::Model::open(path);
  try {
    m->hp_ = HParams::from_metadata(m->file_.meta());
  } catch (const Error& e) {
    fail("%s: %s", path.c_str(), e.what());
  }
  const Placement where = group ? group->placement() : Placement{};
  m->group_ = group;
  m->w_ = bind_weights(m->file_, m->hp_, where);
  m->layers_ = stage_layers(m->hp_.n_layer, where);
  for_each_tensor(m->hp_, [&](const TensorRef& r) {
    const Tensor& t = bound(m->w_, r);
    if (t) m->weight_bytes_ += t.bytes();
  });
  if (where.whole())
    for (const auto& f : m->file_.files()) populate_pages(f->base(), f->size());  // no page fault per first read
  else
    populate_share(m->hp_, m->w_);
  return m;
}

size_t Model::repack_weights() {
  if (repacked_) return 0;
  std::vector<Tensor*> mats;
  for_each_tensor(hp_, [&](const TensorRef& r) {
    Tensor& t = bound(w_, r);
    if (!t || r.def.global == &Weights::token_embd) return;
    const GgmlType rt = repacked_type(t.type, t.ne[0], t.ne[1]);
    if (rt == t.type) return;
    if (repack_keeps_bytes(t.type)) t.type = rt;  // read in place
    else mats.push_back(&t);
  });
  // Pieces of about 8 MB of the matrices, worked on by every core (a K3 trunk is tens of GB).
  struct Piece {
    size_t m;            // mats[m]
    const uint8_t* src;  // in the mapping
    size_t off;          // bytes into the matrix
    int64_t rows;
  };
  std::vector<Piece> pieces;
  for (size_t m = 0; m < mats.size(); ++m) {
    const Tensor* t = mats[m];
    const size_t rb = t->row_bytes();
    const int64_t step = std::max<int64_t>(1, static_cast<int64_t>((size_t{8} << 20) / rb));
    for (int64_t e = 0; e < t->ne[2]; ++e)
      for (int64_t r = 0; r < t->ne[1]; r += step)
        pieces.push_back({m, t->data + e * t->mat_stride() + r * rb, static_cast<size_t>(e * t->ne[1] + r) * rb,
                          std::min(step, t->ne[1] - r)});
  }
  ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  auto each_piece = [&](auto&& f) {
    pool.chunks(static_cast<int64_t>(pieces.size()), 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) f(pieces[i]);
    });
  };
  // Which matrices the layout can hold, all known before a piece's pages are dropped below.
  std::vector<std::atomic<bool>> keep(mats.size());
  for (auto& k : keep) k = true;
  each_piece([&](const Piece& p) {
    const Tensor* t = mats[p.m];
    if (keep[p.m] && !repackable(t->type, p.src, p.rows, t->ne[0], t->row_bytes())) keep[p.m] = false;
  });
  std::vector<size_t> at(mats.size());
  size_t total = 0;
  for (size_t m = 0; m < mats.size(); ++m)
    if (keep[m]) at[m] = total, total += mats[m]->bytes();
  if (total == 0) return 0;
  repacked_ = std::make_unique<AnonymousRegion>(total, file_.files().front()->path() + ": repacked weights");
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  each_piece([&](const Piece& p) {
    if (!keep[p.m]) return;
    const Tensor* t = mats[p.m];
    const size_t n = static_cast<size_t>(p.rows) * t->row_bytes();
    uint8_t* dst = repacked_->data() + at[p.m] + p.off;
    std::memcpy(dst, p.src, n);
    repack_rows(t->type, dst, p.rows, t->ne[0], t->row_bytes());
    // the mapping's whole pages of it are no longer read
    const uintptr_t a = (reinterpret_cast<uintptr_t>(p.src) + page - 1) / page * page;
    const uintptr_t b = (reinterpret_cast<uintptr_t>(p.src) + n) / page * page;
    if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
  });
  for (size_t m = 0; m < mats.size(); ++m) {
    if (!keep[m]) continue;
    Tensor* t = mats[m];
    t->type = repacked_type(t->type, t->ne[0], t->ne[1]);
    t->data = repacked_->data() + at[m];
    t->nb2 = 0;
  }
  repacked_->seal();
  return total;
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
  thread_local std::vector<SegRows> t_segs;
  std::vector<SegRows>& segs = t_segs;
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
  if (!group_) return run(batch, segs, opt);
  group_->announce(batch, opt, hp_.n_embd);
  try {
    run(batch, segs, opt);
  } catch (const std::exception& e) {
    group_->abort(e.what());  // the others are inside the same pass
  }
}

void Model::run(std::span<const Segment> batch, std::span<const SegRows> segs, const RunOptions& opt) const {
  const HParams& hp = hp_;
  const int64_t H = hp.n_embd, V = hp.n_vocab;
  const float eps = hp.rms_eps;
  const size_t n_seg = batch.size();
  const int64_t T = batch_rows(segs);
  Ctx ctx{*opt.pool, opt.f16_rule, opt.trace, opt.observer, opt.experts, group_};
  auto trace = [&](const char* name, int il, const float* v, int64_t rows, int64_t n) {
    if (opt.trace) opt.trace->record(name, il, v, rows, n);
  };
  // Scratch (ops.h): kept per thread, named through references.
  thread_local struct {
    std::vector<SegRows> part;
    std::vector<float> h, mix, xn, a, p, all;
    std::vector<int32_t> ids;
    std::vector<int64_t> rows;
    Bank bank, tail;
  } tls;
  std::vector<SegRows>& part = tls.part;
  std::vector<int32_t>& ids = tls.ids;  // [T] every row's token
  ids.clear();
  for (size_t i = 0; i < n_seg; ++i) ids.insert(ids.end(), batch[i].ids, batch[i].ids + segs[i].n);
  // rows whose logits are wanted, in batch order; they land in `out` in that order
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
  std::vector<float>& all = tls.all;
  std::vector<float>* out = n_want == 1 ? only->logits : &all;
  if (!rows.empty()) out->resize(rows.size() * V);
  const bool head_here = layers_.last == hp.n_layer;

  // With pipeline stages, a batch large enough to be compute-bound goes through in micro-batches
  // of at least kMicroRows rows, so the stages overlap (a smaller one costs each stage a weight
  // read per micro-batch: faster whole). A micro-batch is rows [r0, r1) of the batch with each
  // segment's part of them.
  constexpr int64_t kMicroRows = 32;
  const int n_stages = group_ ? group_->placement().n_stages : 1;
  const int64_t n_micro = std::clamp<int64_t>(T / kMicroRows, 1, n_stages);
  size_t want0 = 0;  // wanted rows before this micro-batch
  for (int64_t mb = 0; mb < n_micro; ++mb) {
    const int64_t r0 = T * mb / n_micro, r1 = T * (mb + 1) / n_micro, Tm = r1 - r0;
    part.clear();
    for (const SegRows& sg : segs) {
      const int64_t b = std::max(r0, sg.row0), e = std::min(r1, sg.row0 + sg.n);
      if (b < e) part.push_back({sg.state, sg.n_past + (b - sg.row0), b - r0, e - b});
    }
    size_t want1 = want0;
    while (want1 < rows.size() && rows[want1] < r1) ++want1;

    // h: running stream, u/v: mixes, xn: normed block input, a: block output, p: post-attention stream
    std::vector<float>&h = tls.h, &mix = tls.mix, &xn = tls.xn, &a = tls.a, &p = tls.p;
    scratch_zeros(h, Tm * H), scratch_zeros(mix, Tm * H), scratch_zeros(xn, Tm * H), scratch_zeros(a, Tm * H),
        scratch_zeros(p, Tm * H);
    Bank& bank = tls.bank;
    bank.reset(Tm, H);
    if (layers_.first == 0) {
      embed(w_.token_embd, ids.data() + r0, Tm, h.data());
      if (group_) group_->gather_lookup(h.data(), ids.data() + r0, Tm, H, V);
      for (size_t i = 0; i < n_seg; ++i)  // input rows replace embeddings (positions in the segment)
        for (const InputRows& r : batch[i].rows) {
          const int64_t lo = std::max({r.at, int64_t{0}, r0 - segs[i].row0});
          const int64_t hi = std::min({r.at + r.n, segs[i].n, r1 - segs[i].row0});
          if (lo < hi) std::copy_n(r.data + (lo - r.at) * H, (hi - lo) * H, h.data() + (segs[i].row0 + lo - r0) * H);
        }
      trace("inp_embd", -1, h.data(), Tm, H);
    } else {
      group_->recv_stream(h.data(), bank, Tm, H);
    }

    for (uint32_t il = layers_.first; il < layers_.last; ++il) {
      const LayerWeights& lw = w_.layers[il];
      const int li = static_cast<int>(il);
      // attention: u = Mix(bank, h) with the bank before this layer; bank h if banking
      if (hp.attn_res()) attnres_mix(ctx, bank, h.data(), lw.attn_res_score.f32(), eps, mix.data());
      else mix = h;
      trace("attn_res_mix", li, mix.data(), Tm, H);
      const bool banked = hp.banks(il);
      if (banked) bank.push(h.data());
      norm_rows(ctx, mix.data(), lw.attn_norm.f32(), xn.data(), Tm, H, eps);
      trace("attn_norm", li, xn.data(), Tm, H);
      if (hp.attn_kind(il) == AttnKind::KDA) {
        kda_forward(ctx, hp, lw, il, part, xn.data(), a.data());
        trace("kda_out", li, a.data(), Tm, H);
      } else {
        mla_forward(ctx, hp, lw, il, part, xn.data(), a.data());
        trace("mla_out", li, a.data(), Tm, H);
      }
      if (banked) p = a;
      else
        for (int64_t i = 0; i < Tm * H; ++i) p[i] = h[i] + a[i];
      trace("ffn_inp", li, p.data(), Tm, H);

      // FFN: v = Mix(bank, p) with the bank including this layer's entry
      if (hp.attn_res()) attnres_mix(ctx, bank, p.data(), lw.ffn_res_score.f32(), eps, mix.data());
      else mix = p;
      trace("ffn_res_mix", li, mix.data(), Tm, H);
      norm_rows(ctx, mix.data(), lw.ffn_norm.f32(), xn.data(), Tm, H, eps);
      trace("ffn_norm", li, xn.data(), Tm, H);
      if (hp.ffn_kind(il) == FfnKind::Dense) {
        ffn_forward(ctx, hp, lw, il, xn.data(), Tm, a.data());
        trace("ffn_out", li, a.data(), Tm, H);
      } else {
        moe_forward(ctx, hp, lw, il, xn.data(), Tm, a.data());
        trace("ffn_moe_out", li, a.data(), Tm, H);
      }
      for (int64_t i = 0; i < Tm * H; ++i) h[i] = p[i] + a[i];
      trace("l_out", li, h.data(), Tm, H);
    }
    if (!head_here) {
      group_->send_stream(h.data(), bank, Tm, H);
      want0 = want1;
      continue;
    }

    // head: final mix, norm and LM head over the micro-batch's rows whose logits are wanted
    const int64_t R = static_cast<int64_t>(want1 - want0);
    if (R > 0) {
      auto gather_rows = [&](const float* src, float* dst) {
        for (int64_t r = 0; r < R; ++r) std::copy_n(src + (rows[want0 + r] - r0) * H, H, dst + r * H);
      };
      Bank& tail = tls.tail;
      tail.reset(R, H);
      for (size_t j = 0; j < bank.n; ++j) gather_rows(bank.entries[j].data(), tail.add());
      gather_rows(h.data(), p.data());
      if (hp.attn_res()) attnres_mix(ctx, tail, p.data(), w_.output_res_score.f32(), eps, mix.data());
      else std::copy_n(p.begin(), R * H, mix.begin());
      norm_rows(ctx, mix.data(), w_.output_norm.f32(), xn.data(), R, H, eps);
      trace("result_norm", -1, xn.data(), R, H);
      float* dst = out->data() + want0 * V;
      linear(ctx, w_.output, xn.data(), R, dst);
      if (group_) group_->gather_logits(dst, w_.output.ne[1], R, V);
      trace("result_output", -1, dst, R, V);
    }
    want0 = want1;
  }
  if (!head_here) {  // the last stage's logits, to the leader
    size_t w0 = 0;
    for (int64_t mb = 0; mb < n_micro; ++mb) {
      const int64_t r1 = T * (mb + 1) / n_micro;
      size_t w1 = w0;
      while (w1 < rows.size() && rows[w1] < r1) ++w1;
      if (w1 > w0) group_->gather_logits(out->data() + w0 * V, -1, static_cast<int64_t>(w1 - w0), V);
      w0 = w1;
    }
  }
  if (group_) group_->end_pass();
  for (const SegRows& sg : segs) sg.state->n_past_ = sg.n_past + sg.n, sg.state->pass_ = sg.n;
  scratch_trim();
  if (rows.empty() || n_want == 1) return;
  int64_t r = 0;
  for (const Segment& sg : batch) {
    if (sg.want == Logits::None) continue;
    const int64_t n = sg.want == Logits::Last ? 1 : sg.n;
    sg.logits->assign(all.begin() + r * V, all.begin() + (r + n) * V);
    r += n;
  }
}

void Model::prefill(State& st, const std::vector<int32_t>& ids, int64_t n_batch, const RunOptions& opt, Logits want,
                    std::vector<float>* logits, std::span<const InputRows> rows,
                    const std::function<void(int64_t, int64_t)>& each_pass) const {
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
    if (each_pass) each_pass(b, T);
  }
}

}  // namespace k3::model
