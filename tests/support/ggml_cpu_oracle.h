// dlopen wrapper for ggml's CPU backend (the node-llama-cpp prebuilt), used only as a test oracle:
// the activation quantizers (from_float) and dot products (vec_dot) of each type, and whole matrix
// products run the way llama.cpp runs them (a one-node graph on the CPU backend, the weight in the
// CPU_REPACK buffer where llama.cpp would place it), which is what llama.cpp's models compute; its
// silu, softmax, KDA conv and KDA recurrence likewise.
#pragma once
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace k3::test {

class GgmlCpu {
 public:
  // ABI of ggml's `struct ggml_type_traits_cpu` (ggml-cpu.h).
  struct Traits {
    void (*from_float)(const float* x, void* y, int64_t n);
    void (*vec_dot)(int n, float* s, size_t bs, const void* x, size_t bx, const void* y, size_t by, int nrc);
    int vec_dot_type;
    int64_t nrows;
  };

  // The backend variant llama.cpp picks on this CPU: the one whose ggml_backend_score() is highest,
  // as ggml's loader does (K3_GGML_CPU=<variant> overrides); nullptr when the library is missing.
  static const GgmlCpu* get() {
    static const GgmlCpu* inst = load(std::getenv("K3_GGML_CPU") ? std::getenv("K3_GGML_CPU") : "");
    return inst;
  }
  // A given variant (haswell, skylakex, icelake, zen4, ...) when this CPU can run it, else nullptr.
  static const GgmlCpu* variant(const std::string& name) {
    static std::vector<std::pair<std::string, const GgmlCpu*>> loaded;
    for (const auto& [n, g] : loaded)
      if (n == name) return g;
    const GgmlCpu* g = load(name);
    loaded.emplace_back(name, g);
    return g;
  }

  const Traits* traits(uint32_t type) const { return get_traits_(static_cast<int>(type)); }
  const std::string& variant() const { return variant_; }
  // Whether the last mul_mat / mul_mat_id ran on a repacked weight.
  bool last_repacked() const { return last_repacked_; }
  // Whether the variant was built for AVX-512 (ggml_cpu_has_avx512): it then repacks Q2_K.
  bool avx512() const { return has_avx512_(); }
  // Whether it was built for AVX512-BF16: its BF16 dot products then run dpbf16ps.
  bool avx512_bf16() const { return has_avx512_bf16_(); }

  // y[t][r] = llama.cpp's mul_mat of weight W (ne1 rows of ne0 elements of ggml type `type`,
  // row-major bytes) with activation rows x[t] (F32), t < T, r < ne1. `repack`: the weight lives in
  // the CPU_REPACK buffer (llama.cpp's default), where the variant repacks the types it has a
  // layout for; otherwise in the plain CPU buffer.
  std::vector<float> mul_mat(uint32_t type, const void* w, int64_t ne0, int64_t ne1, const float* x, int64_t T,
                             bool repack, int threads = 1) const {
    return run(repack, threads, ne1 * T, [&](void* wc, void* ac) {
      void* W = f_.new_tensor_2d(wc, static_cast<int>(type), ne0, ne1);
      void* X = f_.new_tensor_2d(ac, 0, ne0, T);
      return Graph{f_.mul_mat(ac, W, X), {{W, w}, {X, x}}};
    });
  }
  // llama.cpp's mul_mat_id: expert stack W[e] (ne2 experts of ne1 x ne0), T tokens, token t's
  // n_used experts ids[t][j] applied to its row x[t]: y[t][j][r].
  std::vector<float> mul_mat_id(uint32_t type, const void* w, int64_t ne0, int64_t ne1, int64_t ne2, const float* x,
                                int64_t T, const int32_t* ids, int64_t n_used, bool repack, int threads = 1) const {
    return run(repack, threads, ne1 * n_used * T, [&](void* wc, void* ac) {
      void* W = f_.new_tensor_3d(wc, static_cast<int>(type), ne0, ne1, ne2);
      void* X = f_.new_tensor_3d(ac, 0, ne0, 1, T);
      void* I = f_.new_tensor_2d(ac, 26 /* GGML_TYPE_I32 */, n_used, T);
      return Graph{f_.mul_mat_id(ac, W, X, I), {{W, w}, {X, x}, {I, ids}}};
    });
  }

  // ggml_vec_silu_f32 of this variant: silu of n floats (what its silu op runs on each row).
  std::vector<float> silu(const float* x, int n) const {
    std::vector<float> y(n);
    vec_silu_(n, y.data(), x);
    return y;
  }
  // llama.cpp's KDA conv + silu (ggml_silu of ggml_ssm_conv): D channels, K taps w[c][j] (tap K-1 on
  // the current input), the K-1 previous inputs state[c][j] (oldest first), T new inputs p[t][c];
  // y[t][c].
  std::vector<float> ssm_conv_silu(const float* p, const float* w, const float* state, int64_t T, int64_t D,
                                   int64_t K) const {
    std::vector<float> sx((K - 1 + T) * D);  // a channel's window row: the state, then the batch
    for (int64_t c = 0; c < D; ++c)
      for (int64_t r = 0; r < K - 1 + T; ++r)
        sx[c * (K - 1 + T) + r] = r < K - 1 ? state[c * (K - 1) + r] : p[(r - K + 1) * D + c];
    return run(false, 1, D * T, [&](void* wc, void* ac) {
      void* C = f_.new_tensor_2d(wc, 0, K, D);
      void* X = f_.new_tensor_3d(ac, 0, K - 1 + T, D, 1);
      return Graph{f_.silu(ac, f_.ssm_conv(ac, X, C)), {{C, w}, {X, sx.data()}}};
    });
  }
  // llama.cpp's softmax of `rows` rows of n floats x[r][i] (ggml_soft_max), or with padded > n of
  // rows it pads with masked entries to `padded` (ggml_soft_max_ext with an F32 mask of 0 and −inf,
  // as its attention's rows over the KV cache): the first n of each row.
  std::vector<float> soft_max(const float* x, int64_t n, int64_t rows, int64_t padded) const {
    const int64_t w = std::max(n, padded);
    std::vector<float> xp(w * rows, 0.0f), mask(w * rows, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < w; ++i) {
        if (i < n) xp[r * w + i] = x[r * n + i];
        else mask[r * w + i] = -INFINITY;
      }
    const std::vector<float> y = run(false, 1, w * rows, [&](void*, void* ac) {
      void* X = f_.new_tensor_2d(ac, 0, w, rows);
      if (padded <= n) return Graph{f_.soft_max(ac, X), {{X, xp.data()}}};
      void* M = f_.new_tensor_2d(ac, 0, w, rows);
      return Graph{f_.soft_max_ext(ac, X, M, 1.0f, 0.0f), {{X, xp.data()}, {M, mask.data()}}};
    });
    std::vector<float> out(n * rows);
    for (int64_t r = 0; r < rows; ++r) std::copy_n(&y[r * w], n, &out[r * n]);
    return out;
  }
  // llama.cpp's KDA recurrence (ggml_gated_delta_net with a gate a key, one sequence): H heads of
  // d, T tokens; q, k, v, g [t][h][i], beta [t][h], state [h][j][i] (value row j over key i, as
  // k3 keeps it). Returns the outputs o[t][h][j], then the state after the last token.
  std::vector<float> gated_delta_net(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                     const float* state, int64_t d, int64_t H, int64_t T) const {
    return run(false, 1, d * H * T + d * d * H, [&](void* wc, void* ac) {
      void* S = f_.new_tensor_3d(wc, 0, d, d, H);
      void* Q = f_.new_tensor_3d(ac, 0, d, H, T);
      void* K = f_.new_tensor_3d(ac, 0, d, H, T);
      void* V = f_.new_tensor_3d(ac, 0, d, H, T);
      void* G = f_.new_tensor_3d(ac, 0, d, H, T);
      void* B = f_.new_tensor_3d(ac, 0, 1, H, T);
      return Graph{f_.gated_delta_net(ac, Q, K, V, G, B, S, 1), {{S, state}, {Q, q}, {K, k}, {V, v}, {G, g}, {B, beta}}};
    });
  }

 private:
  struct InitParams {  // ABI of `struct ggml_init_params` (ggml.h)
    size_t mem_size;
    void* mem_buffer;
    bool no_alloc;
  };
  struct Fns {
    void* (*init)(InitParams);
    void (*free)(void*);
    void* (*new_tensor_2d)(void*, int, int64_t, int64_t);
    void* (*new_tensor_3d)(void*, int, int64_t, int64_t, int64_t);
    void* (*mul_mat)(void*, void*, void*);
    void* (*mul_mat_id)(void*, void*, void*, void*);
    void* (*ssm_conv)(void*, void*, void*);
    void* (*silu)(void*, void*);
    void* (*gated_delta_net)(void*, void*, void*, void*, void*, void*, void*, int64_t);
    void* (*soft_max)(void*, void*);
    void* (*soft_max_ext)(void*, void*, void*, float, float);
    void* (*new_graph)(void*);
    void (*build_forward_expand)(void*, void*);
    void* (*alloc_ctx_tensors_from_buft)(void*, void*);
    void (*buffer_free)(void*);
    void (*tensor_set)(void*, const void*, size_t, size_t);
    void (*tensor_get)(const void*, void*, size_t, size_t);
    size_t (*nbytes)(const void*);
    int (*graph_compute)(void*, void*);
    void* (*cpu_buffer_type)();
    void (*backend_free)(void*);
    void* (*cpu_init)();
    void (*cpu_set_n_threads)(void*, int);
    void* (*repack_buffer_type)();
    void* (*get_device)(void*);
    bool (*dev_supports_op)(void*, const void*);
  };
  struct Ctx {  // a no_alloc context and the buffer its tensors get
    const GgmlCpu& g;
    void* ctx;
    void* buf = nullptr;
    explicit Ctx(const GgmlCpu& o) : g(o), ctx(o.f_.init({4 << 20, nullptr, true})) {}
    ~Ctx() {
      if (buf) g.f_.buffer_free(buf);
      g.f_.free(ctx);
    }
  };

  struct Graph {
    void* Y;  // the result
    std::vector<std::pair<void*, const void*>> in;  // the input tensors (weights first) and their data
  };
  // Builds the graph twice where needed: once to ask, like llama.cpp's loader, whether the device
  // runs it with the weights (the tensors of the first context) in the repack buffer, then for real
  // in the buffer chosen.
  template <class Build>
  std::vector<float> run(bool repack, int threads, int64_t n_out, Build build) const {
    void* backend = f_.cpu_init();
    last_repacked_ = false;
    if (repack) {
      Ctx wctx(*this), actx(*this);
      const Graph g = build(wctx.ctx, actx.ctx);
      wctx.buf = f_.alloc_ctx_tensors_from_buft(wctx.ctx, f_.repack_buffer_type());
      last_repacked_ = f_.dev_supports_op(f_.get_device(backend), g.Y);
    }
    Ctx wctx(*this), actx(*this);
    const Graph g = build(wctx.ctx, actx.ctx);
    void* gf = f_.new_graph(actx.ctx);
    f_.build_forward_expand(gf, g.Y);
    wctx.buf = f_.alloc_ctx_tensors_from_buft(wctx.ctx, last_repacked_ ? f_.repack_buffer_type() : f_.cpu_buffer_type());
    actx.buf = f_.alloc_ctx_tensors_from_buft(actx.ctx, f_.cpu_buffer_type());
    for (const auto& [t, data] : g.in) f_.tensor_set(t, data, 0, f_.nbytes(t));
    f_.cpu_set_n_threads(backend, threads);
    const int status = f_.graph_compute(backend, gf);
    f_.backend_free(backend);
    std::vector<float> y(n_out, NAN);
    if (status == 0) f_.tensor_get(g.Y, y.data(), 0, sizeof(float) * n_out);
    else std::fprintf(stderr, "ggml oracle: graph_compute failed (%d)\n", status);
    return y;
  }

  static std::string lib_dir() {
    const char* src = std::getenv("K3_SOURCE_DIR");
    return std::string(src ? src : ".") + "/tests/node/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/";
  }
  // The variants that node-llama-cpp ships for x86-64, in ggml's CMake order.
  static constexpr const char* kVariants[] = {"x64",       "sse42",      "sandybridge", "ivybridge",
                                              "piledriver", "haswell",    "skylakex",    "cannonlake",
                                              "cascadelake", "icelake",   "cooperlake",  "zen4",
                                              "alderlake",  "sapphirerapids"};

  // `name` empty: the best-scoring variant this CPU runs.
  static const GgmlCpu* load(std::string name) {
    const std::string dir = lib_dir();
    // The base library globally first, so that a variant's NEEDED entry resolves to it.
    void* base = dlopen((dir + "libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!base) return nullptr;
    void* h = nullptr;
    if (name.empty()) {
      int best = 0;
      for (const char* v : kVariants) {
        void* c = dlopen((dir + "libggml-cpu-" + v + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
        auto score = c ? reinterpret_cast<int (*)()>(dlsym(c, "ggml_backend_score")) : nullptr;
        if (score && score() > best) best = score(), name = v, h = c;
      }
    } else {
      h = dlopen((dir + "libggml-cpu-" + name + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
      auto score = h ? reinterpret_cast<int (*)()>(dlsym(h, "ggml_backend_score")) : nullptr;
      if (!score || score() == 0) return nullptr;  // missing, or this CPU cannot run it
    }
    if (!h) {
      std::fprintf(stderr, "ggml oracle: %s\n", dlerror());
      return nullptr;
    }
    auto* g = new GgmlCpu;
    g->variant_ = name;
    auto init = reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"));
    g->get_traits_ = reinterpret_cast<const Traits* (*)(int)>(dlsym(h, "ggml_get_type_traits_cpu"));
    g->has_avx512_ = reinterpret_cast<int (*)()>(dlsym(h, "ggml_cpu_has_avx512"));
    g->has_avx512_bf16_ = reinterpret_cast<int (*)()>(dlsym(h, "ggml_cpu_has_avx512_bf16"));
    Fns& f = g->f_;
    bool ok = init && g->get_traits_ && g->has_avx512_ && g->has_avx512_bf16_;
    auto sym = [&](void* lib, auto& fn, const char* s) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, s));
      ok = ok && fn;
    };
    sym(base, f.init, "ggml_init");
    sym(base, f.free, "ggml_free");
    sym(base, f.new_tensor_2d, "ggml_new_tensor_2d");
    sym(base, f.new_tensor_3d, "ggml_new_tensor_3d");
    sym(base, f.mul_mat, "ggml_mul_mat");
    sym(base, f.mul_mat_id, "ggml_mul_mat_id");
    sym(base, f.ssm_conv, "ggml_ssm_conv");
    sym(base, f.silu, "ggml_silu");
    sym(base, f.gated_delta_net, "ggml_gated_delta_net");
    sym(base, f.soft_max, "ggml_soft_max");
    sym(base, f.soft_max_ext, "ggml_soft_max_ext");
    sym(h, g->vec_silu_, "ggml_vec_silu_f32");
    sym(base, f.new_graph, "ggml_new_graph");
    sym(base, f.build_forward_expand, "ggml_build_forward_expand");
    sym(base, f.alloc_ctx_tensors_from_buft, "ggml_backend_alloc_ctx_tensors_from_buft");
    sym(base, f.buffer_free, "ggml_backend_buffer_free");
    sym(base, f.tensor_set, "ggml_backend_tensor_set");
    sym(base, f.tensor_get, "ggml_backend_tensor_get");
    sym(base, f.nbytes, "ggml_nbytes");
    sym(base, f.graph_compute, "ggml_backend_graph_compute");
    sym(base, f.cpu_buffer_type, "ggml_backend_cpu_buffer_type");
    sym(base, f.backend_free, "ggml_backend_free");
    sym(base, f.get_device, "ggml_backend_get_device");
    sym(base, f.dev_supports_op, "ggml_backend_dev_supports_op");
    sym(h, f.cpu_init, "ggml_backend_cpu_init");
    sym(h, f.cpu_set_n_threads, "ggml_backend_cpu_set_n_threads");
    sym(h, f.repack_buffer_type, "_Z35ggml_backend_cpu_repack_buffer_typev");
    if (!ok) {
      std::fprintf(stderr, "ggml oracle: a symbol is missing from %s\n", name.c_str());
      return nullptr;
    }
    // ggml logs every repacked tensor; the products are what the tests look at.
    if (auto log_set = reinterpret_cast<void (*)(void (*)(int, const char*, void*), void*)>(dlsym(base, "ggml_log_set")))
      log_set([](int, const char*, void*) {}, nullptr);
    init();
    return g;
  }

  const Traits* (*get_traits_)(int) = nullptr;
  int (*has_avx512_)() = nullptr;
  int (*has_avx512_bf16_)() = nullptr;
  void (*vec_silu_)(int, float*, const float*) = nullptr;
  std::string variant_;
  Fns f_{};
  mutable bool last_repacked_ = false;
};

}  // namespace k3::test
