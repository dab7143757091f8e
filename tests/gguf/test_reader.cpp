// The reader on files encoded by the independent test builder: every value type, tensors at
// several alignments, strict typed access and per-layer keys.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "builder.h"
#include "common/error.h"
#include "gguf/gguf.h"
#include "util.h"

namespace {

using namespace k3;
using namespace gguf_test;
using gguf::ValueType;

const TempDir& tmp() {
  static TempDir dir;
  return dir;
}

std::unique_ptr<gguf::File> from_doc(Doc& d, const std::string& name) {
  std::vector<uint8_t> b = d.build();
  return gguf::File::from_memory(b.data(), b.size(), name);
}

Doc all_types_doc() {
  Doc d;
  d.kvs.push_back(kv<uint8_t>("u8", U8, 250));
  d.kvs.push_back(kv<int8_t>("i8", I8, -128));
  d.kvs.push_back(kv<uint16_t>("u16", U16, 65535));
  d.kvs.push_back(kv<int16_t>("i16", I16, -32768));
  d.kvs.push_back(kv<uint32_t>("u32", U32, 4000000000u));
  d.kvs.push_back(kv<int32_t>("i32", I32, -2000000000));
  d.kvs.push_back(kv<float>("f32", F32, -1.5e-7f));
  d.kvs.push_back(kv<uint8_t>("bool.t", BOOL, 1));
  d.kvs.push_back(kv<uint8_t>("bool.f", BOOL, 0));
  d.kvs.push_back(kv_str("str", std::string("h\xc3\xa9llo\0x", 8)));
  d.kvs.push_back(kv_str("str.empty", ""));
  d.kvs.push_back(kv<uint64_t>("u64", U64, 0xfedcba9876543210ull));
  d.kvs.push_back(kv<int64_t>("i64", I64, std::numeric_limits<int64_t>::min()));
  d.kvs.push_back(kv<double>("f64", F64, 3.141592653589793));
  d.kvs.push_back(kv_arr<uint8_t>("a.u8", U8, {0, 1, 255}));
  d.kvs.push_back(kv_arr<int8_t>("a.i8", I8, {-1, 127}));
  d.kvs.push_back(kv_arr<uint16_t>("a.u16", U16, {1, 65535}));
  d.kvs.push_back(kv_arr<int16_t>("a.i16", I16, {-2, 300}));
  d.kvs.push_back(kv_arr<uint32_t>("a.u32", U32, {7, 8, 9}));
  d.kvs.push_back(kv_arr<int32_t>("a.i32", I32, {0, 0, 0, 1}));
  d.kvs.push_back(kv_arr<float>("a.f32", F32, {1.0f, -0.0f, std::numeric_limits<float>::infinity()}));
  d.kvs.push_back(kv_arr<uint8_t>("a.bool", BOOL, {1, 0, 1}));
  d.kvs.push_back(kv_str_arr("a.str", {"a", "", "\xc4\xa0the"}));
  d.kvs.push_back(kv_arr<uint64_t>("a.u64", U64, {~0ull}));
  d.kvs.push_back(kv_arr<int64_t>("a.i64", I64, {-5, 5}));
  d.kvs.push_back(kv_arr<double>("a.f64", F64, {0.25, -1e300}));
  d.kvs.push_back(kv_arr<int32_t>("a.empty", I32, {}));
  return d;
}

TEST(GgufReader, EveryValueType) {
  Doc d = all_types_doc();
  auto f = from_doc(d, "mem.gguf");
  const gguf::Metadata& m = f->meta();
  ASSERT_EQ(m.kvs().size(), d.kvs.size());
  EXPECT_EQ(m.kvs()[0].key, "u8");
  EXPECT_EQ(m.kvs().back().key, "a.empty");
  EXPECT_EQ(std::get<uint8_t>(m.find("u8")->v), 250);
  EXPECT_EQ(std::get<int8_t>(m.find("i8")->v), -128);
  EXPECT_EQ(m.get_u16("u16"), 65535);
  EXPECT_EQ(std::get<int16_t>(m.find("i16")->v), -32768);
  EXPECT_EQ(m.get_u32("u32"), 4000000000u);
  EXPECT_EQ(m.get_i32("i32"), -2000000000);
  EXPECT_EQ(m.get_f32("f32"), -1.5e-7f);
  EXPECT_TRUE(m.get_bool("bool.t"));
  EXPECT_FALSE(m.get_bool("bool.f"));
  EXPECT_EQ(m.get_str("str"), std::string("h\xc3\xa9llo\0x", 8));
  EXPECT_EQ(m.get_str("str.empty"), "");
  EXPECT_EQ(std::get<uint64_t>(m.find("u64")->v), 0xfedcba9876543210ull);
  EXPECT_EQ(std::get<int64_t>(m.find("i64")->v), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<double>(m.find("f64")->v), 3.141592653589793);
  EXPECT_EQ(m.find("f64")->type, ValueType::FLOAT64);

  auto arr = [&](const char* k, ValueType t) {
    const gguf::Array& a = m.get_array(k);
    EXPECT_EQ(a.elem, t) << k;
    return a.data;
  };
  EXPECT_EQ(std::get<std::vector<uint8_t>>(arr("a.u8", ValueType::UINT8)), (std::vector<uint8_t>{0, 1, 255}));
  EXPECT_EQ(std::get<std::vector<int8_t>>(arr("a.i8", ValueType::INT8)), (std::vector<int8_t>{-1, 127}));
  EXPECT_EQ(std::get<std::vector<uint16_t>>(arr("a.u16", ValueType::UINT16)), (std::vector<uint16_t>{1, 65535}));
  EXPECT_EQ(std::get<std::vector<int16_t>>(arr("a.i16", ValueType::INT16)), (std::vector<int16_t>{-2, 300}));
  EXPECT_EQ(std::get<std::vector<uint32_t>>(arr("a.u32", ValueType::UINT32)), (std::vector<uint32_t>{7, 8, 9}));
  EXPECT_EQ(std::get<std::vector<int32_t>>(arr("a.i32", ValueType::INT32)), (std::vector<int32_t>{0, 0, 0, 1}));
  auto f32s = std::get<std::vector<float>>(arr("a.f32", ValueType::FLOAT32));
  ASSERT_EQ(f32s.size(), 3u);
  EXPECT_EQ(f32s[0], 1.0f);
  EXPECT_TRUE(f32s[1] == 0.0f && std::signbit(f32s[1]));
  EXPECT_TRUE(std::isinf(f32s[2]));
  EXPECT_EQ(std::get<std::vector<bool>>(arr("a.bool", ValueType::BOOL)), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(std::get<std::vector<std::string>>(arr("a.str", ValueType::STRING)),
            (std::vector<std::string>{"a", "", "\xc4\xa0the"}));
  EXPECT_EQ(std::get<std::vector<uint64_t>>(arr("a.u64", ValueType::UINT64)), (std::vector<uint64_t>{~0ull}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(arr("a.i64", ValueType::INT64)), (std::vector<int64_t>{-5, 5}));
  EXPECT_EQ(std::get<std::vector<double>>(arr("a.f64", ValueType::FLOAT64)), (std::vector<double>{0.25, -1e300}));
  EXPECT_EQ(m.get_array("a.empty").size(), 0u);
  EXPECT_EQ(m.get_array("a.empty").elem, ValueType::INT32);
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufReader, TensorsAtSeveralAlignments) {
  for (uint32_t align : {32u, 64u, 1u, 4096u}) {
    SCOPED_TRACE(align);
    Doc d;
    d.alignment = align;
    d.kvs.push_back(kv_str("general.architecture", "kimi-k3"));
    if (align != 32) d.kvs.push_back(kv<uint32_t>("general.alignment", U32, align));
    d.add("token_embd.weight", T_BF16, {6, 3});
    d.add("blk.0.ffn_gate_exps.weight", T_MXFP4, {64, 2, 3});
    d.add("odd", T_F32, {3});
    d.add("empty", T_F16, {8, 0});
    d.add("blk.0.attn_q.weight", T_Q4_K, {256, 1, 1, 2});
    d.add("q8", T_Q8_0, {32});
    std::vector<uint8_t> bytes = d.build();
    std::string path = tmp() / ("align" + std::to_string(align) + ".gguf");
    save(path, bytes);

    auto f = gguf::File::open(path);
    EXPECT_EQ(f->path(), path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), align);
    EXPECT_EQ(f->data_offset(), d.data_start);
    EXPECT_EQ(f->size(), bytes.size());
    ASSERT_EQ(f->tensors().size(), d.tensors.size());
    for (size_t i = 0; i < d.tensors.size(); ++i) {
      const gguf::TensorInfo& t = f->tensors()[i];
      const TensorDef& want = d.tensors[i];
      EXPECT_EQ(t.name, want.name);
      EXPECT_EQ(static_cast<int32_t>(t.type), want.type);
      EXPECT_EQ(t.n_dims, want.ne.size());
      for (size_t k = 0; k < 4; ++k) EXPECT_EQ(t.ne[k], k < want.ne.size() ? want.ne[k] : 1);
      EXPECT_EQ(t.nbytes, want.data.size());
      EXPECT_EQ(t.offset, d.tensor_start[i] - d.data_start);
      EXPECT_EQ(t.data, f->base() + d.tensor_start[i]);
      EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), want.data);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % std::min<uint32_t>(align, 4096), 0u);
    }
    EXPECT_EQ(f->tensors()[1].shape_string(), "[64, 2, 3]");
    EXPECT_EQ(f->tensors()[4].nelements(), 512);

