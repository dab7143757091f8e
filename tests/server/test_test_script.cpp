// --test-script (src/server/test_script.h): bad files are refused naming the file and the entry;
// entries come in order, then none; an object entry written after a request's generation prompt
// parses back (K3 output parser) to exactly its reasoning, content and tool calls, thinking on and
// off, with tool-choice and response-format notes in the request.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "chat/chat_template.h"
#include "chat/k3_parser.h"
#include "common/error.h"
#include "server/requests.h"
#include "server/test_script.h"

using namespace k3;
using namespace k3::server;

namespace {

std::string write_file(const std::string& text) {
  static int n = 0;
  const std::string path = "/tmp/k3_test_script_" + std::to_string(getpid()) + "_" + std::to_string(n++) + ".json";
  std::ofstream(path) << text;
  return path;
}

// The error loading `text` gives ("" if it loads).
std::string load_error(const std::string& text) {
  const std::string path = write_file(text);
  std::string msg;
  try {
    TestScript s(path);
  } catch (const Error& e) {
    msg = e.what();
  }
  std::remove(path.c_str());
  return msg;
}

const json kTools = json::parse(R"([{"type":"function","function":{"name":"exec_command","parameters":{"type":"object",
  "properties":{"cmd":{"type":"string"},"timeout":{"type":"integer"},"env":{"type":"object"}}}}},
  {"type":"function","function":{"name":"agents.spawn","parameters":{"type":"object","properties":{"task":{"type":"string"}}}}}])");

json chat_inputs(bool thinking, const char* tool_choice) {
  ChatRequest r;
  r.tools = kTools;
  r.tool_choice = tool_choice;
  json in = chat_template_inputs(json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Go."}])"), r);
  in["thinking"] = thinking;
  in["response_format"] = {{"type", "json_object"}};
  return in;
}

}  // namespace

TEST(TestScript, BadFilesNameTheFileAndTheEntry) {
  EXPECT_NE(load_error("[1").find("not valid JSON"), std::string::npos);
  EXPECT_NE(load_error(R"({"a":1})").find("must be a JSON array"), std::string::npos);
  EXPECT_NE(load_error(R"(["ok", 5])").find("entry [1] must be a string (raw K3 output) or an object"), std::string::npos);
  EXPECT_NE(load_error(R"([{"text":"x"}])").find("entry [0] has an unknown field 'text'"), std::string::npos);
  EXPECT_NE(load_error(R"([{"content":1}])").find("entry [0].content must be a string"), std::string::npos);
  EXPECT_NE(load_error(R"([{"tool_calls":{}}])").find("entry [0].tool_calls must be an array"), std::string::npos);
  EXPECT_NE(load_error(R"([{"tool_calls":[{"arguments":{}}]}])").find("entry [0].tool_calls[0] must be an object with a non-empty string 'name'"),
            std::string::npos);
  EXPECT_NE(load_error(R"([{"tool_calls":[{"name":"f","arguments":"{}"}]}])").find("entry [0].tool_calls[0].arguments must be an object"),
            std::string::npos);
  EXPECT_NE(load_error(R"([{"tool_calls":[{"name":"f","id":"x"}]}])").find("entry [0].tool_calls[0] has an unknown field 'id'"),
            std::string::npos);
  const std::string msg = load_error("[1]");
  EXPECT_NE(msg.find("--test-script /tmp/k3_test_script_"), std::string::npos) << msg;
  try {
    TestScript s("/nonexistent/script.json");
    FAIL() << "a missing file loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/script.json: cannot open"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load_error(R"(["raw", {}, {"reasoning":"r","content":"c","tool_calls":[{"name":"f"}]}])"), "");
}

TEST(TestScript, EntriesInOrderThenNone) {
  const std::string path = write_file(R"(["a", {"content":"b"}])");
  TestScript s(path);
  std::remove(path.c_str());
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(*s.next(), json("a"));
  EXPECT_EQ((*s.next())["content"], "b");
  EXPECT_FALSE(s.next().has_value());
  EXPECT_FALSE(s.next().has_value());
}

TEST(TestScript, ObjectEntriesParseBackToThemselves) {
  const jinja::Template& t = chat::builtin_kimi_k3_template();
  const json entry = json::parse(R"({"reasoning":"I will run it.","content":"Running \"ls\" now.","tool_calls":[
    {"name":"exec_command","arguments":{"cmd":"ls -la | head","timeout":30,"env":{"A":"b c"}}},
    {"name":"agents.spawn","arguments":{"task":"review <this> & that"}}]})");
  for (bool thinking : {true, false}) {
    for (const char* choice : {"auto", "required"}) {
      SCOPED_TRACE(std::string(thinking ? "thinking" : "no thinking") + ", tool_choice " + choice);
      const json in = chat_inputs(thinking, choice);
      const std::string out = script_output(entry, t, &in);
      chat::K3ParserOptions po;
      po.thinking = thinking;
      po.tools = kTools;
      po.tool_choice = choice;
      const chat::ChatMessage m = chat::parse_k3_output(out, po);
      EXPECT_EQ(m.error, "") << out;
      EXPECT_EQ(m.reasoning_content, thinking ? "I will run it." : "");
      EXPECT_EQ(m.content, "Running \"ls\" now.");
      ASSERT_EQ(m.tool_calls.size(), 2u) << out;
      EXPECT_EQ(m.tool_calls[0].name, "exec_command");
      EXPECT_EQ(json::parse(m.tool_calls[0].arguments), entry["tool_calls"][0]["arguments"]);
      EXPECT_EQ(m.tool_calls[1].name, "agents.spawn");
      EXPECT_EQ(json::parse(m.tool_calls[1].arguments), entry["tool_calls"][1]["arguments"]);
      EXPECT_EQ(out.substr(out.size() - 14), "<|end_of_msg|>");
    }
  }
  // No reasoning with thinking on: the think section is closed at once.
  const json in = chat_inputs(true, "auto");
  EXPECT_EQ(script_output(json::parse(R"({"content":"Hi."})"), t, &in),
            "<|close|>think<|sep|><|open|>response<|sep|>Hi.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>");
  // A string entry is the output as it is; on the text routes an object gives its content.
  EXPECT_EQ(script_output(json("raw<|end_of_msg|>"), t, &in), "raw<|end_of_msg|>");
  EXPECT_EQ(script_output(json::parse(R"({"reasoning":"r","content":"text only"})"), t, nullptr), "text only");
}
