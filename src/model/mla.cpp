#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/trace.h"
#include "tensor/gemm.h"
#include "tensor/kernels.h"
#include "tensor/matvec.h"

namespace k3::model {

namespace {
thread_local std::vector<float> t_scores;  // per pool thread: one attention work item's scores
}  // namespace

void mla_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, std::span<const SegRows> segs,
                 const float* x, float* out) {
  const int64_t T = batch_rows(segs);
  // This process's nh heads (all of them alone), H_out of the H outputs.
  const int64_t nh = w.k_b.ne[2], r_kv = hp.kv_lora_rank, d_pe = hp.n_rot, d_qk = hp.n_embd_head_k_mla;
  const int64_t d_nope = hp.d_nope(), d_v = hp.n_embd_head_v_mla, row = hp.mla_row();
  const int64_t H = hp.n_embd, H_out = w.wo.ne[1], o_all = w.wo.ne[0];
  const float eps = hp.rms_eps;
  auto trace = [&](const char* name, const float* v, int64_t n) {
    if (ctx.trace) ctx.trace->record(name, static_cast<int>(il), v, T, n);
  };

  // 1. query [T][nh*d_qk]: per head d_nope values then d_pe values
  // Scratch (ops.h): kept per thread, named through references.
  struct Block {
    const SegRows* sg;
    int64_t t0, t1;  // batch rows, all of one segment
  };
  thread_local struct {
    std::vector<float> q, qa, kv, Q, qn, qt, lat, o, oh, gate;
    std::vector<const SegRows*> seg_of;
    std::vector<LinearJob> jobs;
    std::vector<Block> blocks;
    std::vector<uint8_t> oq;
    std::vector<std::vector<uint8_t>> xq;  // one token: a head run's activation in k_b's / v_b's format
    std::vector<MatvecPacks> packs;        // and packed for their kernels
  } tls;
  std::vector<float>&q = tls.q, &qa = tls.qa, &kv = tls.kv, &Q = tls.Q, &qn = tls.qn, &qt = tls.qt, &lat = tls.lat,
                     &o = tls.o, &oh = tls.oh, &gate = tls.gate;
  std::vector<const SegRows*>& seg_of = tls.seg_of;
  std::vector<LinearJob>& jobs = tls.jobs;
  std::vector<Block>& blocks = tls.blocks;
  // The products of the layer input (1, 2 and the gate of 7) in one parallel region.
  scratch_zeros(q, T * nh * d_qk);
  scratch_zeros(kv, T * row);
  LinearJob in[3] = {{w.kv_a, x, kv.data()}};
  size_t n_in = 1;
  if (hp.q_lora()) {
    scratch_zeros(qa, T * hp.q_lora_rank);
    in[n_in++] = {w.q_a, x, qa.data()};
  } else {
    in[n_in++] = {w.wq, x, q.data()};
  }
  if (w.attn_gate) {
    scratch_zeros(gate, T * nh * d_v);
    in[n_in++] = {w.attn_gate, x, gate.data()};
  }
  linear_batch(ctx, in, n_in, T);
  if (hp.q_lora()) {
    norm_rows(ctx, qa.data(), w.q_a_norm.f32(), qa.data(), T, hp.q_lora_rank, eps);
    linear(ctx, w.q_b, qa.data(), T, q.data());
  }
  trace("mla_q", q.data(), nh * d_qk);

  // 2-3. kv latent: cache row [rmsnorm(c) * kv_a_norm | k_pe], appended for all of a segment's tokens
  for (int64_t t = 0; t < T; ++t) ops::rmsnorm_mul(&kv[t * row], w.kv_a_norm.f32(), &kv[t * row], r_kv, eps);
  trace("mla_kv_row", kv.data(), row);
  seg_of.assign(T, nullptr);  // the segment of each row
  int64_t max_kv = 0, max_ctx = 0;        // longest cache after the append, longest context
  for (const SegRows& sg : segs) {
    std::vector<float>& cache = sg.state->layers[il].kv;
    cache.resize(static_cast<size_t>(sg.n_past + sg.n) * row);
    std::copy_n(&kv[sg.row0 * row], sg.n * row, cache.data() + sg.n_past * row);
    std::fill_n(seg_of.begin() + sg.row0, sg.n, &sg);
    max_kv = std::max(max_kv, sg.n_past + sg.n);
    max_ctx = std::max(max_ctx, sg.state->n_ctx());
  }

  // 4-6. per head: absorb k_b, Q_h = [k_b_h q_nope_h (r_kv) | q_pe_h (d_pe)]; causal softmax
  // attention over the latent cache and latent read-out [nh][T][r_kv]; value up-projection, the
  // heads concatenated in o. An attention work item is up to kAttnTokens consecutive tokens of one
  // head: their scores come from one tiled product with the cache rows (the same bits as one dot
  // per pair; rows past a token's causal limit are computed and ignored), and the read-out reads
  // each cache row once for all of them. Every output keeps its own order of operations, so the
  // result does not depend on T.
  scratch_zeros(Q, nh * T * row);  // [nh][T][row]
  scratch_zeros(lat, nh * T * r_kv);
  const float kappa = 1.0f / sqrtf(static_cast<float>(d_qk));
  constexpr int64_t kAttnTokens = 8;
  blocks.clear();
  for (const SegRows& sg : segs)
    for (int64_t t0 = sg.row0; t0 < sg.row0 + sg.n; t0 += kAttnTokens)
      blocks.push_back({&sg, t0, std::min(sg.row0 + sg.n, t0 + kAttnTokens)});
  const int64_t n_blk = static_cast<int64_t>(blocks.size());
  // Every pool thread's score buffer gets room for the longest context at once (in one region), so
  // items do not allocate as the context grows or when a thread first gets one.
  const size_t n_scores = static_cast<size_t>(kAttnTokens * max_ctx);
  if (t_scores.capacity() < n_scores) ctx.pool.run([&](int, int) { t_scores.reserve(n_scores); });
  // The calling thread's score buffer, sized for this pass.
  auto scores = [&]() -> std::vector<float>& {
    std::vector<float>& p = t_scores;
    if (p.capacity() < n_scores) p.reserve(n_scores);  // a thread the region above did not reach
    p.assign(kAttnTokens * max_kv, 0.0f);
    return p;
  };
  // Head h's block of tokens (their Q rows ready) into their lat rows, with the scores in p.
  auto attend = [&](int64_t h, const Block& blk, std::vector<float>& p) {
    const auto [sg, t0, t1] = blk;
    const float* cache = sg->state->layers[il].kv.data();
    const int64_t n_past = sg->n_past + (t0 - sg->row0);  // cache rows before the block's first token
    const int64_t ld = n_past + (t1 - t0);                   // cache rows the block's last token sees
    gemm_rows(GgmlType::F32, row, cache, row * sizeof(float), ld, &Q[(h * T + t0) * row], row * sizeof(float), t1 - t0,
              p.data(), ld);
    for (int64_t t = t0; t < t1; ++t) {
      float* pt = p.data() + (t - t0) * ld;
      const int64_t n_kv = n_past + (t - t0) + 1;
      for (int64_t s = 0; s < n_kv; ++s) pt[s] *= kappa;
      ops::softmax(pt, n_kv, true);  // llama.cpp's row: the KV cache, masked past n_kv
      float* o = &lat[(h * T + t) * r_kv];
      for (int64_t j = 0; j < r_kv; ++j) o[j] = 0.0f;
    }
    for (int64_t s = 0; s < ld; ++s) {
      const float* c = cache + s * row;
      for (int64_t t = std::max(t0, t0 + s - n_past); t < t1; ++t) {  // the tokens that see row s
        const float ps = p[(t - t0) * ld + s];
        float* o = &lat[(h * T + t) * r_kv];
        for (int64_t j = 0; j < r_kv; ++j) o[j] += ps * c[j];
      }
    }
  };
  // Q_h of token t from k_b_h q_nope_h (qt_h) and q_pe_h
  auto q_pe = [&](int64_t h, int64_t t, const float* qt_h) {
    float* Qt = &Q[(h * T + t) * row];
    std::copy_n(qt_h, r_kv, Qt);
    std::copy_n(&q[t * nh * d_qk + h * d_qk + d_nope], d_pe, Qt + r_kv);
  };
  scratch_zeros(o, T * o_all);  // [T][nh*d_v], room for every head's values (the gather below)
  const WeightView kb0 = w.k_b.mat(0), vb0 = w.v_b.mat(0);
  if (T == 1 && !ctx.observer && input_format(ctx, kb0, w.k_b.whole_rows()) == kernels(kb0.type).vec_dot_type &&
      input_format(ctx, vb0, w.v_b.whole_rows()) == kernels(vb0.type).vec_dot_type) {
    // One token: 4-6 in one region, each thread a run of consecutive heads (its share of k_b and
    // v_b two contiguous streams), their products on that thread with the kernels linear() takes at
    // one token (the same bits). A run's scratch is the run's, whichever thread takes it.
    const int64_t per = std::max<int64_t>(1, (nh + ctx.pool.size() - 1) / ctx.pool.size());  // nh may be 0
    const size_t runs = static_cast<size_t>((nh + per - 1) / per);
    std::vector<std::vector<uint8_t>>& xqs = tls.xq;  // (the workers' tls would be their own)
    std::vector<MatvecPacks>& run_packs = tls.packs;
    if (xqs.size() < runs) xqs.resize(runs), run_packs.resize(runs);
    scratch_zeros(qt, nh * r_kv);
    ctx.pool.chunks(nh, per, [&](int64_t h0, int64_t h1) {
      std::vector<uint8_t>& xq = xqs[h0 / per];
      MatvecPacks& packs = run_packs[h0 / per];
      for (int64_t h = h0; h < h1; ++h) {
        const WeightView kb = w.k_b.mat(h);
        const Matvec up{kb, quantize_activation(kb.type, &q[h * d_qk], d_nope, xq), &qt[h * r_kv]};
        matvec_here(&up, 1, packs);
        q_pe(h, 0, &qt[h * r_kv]);
      }
      std::vector<float>& p = scores();
      for (int64_t h = h0; h < h1; ++h) attend(h, blocks[0], p);
      for (int64_t h = h0; h < h1; ++h) {
        const WeightView vb = w.v_b.mat(h);
        const Matvec down{vb, quantize_activation(vb.type, &lat[h * r_kv], r_kv, xq), &o[h * d_v]};
        matvec_here(&down, 1, packs);
      }
    });
  } else {
    // Several tokens: k_b per head, a [T] x [d_nope -> r_kv] product each, all heads in one region
    scratch_zeros(qn, nh * T * d_nope), scratch_zeros(qt, nh * T * r_kv);  // [nh][T][d_nope], [nh][T][r_kv]
    jobs.assign(nh, LinearJob{});
    for (int64_t h = 0; h < nh; ++h) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < d_nope; ++i) qn[(h * T + t) * d_nope + i] = q[t * nh * d_qk + h * d_qk + i];
      jobs[h] = {w.k_b.mat(h), &qn[h * T * d_nope], &qt[h * T * r_kv], w.k_b.whole_rows()};
    }
    linear_batch(ctx, jobs.data(), jobs.size(), T);
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t t = 0; t < T; ++t) q_pe(h, t, &qt[(h * T + t) * r_kv]);
    // the attention, work items (head, block) over the threads
    par_for(ctx, nh * n_blk, max_kv * row * 2 * kAttnTokens, [&](int64_t b, int64_t e) {
      std::vector<float>& p = scores();
      for (int64_t item = b; item < e; ++item) attend(item / n_blk, blocks[item % n_blk], p);
    });
    // v_b per head
    scratch_zeros(oh, nh * T * d_v);  // [nh][T][d_v]
    jobs.assign(nh, LinearJob{});
    for (int64_t h = 0; h < nh; ++h) jobs[h] = {w.v_b.mat(h), &lat[h * T * r_kv], &oh[h * T * d_v], w.v_b.whole_rows()};
    linear_batch(ctx, jobs.data(), jobs.size(), T);
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t m = 0; m < d_v; ++m) o[t * nh * d_v + h * d_v + m] = oh[(h * T + t) * d_v + m];
  }
  trace("mla_attn", o.data(), nh * d_v);

  // 7. output gate from the normed layer input (its product above)
  if (w.attn_gate) {
    ops::sigmoid_n(gate.data(), static_cast<int64_t>(gate.size()));
    for (size_t i = 0; i < gate.size(); ++i) o[i] = o[i] * gate[i];
  }

  // 8. output projection over every head
  linear_gathered(ctx, w.wo, o.data(), nh * d_v, o_all, d_v, T, out, tls.oq);
  gather(ctx, {{out, H_out, H}}, T);
}

}  // namespace k3::model
