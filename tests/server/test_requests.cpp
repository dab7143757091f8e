// Request validation: every bad field is a 400 that names it; good requests become the right
// template inputs and generation settings.
#include <gtest/gtest.h>

#include "server/requests.h"

using namespace k3::server;

namespace {

RequestLimits limits() {
  RequestLimits l;
  l.max_tokens_cap = 1000;
  l.default_max_tokens = 500;
  l.n_vocab = 768;
  return l;
}

json base() { return json::parse(R"({"model":"m","messages":[{"role":"user","content":"Hi"}]})"); }

// The param of the ApiError that parsing `body` throws ("" if none is thrown).
std::string error_param(const json& body, int* status = nullptr) {
  try {
    parse_chat_request(body, limits());
  } catch (const ApiError& e) {
    if (status) *status = e.status;
    return e.param.empty() ? "<none>" : e.param;
  }
  return "";
}

json with(const char* patch) {
  json b = base();
  b.merge_patch(json::parse(patch));
  return b;
}

}  // namespace

TEST(Requests, BadFieldsAreNamed) {
  struct Case {
    const char* patch;
    const char* param;
  } cases[] = {
      {R"({"foo":1})", "foo"},
      {R"({"messages":"x"})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[1]})", "messages[0]"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0].type"},
      {R"({"messages":[{"role":"user","content":"x","bogus":1}]})", "messages[0].bogus"},
      {R"({"messages":[{"role":"assistant","content":"x","tool_calls":[{"function":{"name":3}}]}]})",
       "messages[0].tool_calls[0].function.name"},
      {R"({"max_tokens":"5"})", "max_tokens"},
      {R"({"max_tokens":0})", "max_tokens"},
      {R"({"max_tokens":1001})", "max_tokens"},
      {R"({"max_completion_tokens":2.5})", "max_completion_tokens"},
      {R"({"temperature":"hot"})", "temperature"},
      {R"({"temperature":3})", "temperature"},
      {R"({"top_p":-1})", "top_p"},
      {R"({"seed":"x"})", "seed"},
      {R"({"stream":"yes"})", "stream"},
      {R"({"stream_options":{"include_usage":1}})", "stream_options.include_usage"},
      {R"({"stream_options":{"x":true}})", "stream_options.x"},
      {R"({"stop":5})", "stop"},
      {R"({"stop":["a",5]})", "stop[1]"},
      {R"({"stop":[""]})", "stop"},
      {R"({"n":2})", "n"},
      {R"({"logprobs":true})", "logprobs"},
      {R"({"tools":{}})", "tools"},
      {R"({"tools":[{"type":"function"}]})", "tools[0].function"},
      {R"({"tools":[{"type":"function","function":{"name":"f","parameters":"x"}}]})", "tools[0].function.parameters"},
      {R"({"tool_choice":"sometimes"})", "tool_choice"},
      {R"({"tool_choice":"required"})", "tool_choice"},
      {R"({"tool_choice":{"type":"function","function":{"name":"g"}}})", "tool_choice.function.name"},
      {R"({"response_format":{"type":"yaml"}})", "response_format.type"},
      {R"({"reasoning_effort":"extreme"})", "reasoning_effort"},
      {R"({"chat_template_kwargs":{"messages":[]}})", "chat_template_kwargs.messages"},
      {R"({"k3_canned":{"text":"x"}})", "k3_canned"},
      {R"({"logit_bias":{"5":1}})", "logit_bias"},
  };
  for (const auto& c : cases) {
    int status = 0;
    EXPECT_EQ(error_param(with(c.patch), &status), c.param) << c.patch;
    EXPECT_EQ(status, 400) << c.patch;
  }
  std::vector<std::string> many(17, "x");
  json b = base();
  b["stop"] = many;
  EXPECT_EQ(error_param(b), "stop");
}

