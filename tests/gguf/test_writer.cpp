// The streaming writer: byte-identical round trips of files from the independent builder, the
// streaming and temporary-file contract, and split sets (gguf-contract.md §7).
#include <gtest/gtest.h>

#include <filesystem>

#include "builder.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "util.h"

namespace {

using namespace k3;
using namespace gguf_test;
using gguf::ValueType;
namespace fs = std::filesystem;

Doc model_doc(uint32_t align) {
  Doc d;
  d.alignment = align;
  d.kvs.push_back(kv_str("general.architecture", "kimi-k3"));
  if (align != 32) d.kvs.push_back(kv<uint32_t>("general.alignment", U32, align));
  d.kvs.push_back(kv<uint32_t>("kimi-k3.block_count", U32, 4));
  d.kvs.push_back(kv<float>("kimi-k3.attention.layer_norm_rms_epsilon", F32, 1e-5f));
  d.kvs.push_back(kv_arr<int32_t>("kimi-k3.attention.head_count_kv", I32, {0, 0, 0, 1}));
  d.kvs.push_back(kv_str_arr("tokenizer.ggml.tokens", {"a", "b", "\xc4\xa0"}));
  d.kvs.push_back(kv<uint8_t>("kimi-k3.expert_weights_norm", BOOL, 1));
  d.kvs.push_back(kv_arr<double>("x.f64", F64, {1.0 / 3}));
  d.kvs.push_back(kv_arr<uint8_t>("x.bools", BOOL, {0, 1}));
  d.add("token_embd.weight", T_BF16, {6, 5});
  d.add("output_norm.weight", T_F32, {3});
  d.add("blk.0.ffn_gate_exps.weight", T_MXFP4, {32, 3, 2});
  d.add("blk.0.attn_q.weight", T_Q4_K, {256, 3});
  d.add("blk.0.ssm_a", T_F32, {1, 1, 1});
  d.add("zero", T_F16, {4, 0});
  d.add("bytes", T_I8, {7});
  d.add("q8", T_Q8_0, {64, 1});
  return d;
}

TEST(GgufWriter, RoundTripIsByteIdentical) {
  TempDir tmp;
  std::vector<Doc> docs;
  for (uint32_t align : {32u, 64u, 1u, 8u, 256u}) docs.push_back(model_doc(align));
  docs.emplace_back();  // no KVs, no tensors
  docs.emplace_back().kvs.push_back(kv_str("only", "metadata"));
  Doc one;
  one.add("odd", T_F32, {5});  // 20 bytes: padded to 32 at the end of the file
  docs.push_back(one);
  for (size_t i = 0; i < docs.size(); ++i) {
    SCOPED_TRACE(i);
    std::vector<uint8_t> bytes = docs[i].build();
    std::string in = tmp / ("in" + std::to_string(i) + ".gguf"), out = tmp / ("out" + std::to_string(i) + ".gguf");
    save(in, bytes);
    auto f = gguf::File::open(in);
    gguf::rewrite(*f, out);
    EXPECT_EQ(load(out), bytes);
    EXPECT_FALSE(fs::exists(out + ".tmp"));
  }
}

TEST(GgufWriter, StreamsInChunksAndChecksOrder) {
  TempDir tmp;
  std::string path = tmp / "w.gguf";
  gguf::Metadata meta;
  meta.set("general.architecture", gguf::Value::str("kimi-k3"));
  std::vector<gguf::TensorSpec> specs = {
      {"a", GgmlType::F32, {3}}, {"z", GgmlType::F32, {0}}, {"b", GgmlType::Q8_0, {32, 2}}};
  std::vector<uint8_t> a(12), b(68);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(200 - i);
  {
    gguf::Writer w(path, meta, specs, 64);
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    expect_error([&] { w.write_tensor("b", b.data(), b.size()); }, {path, "'b' written where 'a' is next"});
    expect_error([&] { w.write_tensor("a", a.data(), 11); }, {"'a' has 11 bytes of data, expected 12"});
    w.write(a.data(), 5);  // a tensor may arrive in pieces, across tensor boundaries
    std::vector<uint8_t> rest(a.begin() + 5, a.end());
    rest.insert(rest.end(), b.begin(), b.begin() + 30);
    w.write(rest.data(), rest.size());
    expect_error([&] { w.finish(); }, {"'b' has 30 of 68 bytes written"});
    w.write(b.data() + 30, b.size() - 30);
    uint8_t extra = 0;
    expect_error([&] { w.write(&extra, 1); }, {"past the last tensor"});
    w.finish();
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->meta().get_u32("general.alignment"), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[1].offset, 64u);
  EXPECT_EQ(f->tensors()[2].offset, 64u);
  EXPECT_EQ(std::vector<uint8_t>(f->tensors()[0].data, f->tensors()[0].data + 12), a);
  EXPECT_EQ(std::vector<uint8_t>(f->tensors()[2].data, f->tensors()[2].data + 68), b);
  EXPECT_EQ(f->size(), f->data_offset() + 64 + 128);
}

TEST(GgufWriter, UnfinishedWriterLeavesNothing) {
  TempDir tmp;
  std::string path = tmp / "x.gguf";
  {
    gguf::Writer w(path, {}, {{"a", GgmlType::F32, {4}}});
    float x[2] = {1, 2};
    w.write(x, sizeof(x));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(GgufWriter, RejectsBadPlans) {
  TempDir tmp;
  std::string p = tmp / "bad.gguf";
  expect_error([&] { gguf::Writer(p, {}, {{std::string(64, 'n'), GgmlType::F32, {1}}}); }, {"longer than 63"});
  expect_error([&] { gguf::Writer(p, {}, {{"q", GgmlType::Q4_K, {100}}}); }, {"'q'", "not a multiple of 256"});
  expect_error(
      [&] {
        gguf::Writer(p, {}, {{"a", GgmlType::F32, {1}}, {"a", GgmlType::F32, {1}}});
      },
      {"duplicate tensor name 'a'"});
  expect_error([&] { gguf::Writer(p, {}, {{"a", GgmlType::F32, {1, 1, 1, 1, 1}}}); }, {"5 dims"});
  expect_error([&] { gguf::Writer(p, {}, {{"a", static_cast<GgmlType>(4), {1}}}); }, {"unknown type id 4"});
  expect_error([&] { gguf::Writer(p, {}, {{"l", GgmlType::MXFP4_LANES, {256}}}); }, {"'l'", "mxfp4_lanes", "in memory only"});
  expect_error([&] { gguf::Writer(p, {}, {}, 48); }, {"alignment 48"});
  gguf::Metadata m;
  m.set("general.alignment", gguf::Value::i32(64));
  expect_error([&] { gguf::Writer(p, m, {}); }, {"'general.alignment' has wrong type INT32"});
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST(GgufSplit, PlanByTensorsAndBytes) {
  std::vector<gguf::TensorSpec> t;
  for (char c = '0'; c < '7'; ++c) t.push_back({std::string(1, 't') + c, GgmlType::F32, {16}});  // 64 bytes each
  auto sizes = [](const gguf::SplitPlan& p) {
    std::vector<size_t> s;
    for (const auto& part : p.parts) s.push_back(part.size());
    return s;
  };
  EXPECT_EQ(sizes(gguf::plan_split(t, 0, 3)), (std::vector<size_t>{3, 3, 1}));
  EXPECT_EQ(sizes(gguf::plan_split(t, 128, 0)), (std::vector<size_t>{2, 2, 2, 1}));
  EXPECT_EQ(sizes(gguf::plan_split(t, 10, 0)), (std::vector<size_t>{1, 1, 1, 1, 1, 1, 1}));  // never divided
  EXPECT_EQ(sizes(gguf::plan_split(t, 1000, 2)), (std::vector<size_t>{2, 2, 2, 1}));
  EXPECT_EQ(sizes(gguf::plan_split({}, 0, 2)), (std::vector<size_t>{0}));
  EXPECT_EQ(gguf::plan_split(t, 0, 3).parts[1][0].name, "t3");
}

TEST(GgufSplit, MetadataGoesToPartOne) {
  gguf::Metadata full;
  full.set("general.architecture", gguf::Value::str("kimi-k3"));
  full.set("kimi-k3.block_count", gguf::Value::u32(93));
  gguf::Metadata p0 = gguf::split_metadata(full, 0, 3, 2573);
  ASSERT_EQ(p0.kvs().size(), 5u);
  EXPECT_EQ(p0.kvs()[0].key, "general.architecture");
  EXPECT_EQ(p0.kvs()[2].key, "split.no");
  EXPECT_EQ(p0.get_u16("split.no"), 0);
  EXPECT_EQ(p0.get_u16("split.count"), 3);
  EXPECT_EQ(p0.get_i32("split.tensors.count"), 2573);
  gguf::Metadata p2 = gguf::split_metadata(full, 2, 3, 2573);
  ASSERT_EQ(p2.kvs().size(), 3u);
  EXPECT_EQ(p2.get_u16("split.no"), 2);
  EXPECT_FALSE(p2.has("general.architecture"));
}

TEST(GgufSplit, WriteOpenAsOneNamespaceAndMerge) {
  TempDir tmp;
  for (uint32_t align : {32u, 128u}) {
    SCOPED_TRACE(align);
    Doc d = model_doc(align);
    std::vector<uint8_t> bytes = d.build();
    std::string in = tmp / "model.gguf";
    save(in, bytes);
    gguf::Model src = gguf::Model::open(in);
    std::vector<std::string> parts = gguf::write_split(src, tmp / "set", 0, 3);
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[0], tmp / "set-00001-of-00003.gguf");
    EXPECT_EQ(parts[2], tmp / "set-00003-of-00003.gguf");

    gguf::Model m = gguf::Model::open(parts[0]);
    ASSERT_EQ(m.files().size(), 3u);
    ASSERT_EQ(m.tensors().size(), d.tensors.size());
    for (size_t i = 0; i < d.tensors.size(); ++i) {
      const gguf::TensorInfo& t = m.get(d.tensors[i].name);
      EXPECT_EQ(m.tensors()[i], &t);
      EXPECT_EQ(t.file_index, i / 3);
      EXPECT_EQ(static_cast<int32_t>(t.type), d.tensors[i].type);
      EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), d.tensors[i].data);
    }
    EXPECT_EQ(m.meta().get_str("general.architecture"), "kimi-k3");
    EXPECT_EQ(m.meta().get_u16("split.count"), 3);
    EXPECT_EQ(m.meta().get_i32("split.tensors.count"), static_cast<int32_t>(d.tensors.size()));
    EXPECT_EQ(m.files()[0]->alignment(), align);
    for (size_t i = 1; i < 3; ++i) {
      const gguf::Metadata& pm = m.files()[i]->meta();
      ASSERT_EQ(pm.kvs().size(), 3u);
      EXPECT_EQ(pm.get_u16("split.no"), i);
      EXPECT_EQ(pm.get_u16("split.count"), 3);
      EXPECT_EQ(pm.get_i32("split.tensors.count"), static_cast<int32_t>(d.tensors.size()));
    }

    std::string merged = tmp / "merged.gguf";
    gguf::write_merged(m, merged);
    EXPECT_EQ(load(merged), bytes);
    // By size: each part holds at most 160 padded bytes of tensor data unless one tensor is larger.
    auto by_size = gguf::write_split(src, tmp / "sz", 160, 0);
    gguf::Model ms = gguf::Model::open(by_size[0]);
    EXPECT_GT(ms.files().size(), 2u);
    gguf::write_merged(ms, merged);
    EXPECT_EQ(load(merged), bytes);
  }
}

}  // namespace
