#include "vision/encoder.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "tensor/matmul_f32.h"
#include "tensor/scratch.h"
#include "tensor/vecmath.h"
#include "vision/attention.h"
#include "vision/resize.h"

namespace k3::vision {

namespace {

// y = x / sqrt(mean(x²) + eps) · g, row by row.
void rmsnorm(const float* x, const float* g, float* y, int64_t rows, int64_t n, float eps, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
      for (int64_t i = 0; i < n; ++i) y[r * n + i] = xr[i] * inv * g[i];
    }
  });
}

// gelu_tanh(u) = 0.5·u·(1 + tanh(z)) = u·sigmoid(2z), z = √(2/π)·(u + 0.044715·u³).
void gelu_tanh(float* u, int64_t n, ThreadPool& pool) {
  const auto sigmoid = vecmath().sigmoid;
  pool.parallel_for((n + 4095) / 4096, [&](int64_t b0, int64_t b1) {
    float z[4096];
    for (int64_t b = b0; b < b1; ++b) {
      float* v = u + b * 4096;
      const int64_t m = std::min<int64_t>(4096, n - b * 4096);
      for (int64_t i = 0; i < m; ++i) z[i] = 2.0f * 0.7978845608028654f * (v[i] + 0.044715f * v[i] * v[i] * v[i]);
      sigmoid(z, m);
      for (int64_t i = 0; i < m; ++i) v[i] *= z[i];
    }
  });
}

void gelu_erf(float* u, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) u[i] = 0.5f * u[i] * (1.0f + std::erf(u[i] * 0.70710678118654752f));
  });
}

// Source taps and weights of one output coordinate of PyTorch's F.interpolate (align_corners =
// False, no antialias) from `in` samples to `out`.
struct Taps1d {
  int n = 0;
  int64_t at[4];
  float w[4];
};

Taps1d interp_taps(int64_t in, int64_t out, int64_t o, PosInterp mode) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  float u = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
  Taps1d t;
  if (mode == PosInterp::Bilinear) {
    if (u < 0) u = 0;
    const int64_t i0 = static_cast<int64_t>(u);
    const float l1 = std::clamp(u - static_cast<float>(i0), 0.0f, 1.0f);
    t.n = 2;
    t.at[0] = i0, t.at[1] = i0 + (i0 < in - 1 ? 1 : 0);
    t.w[0] = 1.0f - l1, t.w[1] = l1;
    return t;
  }
  constexpr float A = -0.75f;
  const int64_t i0 = static_cast<int64_t>(std::floor(u));
  const float x = u - static_cast<float>(i0);
  auto near = [](float v) { return ((A + 2) * v - (A + 3)) * v * v + 1; };
  auto far = [](float v) { return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A; };
  t.n = 4;
  t.w[0] = far(x + 1), t.w[1] = near(x), t.w[2] = near(1 - x), t.w[3] = far(2 - x);
  for (int j = 0; j < 4; ++j) t.at[j] = std::clamp<int64_t>(i0 - 1 + j, 0, in - 1);
  return t;
}

// x[r][c] += table resized from [H0][W0][C] to [h][w][C], along width, then height.
void add_position_table(const VisionHParams& hp, const std::vector<float>& table, const Geometry& g, float* x,
                        ThreadPool& pool) {
  const int64_t C = hp.n_embd, H0 = hp.pos_h, W0 = hp.pos_w, h = g.grid_h, w = g.grid_w;
  if (h == H0 && w == W0) {
    for (int64_t i = 0; i < h * w * C; ++i) x[i] += table[i];
    return;
  }
  pool.parallel_for(h * w, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const Taps1d ty = interp_taps(H0, h, p / w, hp.interp), tx = interp_taps(W0, w, p % w, hp.interp);
      float* xr = x + p * C;
      for (int64_t c = 0; c < C; ++c) {
        float out = 0;
        for (int j = 0; j < ty.n; ++j) {
          const float* row = table.data() + ty.at[j] * W0 * C + c;
          float t = 0;
          for (int i = 0; i < tx.n; ++i) t += row[tx.at[i] * C] * tx.w[i];
          out += t * ty.w[j];
        }
        xr[c] += out;
      }
    }
  });
}

