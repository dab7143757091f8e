// Kimi-K3 output parser: the nine cases of shared/data/kimi-k3-chat-cases.md, the rules of
// chat.md §5, malformed and truncated output, and streaming: every case is also fed byte by
// byte and cut in two at every byte position, and the deltas must add up to the final message.
#include <gtest/gtest.h>

#include <random>

#include "chat/k3_parser.h"

using k3::chat::ChatDelta;
using k3::chat::ChatMessage;
using k3::chat::K3ParserOptions;
using k3::chat::K3StreamParser;
using k3::chat::parse_k3_output;
using nlohmann::ordered_json;

namespace {

const ordered_json kSpecialFunction = ordered_json::parse(R"({"type":"function","function":{"name":"special_function",
  "parameters":{"type":"object","properties":{"arg1":{"type":"integer"}},"required":["arg1"]}}})");
const ordered_json kSpecialFunctionWithOpt = ordered_json::parse(R"({"type":"function","function":{"name":"special_function_with_opt",
  "parameters":{"type":"object","properties":{"arg1":{"type":"integer"},"arg2":{"type":"integer"}},"required":["arg1"]}}})");
const ordered_json kPython = ordered_json::parse(R"({"type":"function","function":{"name":"python",
  "parameters":{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}}})");

K3ParserOptions opts(bool reasoning, std::vector<ordered_json> tools = {}) {
  K3ParserOptions o;
  o.extract_reasoning = reasoning;
  o.tools = ordered_json::array();
  for (auto& t : tools) o.tools.push_back(t);
  return o;
}

struct Acc {
  ChatMessage m;
  bool saw_marker = false;
  void add(const ChatDelta& d) {
    m.reasoning_content += d.reasoning_content;
    m.content += d.content;
    for (const auto& t : d.tool_calls) {
      if (t.opens) {
        EXPECT_EQ(t.index, m.tool_calls.size());
        m.tool_calls.push_back({"", t.name, ""});
      }
      ASSERT_LT(t.index, m.tool_calls.size());
      m.tool_calls[t.index].arguments += t.arguments;
    }
    if (d.content.find('<') != std::string::npos || d.reasoning_content.find('<') != std::string::npos) saw_marker = true;
  }
};

void expect_same(const ChatMessage& a, const ChatMessage& b, const std::string& what) {
  EXPECT_EQ(a.reasoning_content, b.reasoning_content) << what;
  EXPECT_EQ(a.content, b.content) << what;
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size()) << what;
  for (size_t i = 0; i < a.tool_calls.size(); i++) {
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name) << what;
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments) << what;
  }
}

// Feeds `chunks`, checks that the deltas add up to message(), returns it.
ChatMessage stream(const std::vector<std::string>& chunks, const K3ParserOptions& o, bool* saw_marker = nullptr) {
  K3StreamParser p(o);
  Acc acc;
  for (const auto& c : chunks) acc.add(p.feed(c));
  acc.add(p.finish());
  ChatMessage m = p.message();
  acc.m.error = m.error;
  expect_same(acc.m, m, "deltas vs message");
  if (saw_marker) *saw_marker = acc.saw_marker;
  return m;
}

// Parses one-shot, byte by byte and cut at every position; all must agree. For outputs whose
// parsed fields hold no '<', no delta may hold one either (no marker or piece of one leaks).
ChatMessage parse_all_ways(const std::string& out, const K3ParserOptions& o) {
  ChatMessage one = parse_k3_output(out, o);
  bool clean = one.error.empty() && one.content.find('<') == std::string::npos &&
               one.reasoning_content.find('<') == std::string::npos;
  std::vector<std::string> bytes;
  for (char c : out) bytes.emplace_back(1, c);
  bool saw = false;
  expect_same(stream(bytes, o, &saw), one, "byte by byte");
  if (clean) {
    EXPECT_FALSE(saw) << "a delta carried marker text";
  }
  for (size_t k = 0; k <= out.size(); k++) {
    ChatMessage m = stream({out.substr(0, k), out.substr(k)}, o, &saw);
    expect_same(m, one, "cut at " + std::to_string(k));
    EXPECT_EQ(m.error, one.error) << "cut at " << k;
    if (clean) {
      EXPECT_FALSE(saw) << "cut at " << k;
    }
    if (::testing::Test::HasFailure()) break;
  }
  return one;
}

