// dlopen wrapper for ggml's CPU backend (the node-llama-cpp prebuilt), used only as a test oracle
// for the activation quantizers (from_float) and the dot products (vec_dot) of each type.
#pragma once
#include <cpuid.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

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

  // The backend variant llama.cpp would pick on this CPU (K3_GGML_CPU=<variant> overrides);
  // nullptr when the library is missing.
  static const GgmlCpu* get() {
    static const GgmlCpu* inst = load();
    return inst;
  }

  const Traits* traits(uint32_t type) const { return get_traits_(static_cast<int>(type)); }
  const std::string& variant() const { return variant_; }

 private:
  static bool cpu_has(unsigned leaf, unsigned sub, int reg, unsigned bit) {
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[reg] >> bit) & 1;
  }
  static std::string pick_variant() {
    if (const char* v = std::getenv("K3_GGML_CPU")) return v;
    const bool avx512 = cpu_has(7, 0, 1, 16) && cpu_has(7, 0, 1, 30) && cpu_has(7, 0, 1, 31);
    if (avx512 && cpu_has(7, 0, 3, 23) && cpu_has(7, 1, 0, 5)) return "sapphirerapids";
    if (avx512 && cpu_has(7, 1, 0, 5)) return "cooperlake";
    if (avx512) return "skylakex";
    if (cpu_has(7, 0, 1, 5)) return "haswell";
    return "x64";
  }
  static const GgmlCpu* load() {
    const char* src = std::getenv("K3_SOURCE_DIR");
    const std::string dir = std::string(src ? src : ".") +
                            "/tests/node/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/";
    auto* g = new GgmlCpu;
    g->variant_ = pick_variant();
    // Load the base library globally first so that the backend's NEEDED entry resolves to it.
    if (!dlopen((dir + "libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL)) return nullptr;
    void* h = dlopen((dir + "libggml-cpu-" + g->variant_ + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "ggml oracle: %s\n", dlerror());
      return nullptr;
    }
    auto init = reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"));
    g->get_traits_ = reinterpret_cast<const Traits* (*)(int)>(dlsym(h, "ggml_get_type_traits_cpu"));
    if (!init || !g->get_traits_) return nullptr;
    init();
    return g;
  }

  const Traits* (*get_traits_)(int) = nullptr;
  std::string variant_;
};

}  // namespace k3::test
