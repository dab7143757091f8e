#include "model/attnres.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "model/ops.h"
#include "tensor/vecmath.h"

namespace k3::model {
namespace {

// z[j] = float(Σ_q double(x_j[q]·scale_j·w[q])) for M sources, summed in q order (ggml's rms_norm,
// mul and sum_rows): M chains of double adds side by side, in registers.
template <int M>
void score_sums(const float* const* x, const float* scale, const float* w, int64_t H, float* z) {
  double s[M] = {};
  for (int64_t q = 0; q < H; ++q)
    for (int j = 0; j < M; ++j) s[j] += static_cast<double>(x[j][q] * scale[j] * w[q]);
  for (int j = 0; j < M; ++j) z[j] = static_cast<float>(s[j]);
}

}  // namespace

void attnres_mix(Ctx& ctx, Bank& bank, const float* c, const float* w, float eps, float* out) {
  const int64_t T = bank.T, H = bank.H;
  if (bank.empty()) {
    std::memcpy(out, c, sizeof(float) * T * H);
    return;
  }
  const size_t n_src = bank.n + 1;
  if (bank.scale_eps != eps) bank.scaled = 0;
  const size_t known = bank.scaled;  // entries [known, n) get their scales in this mix
  if (bank.scales.size() < bank.n) bank.scales.resize(bank.n);
  for (size_t j = known; j < bank.n; ++j) bank.scales[j].resize(T);
  const VecMath& vm = vecmath();
  // In llama.cpp's order (its res_mix): the scores are rms_norm, mul and sum_rows (the products
  // rounded, then summed in double in element order: the sources side by side, chains of their own),
  // the softmax ggml's, and the bank's part of the sum fused multiply-adds from 0 (dsv4_hc_pre)
  // before p_n·c is added.
  par_for(ctx, T, static_cast<int64_t>(n_src) * H * 4, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> scale, z;  // scratch (ops.h) of the thread running this chunk
    thread_local std::vector<const float*> x;
    scratch_zeros(scale, n_src), scratch_zeros(z, n_src), x.resize(n_src);
    for (int64_t t = t0; t < t1; ++t) {
      auto src = [&](size_t j) { return j < bank.n ? bank.entries[j].data() + t * H : c + t * H; };
      for (size_t j = 0; j < n_src; ++j) {
        x[j] = src(j);
        scale[j] = j < known ? bank.scales[j][t] : ops::rms_scale(x[j], H, eps);
        if (j >= known && j < bank.n) bank.scales[j][t] = scale[j];
      }
      for (size_t j = 0; j < n_src; j += 4) {
        const size_t m = std::min<size_t>(4, n_src - j);
        (m == 4   ? score_sums<4>
         : m == 3 ? score_sums<3>
         : m == 2 ? score_sums<2>
                  : score_sums<1>)(&x[j], &scale[j], w, H, &z[j]);
      }
      ops::softmax(z.data(), static_cast<int64_t>(n_src));
      float* o = out + t * H;
      std::fill_n(o, H, 0.0f);
      for (size_t j = 0; j + 1 < n_src; ++j) vm.mad(o, src(j), z[j], H);
      const float* cur = src(n_src - 1);
      const float pn = z[n_src - 1];
      for (int64_t q = 0; q < H; ++q) o[q] = o[q] + pn * cur[q];
    }
  });
  bank.scaled = bank.n, bank.scale_eps = eps;
}

}  // namespace k3::model
