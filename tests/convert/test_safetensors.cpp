// The safetensors reader: every header field is checked against the file, errors name the file
// and the tensor; the index must name existing plain shard files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "convert/safetensors.h"
#include "convert/st_writer.h"
#include "helpers.h"

using namespace k3;
using namespace k3::st;

namespace {

std::string file_bytes(const std::string& header, size_t data_bytes) {
  std::string f(8, '\0');
  uint64_t n = header.size();
  std::memcpy(f.data(), &n, 8);
  f += header;
  for (size_t i = 0; i < data_bytes; ++i) f += static_cast<char>(i * 7);
  return f;
}

std::string error_of(const std::string& bytes) {
  try {
    File::from_memory(bytes.data(), bytes.size(), "shard.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& header, size_t data, const std::string& needle1, const std::string& needle2 = "") {
  std::string e = error_of(file_bytes(header, data));
  EXPECT_NE(e, "") << header;
  EXPECT_NE(e.find("shard.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find(needle1), std::string::npos) << e;
  if (!needle2.empty()) {
    EXPECT_NE(e.find(needle2), std::string::npos) << e;
  }
}

}  // namespace

TEST(ConvertSafetensors, ReadsWhatTheWriterWrites) {
  std::vector<Spec> specs = {{"a", DType::BF16, {3, 4}}, {"b", DType::F32, {5}}, {"c.weight_scale", DType::F8_E8M0, {2, 2}},
                             {"d", DType::U8, {0}}, {"e", DType::F8_E4M3, {3}}, {"f", DType::I8, {1}}, {"g", DType::F16, {2, 1, 2}}};
  std::string h = header_json(specs);
  uint64_t total = 0;
  for (auto& s : specs) total += s.nbytes();
  std::string bytes = file_bytes(h, total);
  auto f = File::from_memory(bytes.data(), bytes.size(), "x.safetensors");
  ASSERT_EQ(f->tensors().size(), specs.size());
  const TensorView& a = f->get("a");
  EXPECT_EQ(a.dtype, DType::BF16);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(a.nbytes(), 24u);
  EXPECT_EQ(a.data, f->tensors()[0].data);
  EXPECT_EQ(f->get("c.weight_scale").dtype, DType::F8_E8M0);
  EXPECT_EQ(f->get("e").dtype, DType::F8_E4M3);
  EXPECT_EQ(f->get("d").nbytes(), 0u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->find("zzz"), nullptr);
  try {
    f->get("zzz");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("zzz"), std::string::npos);
  }
}

TEST(ConvertSafetensors, RejectsBadHeaders) {
  // header length beyond the file
  {
    std::string f(8, '\0');
    uint64_t n = 1000;
    std::memcpy(f.data(), &n, 8);
    f += "{}";
    std::string e = error_of(f);
    EXPECT_NE(e.find("past the end"), std::string::npos) << e;
  }
  EXPECT_NE(error_of("abc").find("too short"), std::string::npos);
  expect_error("{not json", 0, "not valid JSON");
  expect_error("[1,2]", 0, "not a JSON object");
  expect_error(R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}})", 2, "'w'", "unknown dtype");
  expect_error(R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}})", 10, "'w'", "needs 12 bytes");
  expect_error(R"({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})", 3, "'w'", "past the end");
  expect_error(R"({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 4]}})", 8, "'w'", "end before begin");
  expect_error(R"({"w": {"dtype": "BF16", "shape": [-2], "data_offsets": [0, 4]}})", 4, "'w'", "non-negative");
  expect_error(R"({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0]}})", 4, "'w'", "data_offsets");
  expect_error(R"({"w": {"shape": [2], "data_offsets": [0, 4]}})", 4, "'w'", "dtype");
  expect_error(R"({"w": {"dtype": "U8", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 4]}})", 4, "'w'", "overflow");
  expect_error(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
               6, "overlap", "'a'");
  expect_error(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
               8, "'a'", "twice");
}

TEST(ConvertSafetensors, IndexChecksShards) {
  test::TempDir d;
  namespace fs = std::filesystem;
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(d / name) << text; };
  {
    Writer w(d / "model-1.safetensors", {{"x", DType::F32, {2}}});
    float v[2] = {1, 2};
    w.write(v, 8);
    w.finish();
  }
  write("model.safetensors.index.json", R"({"weight_map": {"x": "model-1.safetensors", "y": "model-2.safetensors"}})");
  try {
    Index::load(d.path());
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("model-2.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("'y'"), std::string::npos) << m;
    EXPECT_NE(m.find("does not exist"), std::string::npos) << m;
  }
  write("model.safetensors.index.json", R"({"weight_map": {"x": "../model-1.safetensors"}})");
  EXPECT_THROW(Index::load(d.path()), Error);
  write("model.safetensors.index.json", R"({"weight_map": {"x": "model-1.safetensors"}})");
  Index ix = Index::load(d.path());
  ASSERT_EQ(ix.shards.size(), 1u);
  EXPECT_EQ(ix.shard_of.at("x"), 0);
  fs::remove(d / "model.safetensors.index.json");
  EXPECT_THROW(Index::load(d.path()), Error);
  fs::rename(d / "model-1.safetensors", d / "model.safetensors");
  EXPECT_EQ(Index::load(d.path()).shards.size(), 1u);
}

TEST(ConvertSafetensors, ReleaseKeepsDataReadable) {
  test::TempDir d;
  std::vector<uint8_t> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31);
  {
    Writer w(d / "a.safetensors", {{"x", DType::U8, {static_cast<int64_t>(data.size())}}});
    w.write(data.data(), data.size());
    w.finish();
  }
  auto f = File::open(d / "a.safetensors");
  const TensorView& t = f->get("x");
  EXPECT_EQ(std::memcmp(t.data, data.data(), data.size()), 0);
  f->release(t.data, t.nbytes());
  EXPECT_EQ(std::memcmp(t.data, data.data(), data.size()), 0);  // pages come back from the file
}