// 2-D RoPE on q and k of every head (split layout, vision.md §5): pairs (2j, 2j+1) of the first
// half turn by column·θ^(−4j/D), those of the second half by row·θ^(−4j/D).
void rope2d(float* qkv, const VisionHParams& hp, const Geometry& g, std::vector<float>& cs, ThreadPool& pool) {
  const int64_t D = hp.head_dim, Q = hp.qkv_width(), row = 3 * Q, J = D / 4;
  const int64_t side = std::max(g.grid_h, g.grid_w);
  scratch_size(cs, static_cast<size_t>(side * J * 2));  // [pos][j] cos, sin
  for (int64_t j = 0; j < J; ++j) {
    const float freq = static_cast<float>(1.0 / std::pow(static_cast<double>(hp.rope_theta), 4.0 * j / D));
    for (int64_t pos = 0; pos < side; ++pos) {
      const float a = static_cast<float>(pos) * freq;
      cs[(pos * J + j) * 2] = std::cos(a), cs[(pos * J + j) * 2 + 1] = std::sin(a);
    }
  }
  pool.parallel_for(g.n_patches(), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* by_axis[2] = {cs.data() + (p % g.grid_w) * J * 2, cs.data() + (p / g.grid_w) * J * 2};
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t h = 0; h < hp.n_head; ++h) {
          float* v = qkv + p * row + part * Q + h * D;
          for (int64_t s = 0; s < 2; ++s)
            for (int64_t j = 0; j < J; ++j) {
              const float c = by_axis[s][2 * j], sn = by_axis[s][2 * j + 1];
              float* pr = v + s * (D / 2) + 2 * j;
              const float a = pr[0], b = pr[1];
              pr[0] = a * c - b * sn, pr[1] = a * sn + b * c;
            }
        }
    }
  });
}

void add(float* x, const float* y, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] += y[i];
  });
}

constexpr int64_t kMlpRows = 1024;  // the F-wide MLP activation is formed this many rows at a time

}  // namespace

std::string ImageRows::prompt() const {
  return strprintf("<|media_begin|>image %ux%u<|media_content|><|media_pad|><|media_end|>", geometry.width,
                   geometry.height);
}

double Encoder::flops(const VisionHParams& hp, const Geometry& g) {
  const double N = static_cast<double>(g.n_patches()), C = hp.n_embd, Q = hp.qkv_width(), F = hp.n_ff;
  const double T = static_cast<double>(g.n_tokens(hp.merge)), p = hp.patch;
  const double block = 2 * N * (C * 3 * Q + Q * C + 2 * C * F) + 4 * N * N * Q;
  return 2 * N * 3 * p * p * C + hp.n_layer * block + 2 * T * (hp.merged_width() * hp.proj_hidden + double(hp.proj_hidden) * hp.n_proj);
}

