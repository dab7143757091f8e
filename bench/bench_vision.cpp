// Vision encoder benchmark at K3's real dimensions (vision.md §1; synthetic BF16 weights): time and
// GFLOP/s of one image through the 27 blocks and the projector, for the sizes and thread counts
// asked, next to the machine's measured peak (a register-resident F32 FMA loop, and the sgemm the
// encoder uses on cache-resident data, per core of CPU time). Wall and CPU time are both given:
// on a shared machine the wall time includes other processes' turns. The peak RSS after each image
// shows the memory growing with the patch count (activations), not its square (no score matrix).
//   bench_vision --mmproj /tmp/mmproj-k3-real.gguf --sizes 448,1024 --threads 1,2
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <sys/resource.h>

#include <ctime>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "tensor/gemm.h"
#include "tensor/sgemm.h"
#include "tensor/kernels.h"
#include "vision/encoder.h"
#include "vision/synthetic.h"

using namespace k3;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU time (the machine is shared: wall time counts other processes' turns too).
double cpu_seconds(clockid_t which) {
  timespec t;
  clock_gettime(which, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
double thread_cpu() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }

double max_rss_mb() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// 12 independent FMA chains of 16 lanes (enough to cover the latency of two FMA ports).
__attribute__((target("avx512f"))) double fma_peak_avx512(int64_t iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  const double t0 = thread_cpu();
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  const double s = thread_cpu() - t0;
  float out[16], sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_storeu_ps(out, a[i]);
    sink += out[0];
  }
  if (sink == 12345.0f) std::printf(" ");
  return 2.0 * 16 * 12 * static_cast<double>(iters) / s / 1e9;
}

__attribute__((target("avx2,fma"))) double fma_peak_avx2(int64_t iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  const double t0 = thread_cpu();
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  const double s = thread_cpu() - t0;
  float out[8], sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_storeu_ps(out, a[i]);
    sink += out[0];
  }
  if (sink == 12345.0f) std::printf(" ");
  return 2.0 * 8 * 12 * static_cast<double>(iters) / s / 1e9;
}

// The F32 tile of gemm_rows on operands that fit in L2: the encoder's inner loop at its best.
double gemm_tile_peak() {
  const int64_t n = 1024, rows = 64, tok = 64;
  std::vector<float> w(n * rows, 0.01f), a(n * tok, 0.02f), y(rows * tok);
  int reps = 0;
  const double t0 = thread_cpu();
  while (thread_cpu() - t0 < 0.2 || reps < 10) {
    gemm_rows(GgmlType::F32, n, w.data(), n * 4, rows, a.data(), n * 4, tok, y.data(), rows);
    ++reps;
  }
  return 2.0 * n * rows * tok * reps / (thread_cpu() - t0) / 1e9;
}

// sgemm (the encoder's products) on cache-resident operands: a 64 x 32 x 1024 band product with A
// packed once, as matmul_f32 runs it.
double sgemm_peak() {
  const int64_t m = 64, n = 32, k = 1024;
  const Sgemm& g = sgemm_kernel();
  std::vector<float> a(m * k, 0.01f), b(k * n, 0.02f), c(m * n), ap(g.packed_size(m, k));
  g.pack_a(m, k, a.data(), k, ap.data());
  int reps = 0;
  const double t0 = thread_cpu();
  while (thread_cpu() - t0 < 0.2 || reps < 10) {
    g.run(m, n, k, ap.data(), b.data(), n, c.data(), n, false);
    ++reps;
  }
  return 2.0 * m * n * k * reps / (thread_cpu() - t0) / 1e9;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stoi(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mmproj = (std::filesystem::temp_directory_path() / "mmproj-k3-real-dims.gguf").string();
  std::string sizes = "448,1024", threads = "1,2";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--mmproj") mmproj = argv[i + 1];
    else if (k == "--sizes") sizes = argv[i + 1];
    else if (k == "--threads") threads = argv[i + 1];
    else return std::fprintf(stderr, "usage: bench_vision [--mmproj PATH] [--sizes 448,1024] [--threads 1,2]\n"), 2;
  }
  try {
    if (!std::filesystem::exists(mmproj)) {
      std::fprintf(stderr, "bench_vision: writing %s (K3's real vision dimensions, random BF16 weights)\n", mmproj.c_str());
      vision::write_synthetic_mmproj(mmproj, vision::vision_synth_preset("k3", 7168));
    }
    auto m = vision::VisionModel::load(mmproj);
    const Isa isa = active_isa();
    // Best of five short runs each: the machine is shared, the best run is the one least preempted.
    double fma = 0, sg = 0, gr = 0;
    for (int rep = 0; rep < 5; ++rep) {
      fma = std::max(fma, isa == Isa::Avx512 ? fma_peak_avx512(20000000) : isa == Isa::Avx2 ? fma_peak_avx2(20000000) : 0);
      sg = std::max(sg, sgemm_peak());
      gr = std::max(gr, gemm_tile_peak());
    }
    std::printf("{\"isa\":\"%s\",\"fma_peak_gflops_per_thread\":%.1f,\"sgemm_gflops_per_thread\":%.1f,"
                "\"gemm_rows_f32_gflops_per_thread\":%.1f,\"model\":\"%s\"}\n",
                isa_name(isa), fma, sg, gr, m->hparams().summary().c_str());
    for (int side : parse_list(sizes))
      for (int t : parse_list(threads)) {
        vision::Image img;
        img.width = img.height = static_cast<uint32_t>(side);
        img.rgb.resize(static_cast<size_t>(side) * side * 3);
        for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
        ThreadPool pool(t);
        vision::Encoder enc(*m);
        const auto t0 = Clock::now();
        const double c0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
        const vision::ImageRows rows = enc.encode(img, pool);
        const double s = seconds_since(t0), cpu = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
        const double flops = vision::Encoder::flops(m->hparams(), rows.geometry);
        std::printf("{\"image\":\"%dx%d\",\"grid\":[%u,%u],\"patches\":%lld,\"tokens\":%lld,\"threads\":%d,\"seconds\":%.2f,"
                    "\"cpu_seconds\":%.2f,\"tflop\":%.3f,\"gflops\":%.1f,\"gflops_per_busy_core\":%.1f,\"max_rss_mb\":%.0f}\n",
                    side, side, rows.geometry.grid_h, rows.geometry.grid_w, static_cast<long long>(rows.geometry.n_patches()),
                    static_cast<long long>(rows.n_tokens), t, s, cpu, flops / 1e12, flops / s / 1e9, flops / cpu / 1e9, max_rss_mb());
        std::fflush(stdout);
      }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_vision: %s\n", e.what());
    return 1;
  }
  return 0;
}
