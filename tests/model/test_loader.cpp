// Loader errors: every defect of a file gets a k3::Error that names it, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "common/error.h"
#include "gguf/writer.h"
#include "helpers.h"
#include "model/registry.h"

using namespace k3;
using namespace k3::test;

namespace {

// Copies `src` to `name`, letting the caller edit the metadata and the tensor plan. Tensors keep
// their bytes (an edit must keep a tensor's byte size); added tensors get zeros.
std::string rewrite(const std::string& src, const std::string& name,
                    const std::function<void(gguf::Metadata&)>& edit_meta,
                    const std::function<void(std::vector<gguf::TensorSpec>&)>& edit_specs) {
  const gguf::Model in = gguf::Model::open(src);
  gguf::Metadata meta = in.meta();
  if (edit_meta) edit_meta(meta);
  std::vector<gguf::TensorSpec> specs;
  for (const gguf::TensorInfo* t : in.tensors())
    specs.push_back({t->name, t->type, std::vector<int64_t>(t->ne, t->ne + t->n_dims)});
  if (edit_specs) edit_specs(specs);
  const std::string out = temp_path(name + ".gguf");
  gguf::Writer w(out, meta, specs);
  for (const auto& s : specs) {
    int64_t n = 1;
    for (int64_t x : s.ne) n *= x;
    const size_t bytes = row_size(s.type, s.ne[0]) * (n / s.ne[0]);
    if (const gguf::TensorInfo* t = in.find(s.name); t && t->nbytes == bytes) {
      w.write_tensor(s.name, t->data, bytes);
    } else {
      std::vector<uint8_t> zeros(bytes);
      w.write_tensor(s.name, zeros.data(), bytes);
    }
  }
  w.finish();
  return out;
}

std::string good() { return make_model(config_a(1e-5f), "loader_good"); }

void expect_load_error(const std::string& path, std::initializer_list<const char*> needles) {
  try {
    model::Model::load(path);
    ADD_FAILURE() << "loaded without error";
  } catch (const Error& e) {
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

gguf::TensorSpec* find(std::vector<gguf::TensorSpec>& v, const std::string& name) {
  for (auto& s : v)
    if (s.name == name) return &s;
  return nullptr;
}

TEST(Loader, GoodModelLoads) {
  auto m = model::Model::load(good());
  EXPECT_EQ(m->hparams().n_layer, 17u);
  EXPECT_TRUE(m->hparams().has_attn_gate);
  EXPECT_TRUE(m->weights().layers[16].k_b);
  EXPECT_FALSE(m->weights().layers[16].conv_q);
}

TEST(Loader, MissingTensor) {
  const auto p = rewrite(good(), "missing", nullptr, [](auto& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](auto& s) { return s.name == "blk.7.attn_k_b.weight"; }), v.end());
  });
  expect_load_error(p, {"missing tensor 'blk.7.attn_k_b.weight'", "MLA layer"});
}

TEST(Loader, WrongShape) {
  const auto p = rewrite(good(), "shape", nullptr, [](auto& v) { find(v, "blk.2.ssm_f_a.weight")->ne = {32, 64}; });
  expect_load_error(p, {"blk.2.ssm_f_a.weight", "has shape [32, 64], expected [64, 32]"});
}

TEST(Loader, UnsupportedType) {
  const auto p = rewrite(good(), "type", nullptr, [](auto& v) { find(v, "blk.1.attn_q.weight")->type = GgmlType::I32; });
  expect_load_error(p, {"blk.1.attn_q.weight", "i32", "cannot compute"});
  const auto p2 = rewrite(good(), "type2", nullptr, [](auto& v) {
    auto* s = find(v, "blk.1.attn_res_score.weight");
    s->type = GgmlType::F16;
    s->ne = {128};  // same bytes as [64] f32
  });
  expect_load_error(p2, {"blk.1.attn_res_score.weight"});
}

TEST(Loader, ExtraTensor) {
  const auto p = rewrite(good(), "extra", nullptr, [](auto& v) { v.push_back({"blk.0.attn_q.bias", GgmlType::F32, {64}}); });
  expect_load_error(p, {"unexpected tensor 'blk.0.attn_q.bias'"});
}