void expect_calls(const ChatMessage& m, std::vector<std::pair<std::string, std::string>> calls) {
  ASSERT_EQ(m.tool_calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); i++) {
    EXPECT_EQ(m.tool_calls[i].name, calls[i].first);
    EXPECT_EQ(m.tool_calls[i].arguments, calls[i].second);
    EXPECT_EQ(m.tool_calls[i].id, "");
  }
}

std::string call(const std::string& name, int index, const std::string& args) {
  return "<|open|>call tool=\"" + name + "\" index=\"" + std::to_string(index) + "\"<|sep|>" + args + "<|close|>call<|sep|>";
}
std::string arg(const std::string& key, const std::string& type, const std::string& value) {
  return "<|open|>argument key=\"" + key + "\" type=\"" + type + "\"<|sep|>" + value + "<|close|>argument<|sep|>";
}
std::string tools(const std::string& calls) { return "<|open|>tools<|sep|>" + calls + "<|close|>tools<|sep|>"; }
const std::string kEmptyResp = "<|open|>response<|sep|><|close|>response<|sep|>";
const std::string kMsgEnd = "<|close|>message<|sep|>";

}  // namespace

// ---- shared/data/kimi-k3-chat-cases.md ----

TEST(K3ParserCases, 1_ContentOnly) {
  auto m = parse_all_ways("<|open|>response<|sep|>Hello, world!\nWhat's up?<|close|>response<|sep|><|close|>message<|sep|>", opts(false));
  EXPECT_EQ(m.content, "Hello, world!\nWhat's up?");
  EXPECT_EQ(m.reasoning_content, "");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.error, "");
}

TEST(K3ParserCases, 2_ReasoningWithoutOpeningTag) {
  auto m = parse_all_ways("I'm thinking about this<|close|>think<|sep|><|open|>response<|sep|>Hello, world!\nWhat's up?<|close|>response<|sep|><|close|>message<|sep|>", opts(true));
  EXPECT_EQ(m.reasoning_content, "I'm thinking about this");
  EXPECT_EQ(m.content, "Hello, world!\nWhat's up?");
  EXPECT_EQ(m.error, "");
}

TEST(K3ParserCases, 3_TagNamesInProse) {
  auto m = parse_all_ways("<|open|>response<|sep|>Use the response tag, then message the handler.<|close|>response<|sep|><|close|>message<|sep|>", opts(false));
  EXPECT_EQ(m.content, "Use the response tag, then message the handler.");
}

TEST(K3ParserCases, 4_TruncatedInsideReasoning) {
  auto m = parse_all_ways("I was still thinking when the budget ran out", opts(true));
  EXPECT_EQ(m.reasoning_content, "I was still thinking when the budget ran out");
  EXPECT_EQ(m.content, "");
}

TEST(K3ParserCases, 5_OneToolCall) {
  auto m = parse_all_ways(kEmptyResp + tools(call("special_function", 1, arg("arg1", "number", "1"))) + kMsgEnd, opts(false, {kSpecialFunction}));
  EXPECT_EQ(m.content, "");
  expect_calls(m, {{"special_function", "{\"arg1\":1}"}});
  EXPECT_EQ(m.error, "");
}

TEST(K3ParserCases, 6_ReasoningContentAndCall) {
  auto m = parse_all_ways("I should call it<|close|>think<|sep|><|open|>response<|sep|>On it.<|close|>response<|sep|>" +
                              tools(call("special_function", 1, arg("arg1", "number", "1"))) + kMsgEnd,
                          opts(true, {kSpecialFunction}));
  EXPECT_EQ(m.reasoning_content, "I should call it");
  EXPECT_EQ(m.content, "On it.");
  expect_calls(m, {{"special_function", "{\"arg1\":1}"}});
}

