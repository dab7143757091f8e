// `k3 template`: renders the built-in template or a file with a JSON conversation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "chat/chat_template.h"
#include "test_util.h"

namespace {

std::string bin() {
  // tests/CMakeLists.txt passes K3_BIN_DIR, but only the first of its ENVIRONMENT entries
  // survives gtest_discover_tests; fall back to the build directory.
  const char* b = std::getenv("K3_BIN_DIR");
  return std::string(b ? b : K3_TEST_BIN_DIR) + "/k3";
}

// Runs `cmd` with `input` on stdin; returns stdout and sets `rc`.
std::string run(const std::string& cmd, const std::string& input, int& rc) {
  // One file per process: ctest runs the tests of this binary as parallel processes.
  const std::string in_path = ::testing::TempDir() + "k3_cli_in." + std::to_string(getpid()) + ".json";
  std::ofstream(in_path, std::ios::binary) << input;
  FILE* p = popen((cmd + " < " + in_path + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  rc = pclose(p);
  return out;
}

bool have_binary() { return std::ifstream(bin()).good(); }

}  // namespace

TEST(TemplateCli, Help) {
  ASSERT_TRUE(have_binary()) << "no " << bin();
  int rc;
  std::string out = run(bin() + " template --help", "", rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("usage: k3 template"), std::string::npos);
}

TEST(TemplateCli, BuiltinFromStdin) {
  ASSERT_TRUE(have_binary()) << "no " << bin();
  std::string input = R"({"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true,"thinking":false})";
  int rc;
  std::string out = run(bin() + " template", input, rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, k3::chat::builtin_kimi_k3_template().render(nlohmann::ordered_json::parse(input)));
  EXPECT_EQ(out, "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
  // A bare message list, --var and --normalize.
  out = run(bin() + " template --var thinking=false --normalize -",
            R"([{"role":"developer","content":"D"},{"role":"user","content":"U"}])", rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out.rfind("<|open|>message role=\"system\"<|sep|>D", 0), 0u) << out;
}

TEST(TemplateCli, TemplateFileAndErrors) {
  ASSERT_TRUE(have_binary()) << "no " << bin();
  int rc;
  std::string t = k3test::source_dir() + "/tests/chat/templates/gemma-it.jinja";
  std::string vars = R"({"messages":[{"role":"user","content":"Hi"}],"bos_token":"<bos>","add_generation_prompt":true})";
  std::string out = run(bin() + " template -t " + t, vars, rc);
  EXPECT_EQ(rc, 0);
  std::string src;
  ASSERT_TRUE(k3test::read_file(t, src));
  EXPECT_EQ(out, k3::jinja::Template(src, "gemma-it.jinja").render(nlohmann::ordered_json::parse(vars)));
  EXPECT_NE(out.find("<start_of_turn>user\nHi<end_of_turn>"), std::string::npos);
  out = run(bin() + " template -t " + t, R"({"messages":[{"role":"system","content":"S"}]})", rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("gemma-it.jinja:3:"), std::string::npos) << out;
  EXPECT_NE(out.find("System role not supported"), std::string::npos) << out;
  out = run(bin() + " template", "{not json", rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("not valid JSON"), std::string::npos) << out;
}