    gguf::Model m = gguf::Model::open(path);
    EXPECT_EQ(m.files().size(), 1u);
    EXPECT_EQ(m.tensors().size(), d.tensors.size());
    EXPECT_EQ(m.get("odd").nbytes, 12u);
    EXPECT_EQ(m.find("missing"), nullptr);
    EXPECT_EQ(m.meta().get_str("general.architecture"), "kimi-k3");
    expect_error([&] { m.get("blk.9.attn_q.weight"); }, {path, "tensor 'blk.9.attn_q.weight' not found"});
  }
}

TEST(GgufReader, VersionTwoAndMinimalFiles) {
  Doc d;
  d.version = 2;
  auto f = from_doc(d, "v2.gguf");
  EXPECT_EQ(f->version(), 2u);
  EXPECT_TRUE(f->meta().kvs().empty());
  // A file without tensors may stop right after its infos, before the alignment padding.
  Doc e;
  e.kvs.push_back(kv_str("a", "b"));
  std::vector<uint8_t> b = e.build();
  b.resize(e.infos_end);
  EXPECT_EQ(gguf::File::from_memory(b.data(), b.size(), "short.gguf")->meta().get_str("a"), "b");
}

TEST(GgufReader, StrictTypedAccess) {
  Doc d = all_types_doc();
  d.kvs.push_back(kv<int32_t>("kimi-k3.block_count", I32, 93));
  auto f = from_doc(d, "x.gguf");
  const gguf::Metadata& m = f->meta();
  expect_error([&] { m.get_u32("kimi-k3.block_count"); },
               {"x.gguf: ", "key 'kimi-k3.block_count' has wrong type INT32, expected UINT32"});
  expect_error([&] { m.get_f32("f64"); }, {"'f64'", "FLOAT64", "FLOAT32"});
  expect_error([&] { m.get_bool("u8"); }, {"'u8'", "UINT8", "BOOL"});
  expect_error([&] { m.get_str("a.str"); }, {"'a.str'", "ARRAY", "STRING"});
  expect_error([&] { m.get_array("str"); }, {"'str'", "STRING", "ARRAY"});
  expect_error([&] { m.get_u16("u32"); }, {"'u32'", "UINT32", "UINT16"});
  expect_error([&] { m.get_i32("u32"); }, {"'u32'", "UINT32", "INT32"});
  expect_error([&] { m.get_u32("nope"); }, {"x.gguf: key 'nope' not found"});
  EXPECT_EQ(m.get_u32_or("nope", 7), 7u);
  EXPECT_EQ(m.get_u32_or("u32", 7), 4000000000u);
  expect_error([&] { m.get_u32_or("i32", 7); }, {"'i32'", "INT32", "UINT32"});
  EXPECT_EQ(m.get_f32_or("nope", 2.5f), 2.5f);
  expect_error([&] { m.get_f32_or("f64", 1.0f); }, {"FLOAT64"});
  EXPECT_TRUE(m.get_bool_or("nope", true));
  expect_error([&] { m.get_bool_or("u8", true); }, {"UINT8"});
  EXPECT_FALSE(m.get_str_opt("nope").has_value());
  EXPECT_EQ(*m.get_str_opt("str.empty"), "");
  expect_error([&] { m.get_str_opt("u8"); }, {"UINT8", "STRING"});
}