TEST(K3ParserCases, 7_TypedArgumentsStayNumbers) {
  auto m = parse_all_ways(kEmptyResp + tools(call("special_function_with_opt", 1, arg("arg1", "number", "1") + arg("arg2", "number", "2"))) + kMsgEnd,
                          opts(false, {kSpecialFunctionWithOpt}));
  expect_calls(m, {{"special_function_with_opt", "{\"arg1\":1,\"arg2\":2}"}});
}

TEST(K3ParserCases, 8_ParallelCalls) {
  auto m = parse_all_ways(kEmptyResp +
                              tools(call("special_function", 1, arg("arg1", "number", "1")) +
                                    call("special_function_with_opt", 2, arg("arg1", "number", "1") + arg("arg2", "number", "2"))) +
                              kMsgEnd,
                          opts(false, {kSpecialFunction, kSpecialFunctionWithOpt}));
  expect_calls(m, {{"special_function", "{\"arg1\":1}"}, {"special_function_with_opt", "{\"arg1\":1,\"arg2\":2}"}});
}

TEST(K3ParserCases, 9_StringArgumentLiteral) {
  auto m = parse_all_ways(kEmptyResp + tools(call("python", 1, arg("code", "string", "print('hey')"))) + kMsgEnd, opts(false, {kPython}));
  expect_calls(m, {{"python", "{\"code\":\"print('hey')\"}"}});
}

// ---- chat.md §5 rules ----

TEST(K3Parser, ReasoningFormatNoneConcatenatesThinkAndResponse) {
  auto m = parse_all_ways("think <b><|close|>think<|sep|><|open|>response<|sep|>answer<|close|>response<|sep|>" + kMsgEnd, opts(false));
  EXPECT_EQ(m.reasoning_content, "");
  EXPECT_EQ(m.content, "think <b>answer");
}

TEST(K3Parser, ReasoningEndsAtResponseWithoutThinkEnd) {
  auto m = parse_all_ways("pondering<|open|>response<|sep|>done<|close|>response<|sep|>", opts(true));
  EXPECT_EQ(m.reasoning_content, "pondering");
  EXPECT_EQ(m.content, "done");
}

TEST(K3Parser, WhitespaceOnlyReasoningBecomesEmpty) {
  auto m = parse_all_ways(" \n\t\r\n<|close|>think<|sep|><|open|>response<|sep|>x<|close|>response<|sep|>", opts(true));
  EXPECT_EQ(m.reasoning_content, "");
  EXPECT_EQ(m.content, "x");
  // Leading whitespace of a real reasoning is kept (no trimming).
  m = parse_all_ways("\n  idea \n<|close|>think<|sep|><|open|>response<|sep|>  x \n<|close|>response<|sep|>", opts(true));
  EXPECT_EQ(m.reasoning_content, "\n  idea \n");
  EXPECT_EQ(m.content, "  x \n");
}

TEST(K3Parser, ThinkingOffPrompt) {
  K3ParserOptions o = opts(true);
  o.thinking = false;
  auto m = parse_all_ways("Plain answer.<|close|>response<|sep|><|close|>message<|sep|>", o);
  EXPECT_EQ(m.reasoning_content, "");
  EXPECT_EQ(m.content, "Plain answer.");
}

TEST(K3Parser, ContentEndsAtToolsWithoutResponseEnd) {
  auto m = parse_all_ways("<|open|>response<|sep|>Calling" + tools(call("python", 1, arg("code", "string", "x"))), opts(false, {kPython}));
  EXPECT_EQ(m.content, "Calling");
  expect_calls(m, {{"python", "{\"code\":\"x\"}"}});
  EXPECT_EQ(m.error, "");
}