ImageRows Encoder::encode(const Image& img, ThreadPool& pool, const EncodeOptions& o) {
  const VisionHParams& hp = m_.hparams();
  const VisionWeights& w = m_.weights();
  auto dump = [&](const char* name, int il, const float* v, int64_t rows, int64_t cols) {
    if (o.dump) o.dump(name, il, v, rows, cols);
  };
  ImageRows out;
  const Geometry g = plan_geometry(img.width, img.height, hp, o.max_tokens);
  out.geometry = g;
  {
    Image resized = resize_bicubic(img, g.rw, g.rh, &pool);
    patchify(resized, g, hp, patches_);
    if (o.resized) *o.resized = std::move(resized);
  }
  const int64_t N = g.n_patches(), C = hp.n_embd, Q = hp.qkv_width(), F = hp.n_ff, K = 3 * hp.patch * hp.patch;
  scratch_size(x_, N * C), scratch_size(xn_, N * C), scratch_size(tmp_, N * C);
  scratch_size(qkv_, N * 3 * Q), scratch_size(att_, N * Q), scratch_size(hid_, std::min(N, kMlpRows) * F);

  // [N, C]
  matmul_f32(WeightView{GgmlType::F32, w.patch.data(), K, C, static_cast<size_t>(K) * sizeof(float)}, patches_.data(), N,
             x_.data(), pool);
  dump("patch_embd", -1, x_.data(), N, C);
  add_position_table(hp, w.pos, g, x_.data(), pool);
  dump("pos_embd", -1, x_.data(), N, C);

  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    const VisionBlock& b = w.blocks[il];
    const int li = static_cast<int>(il);
    rmsnorm(x_.data(), b.ln1.data(), xn_.data(), N, C, hp.eps, pool);
    matmul_f32(b.qkv, xn_.data(), N, qkv_.data(), pool);  // [N, 3Q]
    rope2d(qkv_.data(), hp, g, cs_, pool);
    attention(qkv_.data(), N, hp.n_head, hp.head_dim, kt_, att_.data(), pool);  // [N, Q]
    dump("attn", li, att_.data(), N, Q);
    matmul_f32(b.out, att_.data(), N, tmp_.data(), pool);
    add(x_.data(), tmp_.data(), N * C, pool);
    rmsnorm(x_.data(), b.ln2.data(), xn_.data(), N, C, hp.eps, pool);
    for (int64_t r0 = 0; r0 < N; r0 += kMlpRows) {
      const int64_t nr = std::min(kMlpRows, N - r0);
      matmul_f32(b.up, xn_.data() + r0 * C, nr, hid_.data(), pool);  // [nr, F]
      gelu_tanh(hid_.data(), nr * F, pool);
      matmul_f32(b.down, hid_.data(), nr, tmp_.data() + r0 * C, pool);
    }
    add(x_.data(), tmp_.data(), N * C, pool);
    dump("blk_out", li, x_.data(), N, C);
  }
  rmsnorm(x_.data(), w.post_ln.data(), xn_.data(), N, C, hp.eps, pool);
  dump("post_ln", -1, xn_.data(), N, C);

  // 2 x 2 merge: token (R, Cc) = patches (2R, 2Cc), (2R, 2Cc+1), (2R+1, 2Cc), (2R+1, 2Cc+1).
  const int64_t gw = g.grid_w, T = g.n_tokens(hp.merge), M = hp.merged_width(), P = hp.proj_hidden, E = hp.n_proj;
  scratch_size(merged_, T * M);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t R = t / (gw / 2), Cc = t % (gw / 2);
    const int64_t src[4] = {2 * R * gw + 2 * Cc, 2 * R * gw + 2 * Cc + 1, (2 * R + 1) * gw + 2 * Cc,
                            (2 * R + 1) * gw + 2 * Cc + 1};
    for (int k = 0; k < 4; ++k) std::copy_n(xn_.data() + src[k] * C, C, merged_.data() + t * M + k * C);
  }
  dump("merged", -1, merged_.data(), T, M);
  scratch_size(hid_, std::max<int64_t>(std::min(N, kMlpRows) * F, T * P));
  matmul_f32(w.mm1, merged_.data(), T, hid_.data(), pool);
  gelu_erf(hid_.data(), T * P, pool);
  scratch_size(proj_, T * E);
  matmul_f32(w.mm2, hid_.data(), T, proj_.data(), pool);
  out.rows.resize(static_cast<size_t>(T * E));
  rmsnorm(proj_.data(), w.mm_norm.data(), out.rows.data(), T, E, hp.proj_eps, pool);
  dump("rows", -1, out.rows.data(), T, E);
  out.n_tokens = T, out.n_embd = E;
  const XXH128_hash_t hsh = XXH3_128bits(out.rows.data(), out.rows.size() * sizeof(float));
  out.hash = strprintf("%016llx%016llx", static_cast<unsigned long long>(hsh.high64),
                       static_cast<unsigned long long>(hsh.low64));
  return out;
}

}  // namespace k3::vision
