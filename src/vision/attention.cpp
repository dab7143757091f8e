#include "vision/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "tensor/scratch.h"
#include "tensor/sgemm.h"
#include "tensor/vecmath.h"

namespace k3::vision {

namespace {
constexpr int64_t kQ = 64, kK = 256;  // score tile 64 KB
}

void attention(const float* qkv, int64_t n, int64_t n_head, int64_t head_dim, std::vector<float>& kt, float* o,
               ThreadPool& pool) {
  const int64_t Q = n_head * head_dim, D = head_dim, row = 3 * Q;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // K transposed per head, [H][D][n], so both products are row-major sgemms: S = q·Kᵀ, acc += P·V.
  scratch_size(kt, static_cast<size_t>(Q * n));
  pool.parallel_for(Q, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t s = 0; s < n; ++s) kt[c * n + s] = qkv[s * row + Q + c];
  });

  const int64_t n_qb = (n + kQ - 1) / kQ;
  std::atomic<int64_t> next{0};
  const auto vexp = vecmath().exp;
  const Sgemm& g = sgemm_kernel();
  pool.run([&](int, int) {
    thread_local std::vector<float> S, acc, m, l, qp;
    scratch_size(S, kQ * kK), scratch_size(acc, kQ * D), scratch_size(m, kQ), scratch_size(l, kQ);
    scratch_size(qp, g.packed_size(kQ, D));
    for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < n_head * n_qb;) {
      const int64_t h = item / n_qb, t0 = item % n_qb * kQ, nt = std::min(kQ, n - t0);
      const float* q = qkv + t0 * row + h * D;
      std::fill_n(acc.begin(), nt * D, 0.0f);
      std::fill_n(m.begin(), nt, -std::numeric_limits<float>::infinity());
      std::fill_n(l.begin(), nt, 0.0f);
      g.pack_a(nt, D, q, row, qp.data());  // once for every key block
      for (int64_t s0 = 0; s0 < n; s0 += kK) {
        const int64_t ns = std::min(kK, n - s0);
        g.run(nt, ns, D, qp.data(), kt.data() + h * D * n + s0, n, S.data(), kK, false);
        for (int64_t t = 0; t < nt; ++t) {
          float* st = S.data() + t * kK;
          float mx = m[t];
          for (int64_t s = 0; s < ns; ++s) mx = std::max(mx, st[s] * scale);
          for (int64_t s = 0; s < ns; ++s) st[s] = st[s] * scale - mx;
          vexp(st, ns);
          float sum = 0;
          for (int64_t s = 0; s < ns; ++s) sum += st[s];
          const float corr = std::exp(m[t] - mx);  // 0 on the first block
          l[t] = l[t] * corr + sum;
          m[t] = mx;
          if (corr != 1.0f)
            for (int64_t d = 0; d < D; ++d) acc[t * D + d] *= corr;
        }
        sgemm(nt, D, ns, S.data(), kK, qkv + s0 * row + 2 * Q + h * D, row, acc.data(), D, true);
      }
      for (int64_t t = 0; t < nt; ++t) {
        const float inv = 1.0f / l[t];
        for (int64_t d = 0; d < D; ++d) o[(t0 + t) * Q + h * D + d] = acc[t * D + d] * inv;
      }
    }
  });
}

void attention_ref(const float* qkv, int64_t n, int64_t n_head, int64_t head_dim, float* o) {
  const int64_t Q = n_head * head_dim, D = head_dim, row = 3 * Q;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> p(static_cast<size_t>(n));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t t = 0; t < n; ++t) {
      double mx = -INFINITY;
      for (int64_t s = 0; s < n; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(qkv[t * row + h * D + d]) * qkv[s * row + Q + h * D + d];
        p[s] = dot * scale;
        mx = std::max(mx, p[s]);
      }
      double sum = 0;
      for (int64_t s = 0; s < n; ++s) sum += p[s] = std::exp(p[s] - mx);
      for (int64_t d = 0; d < D; ++d) {
        double v = 0;
        for (int64_t s = 0; s < n; ++s) v += p[s] * qkv[s * row + 2 * Q + h * D + d];
        o[t * Q + h * D + d] = static_cast<float>(v / sum);
      }
    }
}

}  // namespace k3::vision