TEST(K3Parser, ThinkBodyEndsAtToolsAndMessageEnd) {
  // k3: a model that skips the response section still gets its calls parsed.
  auto m = parse_all_ways("reason" + tools(call("python", 1, arg("code", "string", "1"))) + kMsgEnd, opts(true, {kPython}));
  EXPECT_EQ(m.reasoning_content, "reason");
  expect_calls(m, {{"python", "{\"code\":\"1\"}"}});
  m = parse_all_ways("only thoughts" + kMsgEnd + "<|end_of_msg|>", opts(true));
  EXPECT_EQ(m.reasoning_content, "only thoughts");
  EXPECT_EQ(m.error, "");
}

TEST(K3Parser, ArgumentValueRules) {
  ordered_json fn = ordered_json::parse(R"({"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{
    "s":{"type":"string"},"n":{"type":"number"},"o":{"type":"object"},"b":{"type":"boolean"},"u":{"description":"no type"},
    "multi":{"type":["string","null"]},"a":{"type":"array"}}}}})");
  auto run = [&](const std::string& args) {
    return parse_all_ways(kEmptyResp + tools(call("f", 1, args)), opts(false, {fn})).tool_calls.at(0).arguments;
  };
  EXPECT_EQ(run(arg("s", "string", "a \"q\" \\ \n\t\x01 é")), "{\"s\":\"a \\\"q\\\" \\\\ \\n\\t\\u0001 é\"}");
  EXPECT_EQ(run(arg("o", "object", "{\"z\": 1}")), "{\"o\":{\"z\": 1}}");
  EXPECT_EQ(run(arg("n", "number", "1.50")), "{\"n\":1.50}");
  EXPECT_EQ(run(arg("b", "boolean", "True")), "{\"b\":true}");
  EXPECT_EQ(run(arg("o", "object", "{'k': 'it''s', \"x\": 'say \"hi\"', 'n': None, 'f': False}")),
            "{\"o\":{\"k\": \"it\"\"s\", \"x\": \"say \\\"hi\\\"\", \"n\": null, \"f\": false}}");
  EXPECT_EQ(run(arg("o", "object", "{\"True\": 'True', \"esc\": \"a\\\"b\"}")), "{\"o\":{\"True\": \"True\", \"esc\": \"a\\\"b\"}}");
  EXPECT_EQ(run(arg("b", "boolean", "Tr")), "{\"b\":tr}");        // a prefix is rewritten too
  EXPECT_EQ(run(arg("n", "number", "Temperature")), "{\"n\":Temperature}");
  EXPECT_EQ(run(arg("n", "number", "")), "{\"n\":}");             // empty value
  EXPECT_EQ(run(arg("n", "number", "not json")), "{\"n\":not json}");
  EXPECT_EQ(run(arg("u", "string", "7")), "{\"u\":\"7\"}");        // missing type: string
  EXPECT_EQ(run(arg("multi", "null", "null")), "{\"multi\":\"null\"}");  // non-string type: string
  EXPECT_EQ(run(arg("a", "array", "[1, 'x']")), "{\"a\":[1, \"x\"]}");
  // Any order, repeats, omissions; the type attribute is ignored.
  EXPECT_EQ(run(arg("n", "string", "2") + arg("s", "number", "x") + arg("n", "number", "3")), "{\"n\":2,\"s\":\"x\",\"n\":3}");
  EXPECT_EQ(run(""), "{}");
}

TEST(K3Parser, JsonModeContent) {
  std::string json = "{\"a\": [1, 2.5, {\"b\": \"x < y > z\"}], \"c\": \"<|\", \"d\": \"</think> {{ }}\", \"e\": null}";
  auto m = parse_all_ways("<|open|>response<|sep|>" + json + "<|close|>response<|sep|>" + kMsgEnd, opts(true));
  EXPECT_EQ(m.content, json);
  EXPECT_EQ(m.error, "");
  EXPECT_TRUE(ordered_json::accept(m.content));
}

