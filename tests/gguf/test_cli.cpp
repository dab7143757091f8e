// k3 info / split / merge end to end on files from the independent builder.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "builder.h"
#include "corpus.h"
#include "util.h"

namespace {

using namespace gguf_test;
using nlohmann::json;

RunResult k3(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {bin_path("k3")};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

TEST(GgufCli, InfoText) {
  TempDir dir;
  save(dir / "m.gguf", base_doc().build());
  RunResult r = k3({"info", dir / "m.gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GGUF v3"), std::string::npos);
  EXPECT_NE(r.out.find("general.architecture"), std::string::npos);
  EXPECT_NE(r.out.find("\"kimi-k3\""), std::string::npos);
  EXPECT_NE(r.out.find("INT32[4] [0, 0, 0, 1]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("STRING[3] [\"a\", \"bc\", \"def\"]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[32, 2]"), std::string::npos);
  EXPECT_NE(r.out.find("q8_0"), std::string::npos);
  EXPECT_NE(r.out.find("tensors (3)"), std::string::npos);
}

TEST(GgufCli, InfoJsonMatchesTheFile) {
  TempDir dir;
  Doc d = base_doc();
  save(dir / "m.gguf", d.build());
  RunResult r = k3({"info", dir / "m.gguf", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["parts"].size(), 1u);
  EXPECT_EQ(j["parts"][0]["path"], dir / "m.gguf");
  EXPECT_EQ(j["parts"][0]["data_offset"], d.data_start);
  EXPECT_EQ(j["parts"][0]["alignment"], 32);
  ASSERT_EQ(j["metadata"].size(), 5u);
  EXPECT_EQ(j["metadata"][0]["key"], "general.architecture");
  EXPECT_EQ(j["metadata"][0]["type"], "STRING");
  EXPECT_EQ(j["metadata"][0]["value"], "kimi-k3");
  EXPECT_EQ(j["metadata"][2]["type"], "ARRAY");
  EXPECT_EQ(j["metadata"][2]["elem_type"], "INT32");
  EXPECT_EQ(j["metadata"][2]["count"], 4);
  EXPECT_EQ(j["metadata"][2]["first"], json({0, 0, 0, 1}));
  EXPECT_EQ(j["metadata"][4]["value"], 4);
  ASSERT_EQ(j["tensors"].size(), 3u);
  EXPECT_EQ(j["tensors"][1]["name"], "b");
  EXPECT_EQ(j["tensors"][1]["type"], "q8_0");
  EXPECT_EQ(j["tensors"][1]["shape"], json({32, 2}));
  EXPECT_EQ(j["tensors"][1]["bytes"], 68);
  EXPECT_EQ(j["tensors"][1]["offset"], d.tensor_start[1] - d.data_start);
  EXPECT_EQ(j["totals"]["by_type"]["f32"]["count"], 2);
  EXPECT_EQ(j["totals"]["by_type"]["f32"]["bytes"], 44);
  EXPECT_EQ(j["totals"]["by_type"]["q8_0"]["bytes"], 68);
  EXPECT_EQ(j["totals"]["tensors"], 3);
  EXPECT_EQ(j["totals"]["bytes"], 112);
}

TEST(GgufCli, SplitInfoMerge) {
  TempDir dir;
  std::vector<uint8_t> bytes = base_doc().build();
  save(dir / "m.gguf", bytes);
  RunResult s = k3({"split", dir / "m.gguf", dir / "p", "--split-max-tensors", "2"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out, dir / "p-00001-of-00002.gguf\n" + dir / "p-00002-of-00002.gguf\n");

  RunResult i = k3({"info", dir / "p-00001-of-00002.gguf", "--json"});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  json j = json::parse(i.out);
  ASSERT_EQ(j["parts"].size(), 2u);
  EXPECT_EQ(j["parts"][0]["n_tensors"], 2);
  EXPECT_EQ(j["parts"][1]["n_tensors"], 1);
  EXPECT_EQ(j["parts"][1]["n_kv"], 3);
  EXPECT_EQ(j["tensors"][2]["part"], 2);
  RunResult t = k3({"info", dir / "p-00001-of-00002.gguf"});
  EXPECT_NE(t.out.find("part 2/2 "), std::string::npos) << t.out;

  RunResult m = k3({"merge", dir / "p-00001-of-00002.gguf", dir / "merged.gguf"});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_EQ(load(dir / "merged.gguf"), bytes);

  ASSERT_EQ(k3({"split", dir / "m.gguf", dir / "q", "--split-max-size", "1K"}).exit_code, 0);
  RunResult one = k3({"info", dir / "q-00001-of-00001.gguf"});
  EXPECT_EQ(one.exit_code, 0) << one.err;
}

TEST(GgufCli, UsageAndBadArguments) {
  for (const char* cmd : {"info", "split", "merge"}) {
    RunResult h = k3({cmd, "--help"});
    EXPECT_EQ(h.exit_code, 0) << cmd;
    EXPECT_EQ(h.out.rfind(std::string("usage: k3 ") + cmd, 0), 0u) << h.out;
  }
  TempDir dir;
  save(dir / "m.gguf", base_doc().build());
  RunResult both = k3({"split", dir / "m.gguf", dir / "p", "--split-max-size", "1M", "--split-max-tensors", "2"});
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("exactly one of"), std::string::npos) << both.err;
  RunResult bad = k3({"split", dir / "m.gguf", dir / "p", "--split-max-size", "12X"});
  EXPECT_NE(bad.err.find("invalid value '12X'"), std::string::npos) << bad.err;
  RunResult missing = k3({"info", dir / "nope.gguf"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find(dir / "nope.gguf"), std::string::npos) << missing.err;
}

}  // namespace
