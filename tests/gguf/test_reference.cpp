// Cross-check with the reference GGUF reader (ggml's, from the node-llama-cpp prebuilt, through its
// public C API): files k3 writes must load there with the same layout, and hostile files k3
// rejects must be rejected there too, except where k3 is deliberately stricter.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <set>

#include "corpus.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "util.h"

namespace {

using namespace gguf_test;
namespace gguf = k3::gguf;

struct Ref {
  struct InitParams {
    bool no_alloc;
    void** ctx;
  };
  void* (*init)(const char*, InitParams) = nullptr;
  void (*free)(void*) = nullptr;
  int64_t (*n_tensors)(const void*) = nullptr;
  int64_t (*n_kv)(const void*) = nullptr;
  size_t (*alignment)(const void*) = nullptr;
  size_t (*data_offset)(const void*) = nullptr;
  size_t (*tensor_offset)(const void*, int64_t) = nullptr;

  Ref() {
    const char* src = std::getenv("K3_SOURCE_DIR");
    std::string lib = std::string(src ? src : K3_SOURCE_DIR_DEFAULT) +
                      "/tests/node/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw std::runtime_error("cannot load the reference GGUF reader (run tools/setup test): " + lib);
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn) throw std::runtime_error(std::string("missing symbol ") + name);
    };
    sym(init, "gguf_init_from_file");
    sym(free, "gguf_free");
    sym(n_tensors, "gguf_get_n_tensors");
    sym(n_kv, "gguf_get_n_kv");
    sym(alignment, "gguf_get_alignment");
    sym(data_offset, "gguf_get_data_offset");
    sym(tensor_offset, "gguf_get_tensor_offset");
  }
  static const Ref& get() {
    static const Ref r;
    return r;
  }
};

TEST(GgufReference, AcceptsWhatK3Writes) {
  const Ref& ref = Ref::get();
  TempDir dir;
  for (const CaseFile& f : valid_files()) save(dir / f.name, f.bytes);
  std::vector<std::string> written;
  for (const char* name : {"base.gguf", "empty.gguf", "align64.gguf"}) {
    written.push_back(dir / (std::string("k3_") + name));
    gguf::rewrite(*gguf::File::open(dir / name), written.back());
  }
  gguf::Model m = gguf::Model::open(dir / "base.gguf");
  for (const std::string& p : gguf::write_split(m, dir / "split", 0, 2)) written.push_back(p);
  for (const std::string& p : written) {
    SCOPED_TRACE(p);
    auto f = gguf::File::open(p);
    void* ctx = ref.init(p.c_str(), {true, nullptr});
    ASSERT_NE(ctx, nullptr);
    EXPECT_EQ(ref.n_kv(ctx), static_cast<int64_t>(f->meta().kvs().size()));
    EXPECT_EQ(ref.alignment(ctx), f->alignment());
    ASSERT_EQ(ref.n_tensors(ctx), static_cast<int64_t>(f->tensors().size()));
    if (!f->tensors().empty()) {
      EXPECT_EQ(ref.data_offset(ctx), f->data_offset());
    }
    for (size_t i = 0; i < f->tensors().size(); ++i) EXPECT_EQ(ref.tensor_offset(ctx, i), f->tensors()[i].offset);
    ref.free(ctx);
  }
}

TEST(GgufReference, RejectsWhatK3Rejects) {
  const Ref& ref = Ref::get();
  // Where k3 is stricter than the reference's metadata pass (which these files get through):
  // BOOL bytes other than 0/1, an element count beyond int64, and tensor data beyond the end of
  // the file (left to the reference's model loader). Split-set rules belong to the loader too.
  const std::set<std::string> k3_only = {"bad_bool",   "bad_bool_in_array", "element_count_overflow",
                                         "trunc_data", "trunc_last_tensor", "tensor_larger_than_file"};
  for (const Case& c : hostile_cases()) {
    if (c.id.starts_with("split_")) continue;
    SCOPED_TRACE(c.id);
    TempDir dir;
    for (const CaseFile& f : c.files) save(dir / f.name, f.bytes);
    void* ctx = ref.init((dir / c.files[0].name).c_str(), {true, nullptr});
    // trunc_data_TYPE: the same truncation with a tensor of each low-bit type
    const bool strict = k3_only.count(c.id) || c.id.starts_with("trunc_data_");
    EXPECT_EQ(ctx == nullptr, !strict) << "the reference reader disagrees on " << c.id;
    if (ctx) ref.free(ctx);
  }
}

}  // namespace