TEST(K3Parser, Utf8AtEveryCut) {
  std::string text = "héllo 世界 🎉 ∑";
  auto m = parse_all_ways("思考 🤔<|close|>think<|sep|><|open|>response<|sep|>" + text + "<|close|>response<|sep|>", opts(true));
  EXPECT_EQ(m.reasoning_content, "思考 🤔");
  EXPECT_EQ(m.content, text);
  // Invalid bytes become U+FFFD, also when a marker interrupts a sequence.
  m = parse_all_ways("<|open|>response<|sep|>a\xff" "b\xe4\xb8<|close|>response<|sep|>", opts(true));
  EXPECT_EQ(m.content, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  EXPECT_NO_THROW((void)ordered_json(m.content).dump());
}

// ---- malformed output: never dropped, reported in error ----

TEST(K3ParserMalformed, UndeclaredToolBecomesContent) {
  std::string section = tools(call("rm_rf", 1, arg("path", "string", "/")));
  auto m = parse_all_ways(kEmptyResp + section + kMsgEnd, opts(false, {kPython}));
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, section + kMsgEnd);
  EXPECT_NE(m.error, "");
}

TEST(K3ParserMalformed, LaterBadCallKeepsEarlierCalls) {
  std::string bad = call("nope", 2, "");
  auto m = parse_all_ways(kEmptyResp + tools(call("python", 1, arg("code", "string", "1")) + bad), opts(false, {kPython}));
  expect_calls(m, {{"python", "{\"code\":\"1\"}"}});
  EXPECT_EQ(m.content, bad + "<|close|>tools<|sep|>");
  EXPECT_NE(m.error, "");
}

TEST(K3ParserMalformed, UnknownArgumentKey) {
  std::string bad = arg("cmd", "string", "ls");
  auto m = parse_all_ways(kEmptyResp + tools(call("python", 1, arg("code", "string", "1") + bad)), opts(false, {kPython}));
  expect_calls(m, {{"python", "{\"code\":\"1\""}});
  EXPECT_EQ(m.content, bad + "<|close|>call<|sep|><|close|>tools<|sep|>");
  EXPECT_NE(m.error, "");
}

TEST(K3ParserMalformed, JsonArgumentFormIsNotRecognized) {
  std::string body = "<|open|>json type=\"object\"<|sep|>{\"code\": \"1\"}<|close|>json<|sep|>";
  auto m = parse_all_ways(kEmptyResp + tools(call("python", 1, body)), opts(false, {kPython}));
  expect_calls(m, {{"python", "{"}});
  EXPECT_EQ(m.content, body + "<|close|>call<|sep|><|close|>tools<|sep|>");
  EXPECT_NE(m.error, "");
}

TEST(K3ParserMalformed, ToolsWhenNoneAllowed) {
  std::string section = tools(call("python", 1, arg("code", "string", "1")));
  for (int variant = 0; variant < 2; variant++) {
    K3ParserOptions o = variant == 0 ? opts(false) : opts(false, {kPython});
    if (variant == 1) o.tool_choice = "none";
    auto m = parse_all_ways("<|open|>response<|sep|>hi<|close|>response<|sep|>" + section, o);
    EXPECT_TRUE(m.tool_calls.empty());
    EXPECT_EQ(m.content, "hi" + section);
    EXPECT_NE(m.error, "");
  }
}

TEST(K3ParserMalformed, RequiredWithoutCall) {
  K3ParserOptions o = opts(false, {kPython});
  o.tool_choice = "required";
  auto m = parse_all_ways("<|open|>response<|sep|>no call<|close|>response<|sep|>" + kMsgEnd, o);
  EXPECT_EQ(m.content, "no call");
  EXPECT_NE(m.error, "");
}

TEST(K3ParserMalformed, TextAfterTheMessage) {
  auto m = parse_all_ways("<|open|>response<|sep|>a<|close|>response<|sep|>" + kMsgEnd + "trailing", opts(false));
  EXPECT_EQ(m.content, "atrailing");
  EXPECT_NE(m.error, "");
}