TEST(Loader, InconsistentSchedule) {
  // head_count_kv of the wrong length
  const auto p = rewrite(good(), "sched_len", [](gguf::Metadata& m) {
    gguf::Array a;
    a.elem = gguf::ValueType::INT32;
    a.data = std::vector<int32_t>(16, 0);
    m.set("kimi-k3.attention.head_count_kv", gguf::Value::array(a));
  }, nullptr);
  expect_load_error(p, {"head_count_kv"});
  // a schedule that makes layer 0 MLA while the file holds KDA tensors there
  const auto p2 = rewrite(good(), "sched_kind", [](gguf::Metadata& m) {
    std::vector<int32_t> kv(17, 0);
    for (int il : {0, 3, 7, 11, 15, 16}) kv[il] = 1;
    gguf::Array a;
    a.elem = gguf::ValueType::INT32;
    a.data = kv;
    m.set("kimi-k3.attention.head_count_kv", gguf::Value::array(a));
  }, nullptr);
  expect_load_error(p2, {"blk.0.", "MLA layer"});
}

TEST(Loader, WrongKeyTypeNamesFileAndKey) {
  const auto p = rewrite(good(), "keytype", [](gguf::Metadata& m) { m.set("kimi-k3.expert_count", gguf::Value::i32(8)); }, nullptr);
  expect_load_error(p, {"keytype.gguf", "kimi-k3.expert_count"});
}

TEST(Loader, NotAFile) { expect_load_error(temp_path("does-not-exist.gguf"), {"does-not-exist.gguf"}); }

}  // namespace

namespace {

// The byte ranges of `t` (per matrix of a stack whose rows are cut).
std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges(const model::Tensor& t) {
  std::vector<std::pair<const uint8_t*, const uint8_t*>> r;
  if (!t.nb2) return {{t.data, t.data + t.bytes()}};
  for (int64_t e = 0; e < t.ne[2]; ++e) r.push_back({t.data + e * t.nb2, t.data + e * t.nb2 + t.ne[1] * t.row_bytes()});
  return r;
}

}  // namespace

// Several processes (placement.h): the shares of every cut tensor are disjoint byte ranges that
// cover it, in process order; whole tensors are whole everywhere; each layer, the embedding and
// the head are held by exactly one pipeline stage.
TEST(Loader, SharesOfProcessesCoverEveryTensorOnce) {
  for (const char* name : {"a", "d"}) {
    const auto& cfg = std::string(name) == "a" ? config_a : config_d;
    const gguf::Model file = gguf::Model::open(make_model(cfg(1e-5f), std::string("loader_share_") + name));
    model::HParams hp0 = model::HParams::from_metadata(file.meta());
    for (const auto& [tp, pp] : {std::pair{2, 1}, {3, 1}, {5, 1}, {1, 3}, {2, 2}}) {
      std::vector<model::Weights> w;
      std::vector<model::Placement> at;
      for (int s = 0; s < pp; ++s)
        for (int r = 0; r < tp; ++r) {
          model::HParams hp = hp0;
          at.push_back({r, tp, s, pp});
          w.push_back(model::bind_weights(file, hp, at.back()));
        }
      model::for_each_tensor(hp0, [&](const model::TensorRef& ref) {
        const gguf::TensorInfo& ti = file.get(ref.name);
        std::vector<std::pair<const uint8_t*, const uint8_t*>> got;  // every piece held, process order
        int stages = 0;
        for (size_t i = 0; i < w.size(); ++i) {
          const model::Tensor& t = model::bound(w[i], ref);
          if (!t) continue;
          if (at[i].tp_rank == 0) ++stages;
          if (ref.def.cut.kind == model::Cut::Whole) {
            EXPECT_EQ(t.data, ti.data) << ref.name;
            EXPECT_EQ(t.bytes(), ti.nbytes) << ref.name;
          } else {
            for (const auto& r : ranges(t)) got.push_back(r);
          }
        }
        EXPECT_EQ(stages, 1) << ref.name << " tp " << tp << " pp " << pp;
        if (ref.def.cut.kind == model::Cut::Whole || got.empty()) return;
        std::sort(got.begin(), got.end());
        const uint8_t* at_byte = ti.data;
        for (const auto& [b, e] : got) {
          EXPECT_EQ(b, at_byte) << ref.name << " tp " << tp;
          at_byte = e;
        }
        EXPECT_EQ(at_byte, ti.data + ti.nbytes) << ref.name << " tp " << tp;
      });
    }
  }
}
