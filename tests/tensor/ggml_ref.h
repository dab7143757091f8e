// dlopen wrapper for ggml's libggml-base.so (the node-llama-cpp prebuilt), used only as a test
// oracle for the reference quantizers, dequantizers and float conversions. Header-only.
#pragma once
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "tensor/types.h"

namespace k3::test {

class GgmlRef {
 public:
  using DequantizeFn = void (*)(const void* x, float* y, int64_t n);
  using QuantizeRowFn = void (*)(const float* x, void* y, int64_t n);

  // nullptr when the library or a symbol is missing; load_error() says why.
  static const GgmlRef* get() {
    static const GgmlRef* inst = load();
    return inst;
  }
  static const std::string& load_error() { return error_(); }
  static std::string library_path() {
    const char* src = std::getenv("K3_SOURCE_DIR");
    return std::string(src ? src : ".") +
           "/tests/node/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
  }

  // ggml_quantize_chunk over whole rows (start = 0); returns bytes written.
  size_t quantize_chunk(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                        const float* imatrix) const {
    return quantize_chunk_(static_cast<int>(t), src, dst, 0, nrows, n_per_row, imatrix);
  }
  size_t row_size(GgmlType t, int64_t ne) const { return row_size_(static_cast<int>(t), ne); }
  bool requires_imatrix(GgmlType t) const { return requires_imatrix_(static_cast<int>(t)); }
  void fp16_to_fp32_row(const uint16_t* x, float* y, int64_t n) const { fp16_to_fp32_row_(x, y, n); }
  void fp32_to_fp16_row(const float* x, uint16_t* y, int64_t n) const { fp32_to_fp16_row_(x, y, n); }
  void fp32_to_bf16_row(const float* x, uint16_t* y, int64_t n) const { fp32_to_bf16_row_(x, y, n); }
  void bf16_to_fp32_row(const uint16_t* x, float* y, int64_t n) const { bf16_to_fp32_row_(x, y, n); }

  // dequantize_row_<type> and quantize_row_<type>_ref by ggml's type name; nullptr if absent.
  DequantizeFn dequantize(GgmlType t) const {
    return reinterpret_cast<DequantizeFn>(dlsym(handle_, (std::string("dequantize_row_") + type_name(t)).c_str()));
  }
  QuantizeRowFn quantize_row_ref(GgmlType t) const {
    return reinterpret_cast<QuantizeRowFn>(
        dlsym(handle_, (std::string("quantize_row_") + type_name(t) + "_ref").c_str()));
  }

 private:
  void* handle_ = nullptr;
  size_t (*quantize_chunk_)(int, const float*, void*, int64_t, int64_t, int64_t, const float*) = nullptr;
  size_t (*row_size_)(int, int64_t) = nullptr;
  bool (*requires_imatrix_)(int) = nullptr;
  void (*fp16_to_fp32_row_)(const uint16_t*, float*, int64_t) = nullptr;
  void (*fp32_to_fp16_row_)(const float*, uint16_t*, int64_t) = nullptr;
  void (*fp32_to_bf16_row_)(const float*, uint16_t*, int64_t) = nullptr;
  void (*bf16_to_fp32_row_)(const uint16_t*, float*, int64_t) = nullptr;

  static std::string& error_() {
    static std::string e;
    return e;
  }
  template <typename Fn>
  static bool sym(void* h, const char* name, Fn& fn) {
    fn = reinterpret_cast<Fn>(dlsym(h, name));
    if (!fn) error_() = std::string("symbol ") + name + " missing in " + library_path();
    return fn != nullptr;
  }
  static const GgmlRef* load() {
    const std::string path = library_path();
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      error_() =
          "cannot load ggml oracle " + path + " (" + dlerror() + "); run the project's setup (npm ci in tests/node)";
      return nullptr;
    }
    auto* g = new GgmlRef;
    g->handle_ = h;
    if (!sym(h, "ggml_quantize_chunk", g->quantize_chunk_) || !sym(h, "ggml_row_size", g->row_size_) ||
        !sym(h, "ggml_quantize_requires_imatrix", g->requires_imatrix_) ||
        !sym(h, "ggml_fp16_to_fp32_row", g->fp16_to_fp32_row_) ||
        !sym(h, "ggml_fp32_to_fp16_row", g->fp32_to_fp16_row_) ||
        !sym(h, "ggml_fp32_to_bf16_row", g->fp32_to_bf16_row_) ||
        !sym(h, "ggml_bf16_to_fp32_row", g->bf16_to_fp32_row_)) {
      delete g;
      return nullptr;
    }
    // ggml_quantize_chunk initializes the grids of the IQ types itself (ggml_quantize_init).
    return g;
  }
};

}  // namespace k3::test
