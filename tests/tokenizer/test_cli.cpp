// `k3 tokenize` / `k3 detokenize` end to end on a small tiktoken.model + tokenizer_config.json.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "support/temp_dir.h"

namespace {

struct Result {
  int rc;
  std::string out;
};

#ifndef K3_BIN_DIR_DEFAULT
#define K3_BIN_DIR_DEFAULT ""
#endif

std::string k3() {
  const char* d = std::getenv("K3_BIN_DIR");
  return std::string(d ? d : K3_BIN_DIR_DEFAULT) + "/k3";
}

Result run(const std::string& args) {
  std::string cmd = k3() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::ifstream(k3())) << "k3 binary not built (" << k3() << ")";
    // ctest runs each test in its own process at once: a private directory keeps them off each other's files.
    model_ = dir_ / "k3_cli_test.tiktoken";
    config_ = dir_ / "k3_cli_test_config.json";
    std::ofstream m(model_);
    // 256 bytes (base64 of each byte, rank = byte), then "he" (256), "ll" (257), "hell" (258), "hello" (259).
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int b = 0; b < 256; ++b) m << t[b >> 2] << t[(b & 3) << 4] << "== " << b << "\n";
    m << "aGU= 256\nbGw= 257\naGVsbA== 258\naGVsbG8= 259\n";
    std::ofstream(config_) << R"({"added_tokens_decoder": {"260": {"content": "[BOS]", "special": true},
        "261": {"content": "<|open|>", "special": true}}, "bos_token": "[BOS]"})";
  }
  std::string vocab() const { return "--vocab " + model_ + " --config " + config_; }
  k3::test::TempDir dir_{"k3-cli-test"};
  std::string model_, config_;
};

}  // namespace

TEST_F(Cli, TokenizeAndDetokenize) {
  Result r = run("tokenize " + vocab() + " hello hello");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, "259 32 259\n");
  r = run("tokenize " + vocab() + " --special --json '<|open|>hello'");
  EXPECT_EQ(r.out, "{\"ids\":[261,259],\"pieces\":[\"<|open|>\",\"hello\"]}\n");
  r = run("tokenize " + vocab() + " --json '<|open|>'");
  EXPECT_EQ(r.out, "{\"ids\":[60,124,111,112,101,110,124,62],\"pieces\":[\"<\",\"|\",\"o\",\"p\",\"e\",\"n\",\"|\",\">\"]}\n");
  r = run("tokenize " + vocab() + " --json \"$(printf '\\344\\275\\240')\"");  // pieces that are not UTF-8 alone
  EXPECT_EQ(r.out, "{\"ids\":[228,189,160],\"pieces\":[[228],[189],[160]]}\n");
  r = run("tokenize " + vocab() + " --bos hi");
  EXPECT_EQ(r.out, "260 104 105\n");
  r = run("detokenize " + vocab() + " 261 259 32 259");
  EXPECT_EQ(r.out, "hello hello");
  r = run("detokenize " + vocab() + " --special '[261, 259]'");
  EXPECT_EQ(r.out, "<|open|>hello");
}

TEST_F(Cli, StdinAndFile) {
  std::string f = dir_ / "k3_cli_text.txt";
  std::ofstream(f) << "hello";
  Result r = run("tokenize " + vocab() + " -f " + f);
  EXPECT_EQ(r.out, "259\n");
  r = run("tokenize " + vocab() + " < " + f);
  EXPECT_EQ(r.out, "259\n");
  std::ofstream(f) << "259, 32\n259";
  r = run("detokenize " + vocab() + " -f " + f);
  EXPECT_EQ(r.out, "hello hello");
}

TEST_F(Cli, Errors) {
  Result r = run("tokenize hello");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "k3 tokenize: error: give exactly one of -m MODEL and --vocab FILE (see k3 tokenize --help)\n");
  r = run("detokenize " + vocab() + " 12 999");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "k3 detokenize: error: token id 999 is out of range [0, 262)\n");
  r = run("detokenize " + vocab() + " 12 abc");
  EXPECT_EQ(r.out, "k3 detokenize: error: arguments: 'abc ' at byte 3 is not a token id\n");
  r = run("tokenize --vocab /nonexistent.tiktoken x");
  EXPECT_EQ(r.out, "k3 tokenize: error: /nonexistent.tiktoken: cannot open file\n");
  r = run("tokenize " + vocab() + " --pre qwen2 x");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("unsupported pre-tokenizer 'qwen2'"), std::string::npos) << r.out;
  std::ofstream bad(dir_ / "k3_cli_bad.tiktoken");
  bad << "YQ== 0\nYg== 3\nYw== 1\n";
  bad.close();
  r = run("tokenize --vocab " + (dir_ / "k3_cli_bad.tiktoken") + " x");
  EXPECT_EQ(r.out, "k3 tokenize: error: " + (dir_ / "k3_cli_bad.tiktoken") + ": rank 2 is missing (ranks must be 0..3 without gaps; rank 3 is on line 2)\n");
}
