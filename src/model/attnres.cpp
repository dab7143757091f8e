#include "model/attnres.h"

#include <cstring>

#include "model/ops.h"
#include "tensor/kernels.h"

namespace k3::model {

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
  const QuantKernels& f32 = kernels(GgmlType::F32);
  par_for(ctx, T, static_cast<int64_t>(n_src) * H * 4, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> normed, z;  // scratch (ops.h) of the thread running this chunk
    scratch_zeros(normed, H), scratch_zeros(z, n_src);
    for (int64_t t = t0; t < t1; ++t) {
      auto src = [&](size_t j) { return j < bank.n ? bank.entries[j].data() + t * H : c + t * H; };
      for (size_t j = 0; j < n_src; ++j) {  // scores from the normalized sources (ops::rmsnorm)
        const float* x = src(j);
        const float scale = j < known ? bank.scales[j][t] : ops::rms_scale(x, H, eps);
        if (j >= known && j < bank.n) bank.scales[j][t] = scale;
        for (int64_t q = 0; q < H; ++q) normed[q] = x[q] * scale;
        f32.vec_dot(H, &z[j], normed.data(), w);
      }
      ops::softmax(z.data(), static_cast<int64_t>(n_src));
      float* o = out + t * H;
      const float* s0 = src(0);
      for (int64_t q = 0; q < H; ++q) o[q] = z[0] * s0[q];
      for (size_t j = 1; j + 1 < n_src; ++j) {
        const float* s = src(j);
        for (int64_t q = 0; q < H; ++q) o[q] = o[q] + z[j] * s[q];
      }
      const float* cur = src(n_src - 1);
      const float pn = z[n_src - 1];
      for (int64_t q = 0; q < H; ++q) o[q] = o[q] + pn * cur[q];
    }
  });
  bank.scaled = bank.n, bank.scale_eps = eps;
}

}  // namespace k3::model