TEST(GgufReader, PerLayerKeys) {
  Doc d;
  d.kvs.push_back(kv<uint32_t>("scalar", U32, 16));
  d.kvs.push_back(kv_arr<int32_t>("kv", I32, {0, 0, 0, 1}));
  d.kvs.push_back(kv_arr<uint32_t>("ff", U32, {5, 6, 7, 8}));
  d.kvs.push_back(kv_arr<int32_t>("neg", I32, {0, -1, 0, 1}));
  d.kvs.push_back(kv_arr<float>("floats", F32, {0, 0, 0, 1}));
  d.kvs.push_back(kv<int32_t>("i32scalar", I32, 4));
  auto f = from_doc(d, "p.gguf");
  const gguf::Metadata& m = f->meta();
  EXPECT_EQ(m.get_u32_per_layer("scalar", 4), (std::vector<uint32_t>{16, 16, 16, 16}));
  EXPECT_EQ(m.get_u32_per_layer("kv", 4), (std::vector<uint32_t>{0, 0, 0, 1}));
  EXPECT_EQ(m.get_u32_per_layer("ff", 4), (std::vector<uint32_t>{5, 6, 7, 8}));
  expect_error([&] { m.get_u32_per_layer("kv", 5); }, {"p.gguf", "'kv' has 4 elements, expected 5"});
  expect_error([&] { m.get_u32_per_layer("ff", 3); }, {"'ff' has 4 elements, expected 3"});
  expect_error([&] { m.get_u32_per_layer("neg", 4); }, {"'neg' element 1 is negative"});
  expect_error([&] { m.get_u32_per_layer("floats", 4); }, {"'floats' is an array of FLOAT32"});
  expect_error([&] { m.get_u32_per_layer("i32scalar", 4); }, {"'i32scalar' has wrong type INT32"});
  expect_error([&] { m.get_u32_per_layer("missing", 4); }, {"'missing' not found"});
}