TEST(Requests, GoodChatRequest) {
  json b = json::parse(R"({
    "model": "k3", "stream": true, "stream_options": {"include_usage": true},
    "messages": [{"role": "developer", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                 {"role": "assistant", "content": null,
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "seed": 9, "stop": "END",
    "response_format": {"type": "json_object"}, "reasoning_effort": "low",
    "presence_penalty": 0, "user": "u", "parallel_tool_calls": false
  })");
  const ChatRequest r = parse_chat_request(b, limits());
  EXPECT_EQ(r.model, "k3");
  EXPECT_TRUE(r.gen.stream);
  EXPECT_TRUE(r.gen.include_usage);
  EXPECT_EQ(r.gen.max_tokens, 7);
  EXPECT_EQ(r.gen.sampling.temp, 0.0f);
  EXPECT_EQ(r.gen.sampling.top_p, 0.5f);
  EXPECT_EQ(r.gen.sampling.seed, 9u);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.tool_choice, "required");
  const json& in = r.template_inputs;
  EXPECT_EQ(in["messages"][0]["role"], "system");  // developer -> system
  EXPECT_TRUE(in["messages"][2]["tool_calls"][0]["function"]["arguments"].is_object());
  EXPECT_EQ(in["tool_choice"], "required");
  EXPECT_EQ(in["response_format"]["type"], "json_object");
  EXPECT_EQ(in["thinking_effort"], "low");
  EXPECT_EQ(in["add_generation_prompt"], true);
  EXPECT_EQ(in["tools"].size(), 1u);
}

TEST(Requests, DefaultsAndCanned) {
  RequestLimits l = limits();
  ChatRequest r = parse_chat_request(base(), l);
  EXPECT_EQ(r.gen.max_tokens, 500);
  EXPECT_FALSE(r.gen.stream);
  EXPECT_FALSE(r.gen.canned.set);
  l.allow_canned = true;
  json b = base();
  b["k3_canned"] = {{"ids", {1, 2, 3}}};
  r = parse_chat_request(b, l);
  EXPECT_TRUE(r.gen.canned.set);
  EXPECT_EQ(r.gen.canned.ids, (std::vector<int32_t>{1, 2, 3}));
  b["k3_canned"] = {{"ids", {1, 9999}}};
  EXPECT_THROW(parse_chat_request(b, l), ApiError);
}

TEST(Requests, Completions) {
  RequestLimits l = limits();
  CompletionRequest r = parse_completions_request(json::parse(R"({"model":"m","prompt":"abc"})"), l);
  EXPECT_EQ(r.prompt, "abc");
  EXPECT_EQ(r.gen.max_tokens, 16);  // OpenAI's default for completions
  r = parse_completions_request(json::parse(R"({"model":"m","prompt":[[5,6,7]],"max_tokens":3})"), l);
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_THROW(parse_completions_request(json::parse(R"({"prompt":["a","b"]})"), l), ApiError);
  EXPECT_THROW(parse_completions_request(json::parse(R"({"prompt":"a","echo":true})"), l), ApiError);
  EXPECT_THROW(parse_completions_request(json::parse(R"({"prompt":""})"), l), ApiError);

  r = parse_llama_completion(json::parse(R"({"prompt":[1,2],"n_predict":-1,"return_tokens":true})"), l);
  EXPECT_EQ(r.gen.max_tokens, 500);
  EXPECT_TRUE(r.return_tokens);
  EXPECT_THROW(parse_llama_completion(json::parse(R"({"prompt":[1,-2]})"), l), ApiError);
  EXPECT_THROW(parse_llama_completion(json::parse(R"({"prompt":[1,2],"n_predict":0})"), l), ApiError);
  EXPECT_THROW(parse_llama_completion(json::parse(R"({"prompt":"x","model":"m"})"), l), ApiError);
}

TEST(Requests, BodyParsing) {
  EXPECT_THROW(parse_body("", 64), ApiError);
  EXPECT_THROW(parse_body("{", 64), ApiError);
  EXPECT_THROW(parse_body("[1]", 64), ApiError);
  EXPECT_THROW(parse_body("{\"a\":\"\xff\"}", 64), ApiError);
  EXPECT_THROW(parse_body(std::string(100000, '['), 64), ApiError);
  // Brackets inside strings do not count as nesting.
  EXPECT_NO_THROW(parse_body("{\"a\":\"" + std::string(1000, '[') + "\"}", 64));
  std::string deep = "{\"a\":" + std::string(63, '[') + std::string(63, ']') + "}";
  EXPECT_NO_THROW(parse_body(deep, 64));
  deep = "{\"a\":" + std::string(64, '[') + std::string(64, ']') + "}";
  EXPECT_THROW(parse_body(deep, 64), ApiError);
}
