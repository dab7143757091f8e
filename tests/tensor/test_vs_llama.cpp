// k3's matrix products against llama.cpp's on this CPU: the same weights and activation rows through
// k3::matmul (at every ISA this CPU has, the file layout and the repacked one) and through
// llama.cpp's CPU backend as its models run them (a mul_mat on the variant its loader picks here,
// the weight in its CPU_REPACK buffer where its loader puts it: support/ggml_cpu_oracle.h), for 1 to
// 17 tokens. The types whose summation order k3 takes from llama.cpp must give its bits exactly
// (docs/model.md, "Parity"); for the others the test prints how far apart the two are. Run for the
// variant llama.cpp loads on this CPU and for its AVX2 build (haswell: what it runs on a CPU
// without AVX-512), where this CPU can run it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/cpu_family.h"
#include "support/ggml_cpu_oracle.h"
#include "tensor/kernels.h"
#include "tensor/matmul.h"
#include "tensor/repack.h"
#include "tensor/threadpool.h"
#include "tensor/vecmath.h"

namespace k3 {
namespace {

using T = GgmlType;

// From which token of a batch of n_tok k3 (running weights of type t, the file's or the repacked
// one) sums in llama.cpp's order on this variant (n_tok: nowhere). Q8_0 and Q5_0: everywhere
// (llama.cpp's vec_dot and its batch tiles share one order). Q6_K: everywhere (vec_dot; never
// repacked on x86). Q2_K: everywhere, as vec_dot sums it, where the variant does not repack it (no
// AVX-512); where it does, Q2_K_SB has the order of its gemv, which takes the n_tok % 4 last tokens
// (and every decode step), while its gemm adds each 128-element half of a super-block separately
// for the 4-token groups before them. IQ4_XS: below 8 tokens (from 8 on its batches take another
// path). F32 and F16: one token, at k3's level of the variant's vector width (ggml's vec_dot_f32 /
// _f16 as that build compiles them; its batches go to llamafile's sgemm, one accumulator an
// output). BF16: one token, at AVX-512 against a build with AVX512-BF16 (both run dpbf16ps).
int64_t mirrored_from(T t, int64_t n_tok, const test::GgmlCpu& g, Isa isa) {
  switch (t) {
    case T::F32: case T::F16: return n_tok == 1 && isa != Isa::Scalar && (isa == Isa::Avx512) == g.avx512() ? 0 : n_tok;
    case T::BF16: return n_tok == 1 && isa == Isa::Avx512 && g.avx512_bf16() ? 0 : n_tok;
    case T::Q8_0: case T::Q8_0_X8: case T::Q5_0: case T::Q6_K: return 0;
    case T::Q2_K: return g.avx512() ? n_tok : 0;
    case T::Q2_K_SB: return g.avx512() ? n_tok - n_tok % 4 : n_tok;
    case T::IQ4_XS: return n_tok < 8 ? 0 : n_tok;
    default: return n_tok;
  }
}

void check_variant(const test::GgmlCpu& g) {
  std::printf("[vs llama] %s, llama.cpp CPU variant %s%s\n", test::cpu_family().c_str(), g.variant().c_str(),
              g.avx512() ? " (AVX-512)" : "");
  const T types[] = {T::F32, T::F16, T::BF16, T::Q8_0, T::Q4_0, T::Q4_1, T::Q5_0, T::Q5_1, T::Q2_K, T::Q3_K,
                     T::Q4_K, T::Q5_K, T::Q6_K, T::MXFP4, T::IQ4_NL, T::IQ4_XS};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  const int64_t ne1 = 24;  // a multiple of 8: llama.cpp repacks where it does
  for (T t : types) {
    const bool k_quant = type_info(t).block == 256;
    double worst = 0.0;
    int exact = 0, cases = 0;
    bool mirror = false;  // one of the two layouts, for one token
    for (int64_t ne0 : k_quant ? std::vector<int64_t>{256, 1280} : std::vector<int64_t>{96, 288, 1280}) {
      std::vector<float> wf(ne0 * ne1);
      for (float& v : wf) v = nd(rng) * 0.05f;
      std::vector<uint8_t> w(row_size(t, ne0) * ne1);
      if (t == T::F32) std::memcpy(w.data(), wf.data(), w.size());
      else quantize_rows(t, wf.data(), w.data(), ne1, ne0, nullptr);
      std::vector<uint8_t> repacked = w;
      const T rt = t == T::Q2_K ? T::Q2_K_SB : repacked_type(t, ne0, ne1);  // Q2_K_SB at every ISA
      repack_rows(t, repacked.data(), ne1, ne0, row_size(t, ne0));
      for (int64_t n_tok : {1, 2, 3, 4, 5, 8, 9, 17}) {
        std::vector<float> x(ne0 * n_tok);
        for (float& v : x) v = nd(rng);
        const std::vector<float> want = g.mul_mat(static_cast<uint32_t>(t), w.data(), ne0, ne1, x.data(), n_tok, true);
        for (Isa isa : kAllIsas) {
          if (!isa_supported(isa)) continue;
          set_isa(isa);
          for (const auto& [type, data] : {std::pair{t, &w}, std::pair{rt, &repacked}}) {
            if (type == rt && rt == t && data == &repacked) continue;  // no repacked layout
            std::vector<float> y(ne1 * n_tok);
            matmul({type, data->data(), ne0, ne1, row_size(t, ne0)}, x.data(), n_tok, y.data(), pool);
            const bool same = std::memcmp(y.data(), want.data(), y.size() * sizeof(float)) == 0;
            exact += same, ++cases;
            for (size_t i = 0; i < y.size(); ++i)
              worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - want[i]) / (std::fabs(want[i]) + 1e-6));
            const int64_t from = mirrored_from(type, n_tok, g, isa);
            mirror = mirror || from < n_tok;
            EXPECT_EQ(0, std::memcmp(y.data() + from * ne1, want.data() + from * ne1, (n_tok - from) * ne1 * sizeof(float)))
                << type_name(type) << " ne0 " << ne0 << ", tokens " << from << ".." << n_tok - 1 << " of " << n_tok << ", "
                << isa_name(isa) << ": not llama.cpp's bits (variant " << g.variant() << ")";
          }
        }
      }
    }
    set_isa(cpu_best_isa());
    std::printf("[vs llama] %-7s %s: %3d of %3d products bit-identical, worst relative difference %.1e\n",
                type_name(t), mirror ? "mirrored" : "own order", exact, cases, worst);
  }
}