TEST(GgufReader, MetadataEditing) {
  gguf::Metadata m;
  m.set("a", gguf::Value::u32(1));
  m.set("b", gguf::Value::str("x"));
  m.set("c", gguf::Value::f32(2));
  m.set("a", gguf::Value::i32(-1));  // replaced in place, keeps its position
  ASSERT_EQ(m.kvs().size(), 3u);
  EXPECT_EQ(m.kvs()[0].key, "a");
  EXPECT_EQ(m.get_i32("a"), -1);
  m.erase("b");
  ASSERT_EQ(m.kvs().size(), 2u);
  EXPECT_EQ(m.kvs()[1].key, "c");
  EXPECT_EQ(m.get_f32("c"), 2.0f);
  EXPECT_FALSE(m.has("b"));
  EXPECT_EQ(gguf::Value::u8(3).to_string(), "3");
  EXPECT_EQ(gguf::Value::str("k\n").to_string(), "\"k\\x0a\"");
  gguf::Array a{ValueType::INT32, std::vector<int32_t>{1, 2, 3, 4}};
  EXPECT_EQ(gguf::Value::array(a).to_string(2), "INT32[4] [1, 2, ...]");
}

TEST(GgufReader, SplitPathFormat) {
  EXPECT_EQ(gguf::split_path("/m/Kimi-K3-Q2_K", 2, 94), "/m/Kimi-K3-Q2_K-00002-of-00094.gguf");
}

}  // namespace