TEST(K3ParserMalformed, RandomGarbageNeverCrashes) {
  const std::vector<std::string> pieces = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "think", "response", "tools",
                                           "call tool=\"", "argument key=\"", "python", "code", "\"", "message", " ", "x",
                                           "<", "<|", "\xe4\xb8", "\x96", "'", "True", "\\", "{", "}", "index=\"1\""};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 1500; iter++) {
    std::string out;
    int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; i++) out += pieces[rng() % pieces.size()];
    K3ParserOptions o = opts(rng() % 2, {kPython, kSpecialFunction});
    o.thinking = rng() % 3 != 0;
    ChatMessage one = parse_k3_output(out, o);
    std::vector<std::string> chunks;
    for (size_t i = 0; i < out.size();) {
      size_t len = 1 + rng() % 7;
      chunks.push_back(out.substr(i, len));
      i += len;
    }
    ChatMessage m = stream(chunks, o);
    expect_same(m, one, "random chunking of: " + out);
    EXPECT_NO_THROW((void)one.to_openai().dump());
    if (::testing::Test::HasFailure()) break;
  }
}

// ---- truncation ----

TEST(K3ParserTruncated, InsideArgumentValue) {
  auto m = parse_all_ways(kEmptyResp + "<|open|>tools<|sep|>" + "<|open|>call tool=\"python\" index=\"1\"<|sep|>" +
                              "<|open|>argument key=\"code\" type=\"string\"<|sep|>pri",
                          opts(false, {kPython}));
  expect_calls(m, {{"python", "{\"code\":\"pri"}});
  EXPECT_EQ(m.error, "");
}

TEST(K3ParserTruncated, CutMarkerDroppedLiteralTextKept) {
  auto m = parse_all_ways("<|open|>response<|sep|>answer<|close|>resp", opts(false));
  EXPECT_EQ(m.content, "answer");
  m = parse_all_ways("<|open|>response<|sep|>a < b and <|", opts(false));
  EXPECT_EQ(m.content, "a < b and <|");  // special tokens are atomic: this is text
  m = parse_all_ways("<|open|>response<|sep|>x<|close|>response<|sep|><|close|>mess", opts(false));
  EXPECT_EQ(m.content, "x");
  EXPECT_EQ(m.error, "");
  m = parse_all_ways(kEmptyResp + "<|open|>tools<|sep|><|open|>call tool=\"pyt", opts(false, {kPython}));
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "");
  m = parse_all_ways(kEmptyResp + "<|open|>tools<|sep|><|open|>call tool=\"python\" ind", opts(false, {kPython}));
  expect_calls(m, {{"python", ""}});
}

TEST(K3ParserOpenAI, MessageAndDeltaJson) {
  auto m = parse_k3_output("r<|close|>think<|sep|>" + kEmptyResp + tools(call("python", 1, arg("code", "string", "1"))), opts(true, {kPython}));
  auto j = m.to_openai();
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_TRUE(j["content"].is_null());
  EXPECT_EQ(j["reasoning_content"], "r");
  EXPECT_EQ(j["tool_calls"][0]["function"]["name"], "python");
  EXPECT_EQ(j["tool_calls"][0]["function"]["arguments"], "{\"code\":\"1\"}");
  K3StreamParser p(opts(false, {kPython}));
  auto d = p.feed(kEmptyResp + "<|open|>tools<|sep|><|open|>call tool=\"python\" index=\"1\"<|sep|>");
  auto dj = d.to_openai();
  EXPECT_EQ(dj["tool_calls"][0]["index"], 0);
  EXPECT_EQ(dj["tool_calls"][0]["type"], "function");
  EXPECT_EQ(dj["tool_calls"][0]["function"]["name"], "python");
  EXPECT_EQ(dj["tool_calls"][0]["function"]["arguments"], "{");
}
