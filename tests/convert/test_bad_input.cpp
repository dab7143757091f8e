// Bad checkpoints: each gives an error naming the file and the tensor (or field), and nothing is
// left under a final name in the output directory.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "helpers.h"

using namespace k3;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

class ConvertBadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    ckpt_ = new test::Checkpoint(test::make_checkpoint(dir_->path(), test::tiny_options()));
  }
  static void TearDownTestSuite() {
    delete ckpt_;
    delete dir_;
  }
  void SetUp() override {
    src_ = tmp_ / "hf";
    fs::copy(ckpt_->hf, src_, fs::copy_options::recursive);
  }
  // Runs the conversion, expects an error containing every needle, and no final output files.
  void expect_failure(const std::vector<std::string>& needles) {
    const std::string out = tmp_ / "out";
    std::string msg;
    try {
      convert::run_convert(test::convert_options(src_, out, 2));
    } catch (const Error& e) {
      msg = e.what();
    }
    ASSERT_NE(msg, "") << "no error";
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    if (fs::exists(out))
      for (const auto& n : test::list_dir(out)) ADD_FAILURE() << "left in the output directory: " << n;
  }
  std::string shard(int no) const {
    for (const auto& n : test::list_dir(src_))
      if (n.rfind(strprintf("model-%06d-of-", no), 0) == 0) return src_ + "/" + n;
    return "";
  }
  // Rewrites a shard's header through `edit` (data unchanged).
  void edit_header(int no, const std::function<void(json&)>& edit) {
    const std::string path = shard(no);
    std::string bytes = test::read_file(path);
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    json h = json::parse(bytes.substr(8, n));
    edit(h);
    std::string hs = h.dump();
    while (hs.size() % 8) hs += ' ';
    uint64_t m = hs.size();
    std::string out(reinterpret_cast<const char*>(&m), 8);
    out += hs;
    out += bytes.substr(8 + n);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << out;
  }
  static inline test::TempDir* dir_ = nullptr;
  static inline test::Checkpoint* ckpt_ = nullptr;
  test::TempDir tmp_;
  std::string src_;
};

}  // namespace

TEST_F(ConvertBadInput, TruncatedShard) {
  const std::string s = shard(2);
  fs::resize_file(s, fs::file_size(s) - 1000);
  expect_failure({fs::path(s).filename().string(), "language_model.model.layers.1.", "past the end"});
}

TEST_F(ConvertBadInput, HeaderPointsOutsideTheFile) {
  edit_header(3, [](json& h) {
    json& t = h["language_model.model.layers.2.self_attn.q_proj.weight"];
    t["data_offsets"][1] = t["data_offsets"][1].get<uint64_t>() + (1u << 30);
    t["data_offsets"][0] = t["data_offsets"][0].get<uint64_t>() + (1u << 30);
  });
  expect_failure({"model-000003", "language_model.model.layers.2.self_attn.q_proj.weight", "past the end"});
}

TEST_F(ConvertBadInput, WrongDtype) {
  edit_header(1, [](json& h) {
    json& t = h["language_model.model.layers.0.self_attn.k_proj.weight"];
    t["dtype"] = "U8";
    t["shape"][1] = t["shape"][1].get<int64_t>() * 2;
  });
  expect_failure({"model-000001", "language_model.model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", "dtype U8"});
}

TEST_F(ConvertBadInput, WrongShape) {
  edit_header(4, [](json& h) {
    json& t = h["language_model.model.layers.3.self_attn.kv_b_proj.weight"];
    std::swap(t["shape"][0], t["shape"][1]);
  });
  expect_failure({"model-000004", "language_model.model.layers.3.self_attn.kv_b_proj.weight", "shape"});
}

TEST_F(ConvertBadInput, WrongExpertScaleShape) {
  edit_header(2, [](json& h) {
    json& t = h["language_model.model.layers.1.block_sparse_moe.experts.5.w2.weight_scale"];
    std::swap(t["shape"][0], t["shape"][1]);  // [groups, rows] instead of [rows, groups]
  });
  expect_failure({"language_model.model.layers.1.block_sparse_moe.experts.5.w2.weight_scale", "blk.1.ffn_down_exps.weight", "shape"});
}

TEST_F(ConvertBadInput, MissingShardNamedInIndex) {
  fs::remove(shard(5));
  expect_failure({"model.safetensors.index.json", "model-000005", "does not exist", "language_model.model.layers.4."});
}

TEST_F(ConvertBadInput, MissingTensor) {
  edit_header(2, [](json& h) { h.erase("language_model.model.layers.1.block_sparse_moe.experts.3.w1.weight_packed"); });
  // The index still lists it: the shard/index disagreement is reported first.
  expect_failure({"model-000002", "language_model.model.layers.1.block_sparse_moe.experts.3.w1.weight_packed"});
}

TEST_F(ConvertBadInput, MissingConfigField) {
  json c = json::parse(test::read_file(src_ + "/config.json"));
  c["text_config"].erase("hidden_size");
  std::ofstream(src_ + "/config.json") << c.dump(2);
  expect_failure({"config.json", "hidden_size"});
  c["text_config"]["hidden_size"] = "wide";
  std::ofstream(src_ + "/config.json") << c.dump(2);
  expect_failure({"config.json", "hidden_size", "integer"});
}

TEST_F(ConvertBadInput, ConfigDisagreesWithTensors) {
  json c = json::parse(test::read_file(src_ + "/config.json"));
  c["text_config"]["linear_attn_config"]["full_attn_layers"] = json::array({1, 9});
  std::ofstream(src_ + "/config.json") << c.dump(2);
  expect_failure({"language_model.model.layers.0.self_attn"});
}

TEST_F(ConvertBadInput, UnknownTensor) {
  edit_header(1, [](json& h) {
    json t = h["language_model.model.layers.0.input_layernorm.weight"];
    h.erase("language_model.model.layers.0.input_layernorm.weight");
    h["language_model.model.layers.0.mystery.weight"] = t;
  });
  json ix = json::parse(test::read_file(src_ + "/model.safetensors.index.json"));
  std::string f = ix["weight_map"]["language_model.model.layers.0.input_layernorm.weight"];
  ix["weight_map"].erase("language_model.model.layers.0.input_layernorm.weight");
  ix["weight_map"]["language_model.model.layers.0.mystery.weight"] = f;
  std::ofstream(src_ + "/model.safetensors.index.json") << ix.dump(2);
  expect_failure({"language_model.model.layers.0.input_layernorm.weight", "missing"});
}

TEST_F(ConvertBadInput, MissingTokenizer) {
  fs::remove(src_ + "/tiktoken.model");
  expect_failure({"tiktoken.model"});
}

// Too little free space: an error up front that says how much is needed and how much is free;
// nothing is written, not even the lock file.
TEST_F(ConvertBadInput, NotEnoughDiskSpace) {
  setenv("K3_CONVERT_FREE_BYTES", "4096", 1);
  expect_failure({"not enough disk space in", "the parts to write need", "is free"});
  unsetenv("K3_CONVERT_FREE_BYTES");
}