TEST(VsLlama, MatmulOnThisCpusVariant) {
  const test::GgmlCpu* g = test::GgmlCpu::get();
  ASSERT_TRUE(g) << "ggml CPU backend (node-llama-cpp's libggml-cpu) not found: run tools/setup test";
  check_variant(*g);
}

TEST(VsLlama, MatmulOnTheAvx2Variant) {
  const test::GgmlCpu* g = test::GgmlCpu::variant("haswell");
  ASSERT_TRUE(g || !isa_supported(Isa::Avx2)) << "llama.cpp's haswell variant did not load on an AVX2 CPU";
  if (g) check_variant(*g);
}

// Runs measure(isa, count) at every level this CPU has, count(k3's value, llama.cpp's) for each
// value compared: k3's levels of g's vector width (AVX-512 for its AVX-512 builds, AVX2 and
// AVX-VNNI for the others) must give its bits; the other levels print how far they are apart.
template <class Measure>
void expect_llama_bits_at_its_width(const test::GgmlCpu& g, const char* what, Measure&& measure) {
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) continue;
    double worst = 0;
    int64_t differ = 0;
    measure(isa, [&](float a, float b) { worst = std::max(worst, std::fabs(static_cast<double>(a) - b)), differ += a != b; });
    std::printf("[vs llama] %s at %s against %s: %lld values differ, at most by %.2g\n", what, isa_name(isa),
                g.variant().c_str(), static_cast<long long>(differ), worst);
    if ((isa == Isa::Avx512) == g.avx512() && isa != Isa::Scalar) {
      EXPECT_EQ(differ, 0) << what << " at " << isa_name(isa) << ": not llama.cpp's bits (variant " << g.variant() << ")";
    }
  }
}

// KDA's conv + silu against llama.cpp's (ggml_silu of ggml_ssm_conv: 1 to 33 tokens, kernels of 2
// to 17 taps, K3's 4 among them, a row of D = 200 channels, 8 in ggml's scalar tail) and silu
// alone (ggml_vec_silu_f32) over [-110, 90].
void check_conv_silu(const test::GgmlCpu& g) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x;
  for (float v = -110.0f; v <= 90.0f; v += 0.00731f) x.push_back(v);
  for (int i = 0; i < 4096; ++i) x.push_back(nd(rng) * 3);
  const std::vector<float> want = g.silu(x.data(), static_cast<int>(x.size()));
  const int64_t D = 200;
  expect_llama_bits_at_its_width(g, "silu, KDA conv + silu", [&](Isa isa, auto&& count) {
    const VecMath& vm = vecmath(isa);
    std::vector<float> y = x;
    vm.silu(y.data(), static_cast<int64_t>(y.size()));
    for (size_t i = 0; i < x.size(); ++i) count(y[i], want[i]);
    for (int64_t K : {2, 4, 5, 9, 17})
      for (int64_t T : {1, 5, 33}) {
        std::vector<float> p(T * D), w(D * K), state(D * (K - 1)), out(T * D);
        for (auto* v : {&p, &w, &state})
          for (float& f : *v) f = nd(rng);
        const std::vector<float> conv_want = g.ssm_conv_silu(p.data(), w.data(), state.data(), T, D, K);
        vm.causal_conv(p.data(), w.data(), state.data(), T, D, K, 0, D, out.data());
        for (int64_t t = 0; t < T; ++t) vm.silu(out.data() + t * D, D);
        for (int64_t i = 0; i < T * D; ++i) count(out[i], conv_want[i]);
      }
  });
}

// Softmax against llama.cpp's (ggml_soft_max; ggml_soft_max_ext with a mask for a row padded with
// masked entries to a multiple of 64, as its attention's rows are): rows of 1 to 100 scores, below,
// at and past the vector widths.
void check_softmax(const test::GgmlCpu& g) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  expect_llama_bits_at_its_width(g, "softmax", [&](Isa isa, auto&& count) {
    for (const bool masked : {false, true})
      for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 40, 100}) {
        const int64_t rows = 3;
        std::vector<float> x(n * rows);
        for (float& f : x) f = nd(rng);
        const std::vector<float> want = g.soft_max(x.data(), n, rows, masked ? (n + 63) / 64 * 64 : 0);
        for (int64_t r = 0; r < rows; ++r) vecmath(isa).softmax(&x[r * n], n, masked);
        for (size_t i = 0; i < x.size(); ++i) count(x[i], want[i]);
      }
  });
}

// KDA's recurrence against llama.cpp's (ggml_gated_delta_net, a gate a key): head sizes with and
// without a tail past the last step of 4W (d = 24, 64, 128), 1 to 9 tokens, 2 heads; k3's gates
// through its exp (libm's bits, as the op's expf). The outputs and the state after the last token.
void check_delta_rule(const test::GgmlCpu& g) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  expect_llama_bits_at_its_width(g, "KDA recurrence", [&](Isa isa, auto&& count) {
    const VecMath& vm = vecmath(isa);
    for (int64_t d : {24, 64, 128})
      for (int64_t T : {1, 3, 9}) {
        const int64_t H = 2;
        std::vector<float> q(T * H * d), k(T * H * d), v(T * H * d), gate(T * H * d), beta(T * H), S(H * d * d);
        for (auto* x : {&q, &k, &v, &S})
          for (float& f : *x) f = nd(rng);
        for (float& f : gate) f = -std::fabs(nd(rng));
        for (float& f : beta) f = 1.0f / (1.0f + std::exp(-nd(rng)));
        const std::vector<float> want = g.gated_delta_net(q.data(), k.data(), v.data(), gate.data(), beta.data(),
                                                          S.data(), d, H, T);
        std::vector<float> got(T * H * d), eg(d);
        const float scale = 1.0f / sqrtf(static_cast<float>(d));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < H; ++h) {
            const int64_t at = (t * H + h) * d;
            std::copy_n(&gate[at], d, eg.data());
            vm.exp(eg.data(), d);
            vm.delta_rule(&S[h * d * d], d, eg.data(), &k[at], &q[at], &v[at], beta[t * H + h], scale, &got[at]);
          }
        got.insert(got.end(), S.begin(), S.end());
        for (size_t i = 0; i < got.size(); ++i) count(got[i], want[i]);
      }
  });
}

// Each check on the variant llama.cpp runs on this CPU and on its AVX2 (haswell) variant.
void on_both_variants(void (*check)(const test::GgmlCpu&)) {
  const test::GgmlCpu* g = test::GgmlCpu::get();
  ASSERT_TRUE(g) << "ggml CPU backend (node-llama-cpp's libggml-cpu) not found: run tools/setup test";
  check(*g);
  const test::GgmlCpu* h = test::GgmlCpu::variant("haswell");
  ASSERT_TRUE(h || !isa_supported(Isa::Avx2)) << "llama.cpp's haswell variant did not load on an AVX2 CPU";
  if (h && h != g) check(*h);
}

TEST(VsLlama, KdaConvSilu) { on_both_variants(check_conv_silu); }
TEST(VsLlama, Softmax) { on_both_variants(check_softmax); }
TEST(VsLlama, KdaRecurrence) { on_both_variants(check_delta_rule); }

}  // namespace
}  // namespace k3
