// The agent protocols apart from HTTP: one conversation sent as chat completions, Anthropic
// Messages and OpenAI Responses renders the same prompt; the protocols' events follow their
// grammars and add up to their non-streaming bodies; errors come in each protocol's shape.
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "server/chat_protocol.h"
#include "server/requests.h"

using namespace k3::server;

namespace {

RequestLimits limits() {
  RequestLimits l;
  l.max_tokens_cap = 1000;
  l.default_max_tokens = 500;
  l.n_vocab = 768;
  l.allow_canned = true;
  return l;
}

std::string prompt(const ChatRequest& r) { return k3::chat::render_chat(k3::chat::builtin_kimi_k3_template(), r.template_inputs); }

const char* kSchema = R"({"type":"object","properties":{"path":{"type":"string"},"edits":{"type":"array"},
  "opts":{"type":"object","properties":{"depth":{"type":"integer"}}}},"required":["path"]})";

// System, user, an assistant turn with reasoning, text and two calls (nested arguments), both
// results and a user follow-up, in each protocol.
json chat_body() {
  json schema = json::parse(kSchema);
  return json{
      {"model", "m"},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Fix it"}},
        {{"role", "assistant"},
         {"content", "On it."},
         {"reasoning_content", "Two edits."},
         {"tool_calls",
          {{{"id", "c1"}, {"type", "function"},
            {"function", {{"name", "edit"}, {"arguments", R"({"path":"a.c","edits":[{"old":"x","new":"y"}],"opts":{"depth":2.5}})"}}}},
           {{"id", "c2"}, {"type", "function"}, {"function", {{"name", "edit"}, {"arguments", R"({"path":"b.c"})"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "done"}},
        {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "no change"}},
        {{"role", "user"}, {"content", "Thanks"}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "edit"}, {"description", "Edit"}, {"parameters", schema}}}}}}};
}

json anthropic_body() {
  json schema = json::parse(kSchema);
  return json{
      {"model", "m"},
      {"max_tokens", 100},
      {"system", {{{"type", "text"}, {"text", "Be "}}, {{"type", "text"}, {"text", "brief."}}}},
      {"thinking", {{"type", "adaptive"}}},
      {"messages",
       {{{"role", "user"}, {"content", "Fix it"}},
        {{"role", "assistant"},
         {"content",
          {{{"type", "thinking"}, {"thinking", "Two edits."}, {"signature", ""}},
           {{"type", "text"}, {"text", "On it."}},
           {{"type", "tool_use"}, {"id", "c1"}, {"name", "edit"},
            {"input", json::parse(R"({"path":"a.c","edits":[{"old":"x","new":"y"}],"opts":{"depth":2.5}})")}},
           {{"type", "tool_use"}, {"id", "c2"}, {"name", "edit"}, {"input", {{"path", "b.c"}}}}}}},
        {{"role", "user"},
         {"content",
          {{{"type", "tool_result"}, {"tool_use_id", "c1"}, {"content", "done"}},
           {{"type", "tool_result"}, {"tool_use_id", "c2"}, {"content", {{{"type", "text"}, {"text", "no change"}}}}},
           {{"type", "text"}, {"text", "Thanks"}}}}}}},
      {"tools", {{{"name", "edit"}, {"description", "Edit"}, {"input_schema", schema}}}}};
}

json responses_body() {
  json schema = json::parse(kSchema);
  return json{
      {"model", "m"},
      {"instructions", "Be brief."},
      {"input",
       {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "Fix it"}}}}},
        {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", json::array()},
         {"content", {{{"type", "reasoning_text"}, {"text", "Two edits."}}}}},
        {{"type", "message"}, {"role", "assistant"}, {"id", "msg_1"}, {"status", "completed"},
         {"content", {{{"type", "output_text"}, {"text", "On it."}, {"annotations", json::array()}}}}},
        {{"type", "function_call"}, {"call_id", "c1"}, {"name", "edit"},
         {"arguments", R"({"path":"a.c","edits":[{"old":"x","new":"y"}],"opts":{"depth":2.5}})"}},
        {{"type", "function_call"}, {"call_id", "c2"}, {"name", "edit"}, {"arguments", R"({"path":"b.c"})"}},
        {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "done"}},
        {{"type", "function_call_output"}, {"call_id", "c2"}, {"output", {{{"type", "input_text"}, {"text", "no change"}}}}},
        {{"role", "user"}, {"content", "Thanks"}}}},
      {"tools", {{{"type", "function"}, {"name", "edit"}, {"description", "Edit"}, {"parameters", schema}}}}};
}

// The param of the ApiError that `fn` throws ("" if none).
template <class Fn>
std::string error_param(Fn fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e.param.empty() ? "<none>" : e.param;
  }
  return "";
}

std::vector<std::string> names(const SseEvents& ev) {
  std::vector<std::string> n;
  for (const auto& e : ev) n.push_back(e.name);
  return n;
}

k3::chat::ChatDelta text_delta(std::string reasoning, std::string content) {
  k3::chat::ChatDelta d;
  d.reasoning_content = std::move(reasoning);
  d.content = std::move(content);
  return d;
}
k3::chat::ChatDelta call_delta(size_t index, bool opens, std::string args) {
  k3::chat::ChatDelta d;
  d.tool_calls.push_back({index, opens, opens ? "edit" : "", std::move(args)});
  return d;
}

}  // namespace

TEST(Agents, SameConversationSamePromptInTheThreeProtocols) {
  const std::string chat = prompt(parse_chat_request(chat_body(), limits()));
  EXPECT_NE(chat.find(R"(<|open|>argument key="opts" type="object"<|sep|>{"depth": 2.5}<|close|>argument<|sep|>)"), std::string::npos);
  EXPECT_NE(chat.find(R"(<|open|>message role="tool" tool="edit" index="2"<|sep|>no change)"), std::string::npos);
  EXPECT_EQ(prompt(parse_anthropic_request(anthropic_body(), limits(), false)), chat);
  EXPECT_EQ(prompt(parse_anthropic_request(anthropic_body(), limits(), true)), chat);  // count_tokens
  EXPECT_EQ(prompt(parse_responses_request(responses_body(), limits())), chat);
}

TEST(Agents, ThinkingEffortAndToolChoiceMapLikeChat) {
  struct Case {
    const char* chat;       // patch of the chat body
    const char* anthropic;  // patch of the Anthropic body
    const char* responses;  // patch of the Responses body
  } cases[] = {
      {R"({"chat_template_kwargs":{"thinking":false}})", R"({"thinking":{"type":"disabled"}})", R"({"reasoning":{"effort":"none"}})"},
      {R"({"chat_template_kwargs":{"thinking":false}})", R"({"thinking":null})", R"({"reasoning":{"effort":"none"}})"},
      {R"({"reasoning_effort":"low"})", R"({"output_config":{"effort":"low"}})", R"({"reasoning":{"effort":"low"}})"},
      {R"({"reasoning_effort":"medium"})", R"({"thinking":{"type":"enabled","budget_tokens":1024},"max_tokens":2000,
                                               "output_config":{"effort":"medium"}})", R"({"reasoning":{"effort":"high"}})"},
      {R"({"tool_choice":"required"})", R"({"tool_choice":{"type":"any"}})", R"({"tool_choice":"required"})"},
      {R"({"tool_choice":{"type":"function","function":{"name":"edit"}}})", R"({"tool_choice":{"type":"tool","name":"edit"}})",
       R"({"tool_choice":{"type":"function","name":"edit"}})"},
      {R"({"tool_choice":"none"})", R"({"tool_choice":{"type":"none"}})", R"({"tool_choice":"none"})"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}})",
       R"({"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}}})",
       R"({"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}}})"},
  };
  for (const auto& c : cases) {
    json cb = chat_body(), ab = anthropic_body(), rb = responses_body();
    cb.merge_patch(json::parse(c.chat));
    ab.merge_patch(json::parse(c.anthropic));
    rb.merge_patch(json::parse(c.responses));
    const ChatRequest cr = parse_chat_request(cb, limits());
    const std::string want = prompt(cr);
    EXPECT_NE(want, prompt(parse_chat_request(chat_body(), limits()))) << c.chat;
    const ChatRequest ar = parse_anthropic_request(ab, limits(), false);
    EXPECT_EQ(prompt(ar), want) << c.anthropic;
    EXPECT_EQ(ar.tool_choice, cr.tool_choice) << c.anthropic;
    const ChatRequest rr = parse_responses_request(rb, limits());
    EXPECT_EQ(prompt(rr), want) << c.responses;
    EXPECT_EQ(rr.tool_choice, cr.tool_choice) << c.responses;
  }
}

TEST(Agents, GenerationFields) {
  json ab = anthropic_body();
  ab.merge_patch(json::parse(R"({"max_tokens":100000,"temperature":0.5,"top_k":7,"stop_sequences":["END","##"],"stream":true,
                                 "k3_canned":{"text":"x"}})"));
  const ChatRequest a = parse_anthropic_request(ab, limits(), false);
  EXPECT_EQ(a.gen.max_tokens, 1000);  // lowered to the cap
  EXPECT_FLOAT_EQ(a.gen.sampling.temp, 0.5f);
  EXPECT_EQ(a.gen.sampling.top_k, 7);
  EXPECT_EQ(a.gen.stop, (std::vector<std::string>{"END", "##"}));
  EXPECT_TRUE(a.gen.stream);
  EXPECT_TRUE(a.gen.canned.set);
  json rb = responses_body();
  rb["max_output_tokens"] = 64;
  const ChatRequest r = parse_responses_request(rb, limits());
  EXPECT_EQ(r.gen.max_tokens, 64);
  EXPECT_EQ(r.prompt_param, "input");
  rb.erase("max_output_tokens");
  EXPECT_EQ(parse_responses_request(rb, limits()).gen.max_tokens, 500);  // the server's default
}

TEST(Agents, BadFieldsAreNamed) {
  struct Case {
    bool anthropic;
    const char* patch;
    const char* param;
  } cases[] = {
      {true, R"({"max_tokens":null})", "max_tokens"},
      {true, R"({"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})", "messages[0].content[0]"},
      {true, R"({"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"zz"}]}]})",
       "messages[0].content[0].tool_use_id"},
      {true, R"({"tools":[{"name":"edit","input_schema":{"type":"object","properties":{"a":3}}}]})",
       "tools[0].input_schema.properties.a"},
      {true, R"({"tools":[{"name":"e&dit","input_schema":{"type":"object"}}]})", "tools[0].name"},
      {true, R"({"tool_choice":{"type":"auto","name":"edit"}})", "tool_choice.name"},
      {true, R"({"thinking":{"type":"enabled","budget_tokens":1024,"extra":1}})", "thinking.extra"},
      {true, R"({"temperature":1.01})", "temperature"},
      {false, R"({"input":[{"type":"function_call_output","call_id":"nope","output":"x"}]})", "input[0].call_id"},
      {false, R"({"input":[{"role":"user","content":[{"type":"input_audio"}]}]})", "input[0].content[0].type"},
      {false, R"({"tools":[{"type":"function","name":"edit","parameters":{"type":"array"}}]})", "tools[0].parameters.type"},
      {false, R"({"store":true})", "store"},
      {false, R"({"previous_response_id":"resp_1"})", "previous_response_id"},
      {false, R"({"truncation":"middle"})", "truncation"},
  };
  for (const auto& c : cases) {
    json b = c.anthropic ? anthropic_body() : responses_body();
    b.merge_patch(json::parse(c.patch));
    const std::string got = error_param([&] {
      if (c.anthropic) parse_anthropic_request(b, limits(), false);
      else parse_responses_request(b, limits());
    });
    EXPECT_EQ(got, c.param) << c.patch;
  }
  json msgs = anthropic_body()["messages"];
  msgs.erase(msgs.size() - 1);  // ends with the assistant turn: a prefill
  json b = anthropic_body();
  b["messages"] = msgs;
  EXPECT_EQ(error_param([&] { parse_anthropic_request(b, limits(), false); }), "messages[1]");
}

TEST(Agents, ToolSchemaCheckAlsoGuardsChat) {
  json b = chat_body();
  b["tools"][0]["function"]["parameters"] = json::parse(R"({"type":"object","required":"path"})");
  EXPECT_EQ(error_param([&] { parse_chat_request(b, limits()); }), "tools[0].function.parameters.required");
}

TEST(Agents, AnthropicEventsFollowTheGrammarAndAddUpToTheBody) {
  auto p = anthropic_protocol("m");
  SseEvents ev;
  p->begin(42, 0, ev);
  p->delta(text_delta("Think", ""), ev);
  p->delta(text_delta("ing.", "Hel"), ev);
  p->delta(text_delta("", "lo"), ev);
  p->delta(call_delta(0, true, R"({"path":)"), ev);
  p->delta(call_delta(0, false, R"("a.c"})"), ev);
  p->delta(call_delta(1, true, R"({"path":"b.c"})"), ev);
  k3::chat::ChatMessage m;
  ChatOutcome o;
  o.message = &m;
  o.n_prompt = 42;
  o.n_gen = 17;
  o.n_cached = 2;
  p->end(o, ev);
  const std::vector<std::string> want = {
      "message_start", "ping",
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",  // thinking
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",  // text
      "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",  // tool 0
      "content_block_start", "content_block_delta", "content_block_stop",                         // tool 1
      "message_delta", "message_stop"};
  EXPECT_EQ(names(ev), want);
  for (const auto& e : ev) EXPECT_EQ(json::parse(e.data)["type"], e.name);
  EXPECT_EQ(json::parse(ev[10].data)["content_block"]["name"], "edit");
  EXPECT_EQ(json::parse(ev[15].data)["index"], 3);
  const json delta = json::parse(ev[17].data);
  EXPECT_EQ(delta["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(delta["usage"]["input_tokens"], 40);
  EXPECT_EQ(delta["usage"]["cache_read_input_tokens"], 2);
  EXPECT_EQ(delta["usage"]["output_tokens"], 17);

  const json body = p->body(o);
  EXPECT_EQ(body["content"][0], json::parse(R"({"type":"thinking","thinking":"Thinking.","signature":""})"));
  EXPECT_EQ(body["content"][1], json::parse(R"({"type":"text","text":"Hello"})"));
  EXPECT_EQ(body["content"][2]["input"], json::parse(R"({"path":"a.c"})"));
  EXPECT_EQ(body["content"][2]["id"], json::parse(ev[10].data)["content_block"]["id"]);
  EXPECT_EQ(body["content"][3]["input"], json::parse(R"({"path":"b.c"})"));
  EXPECT_EQ(body["stop_reason"], "tool_use");
}

TEST(Agents, AnthropicStopReasonsAndCutArguments) {
  k3::chat::ChatMessage m;
  ChatOutcome o;
  o.message = &m;
  auto p = anthropic_protocol("m");
  SseEvents ev;
  p->delta(call_delta(0, true, R"({"path":"a.)"), ev);  // cut by the budget inside an argument
  o.stop = ChatOutcome::Stop::Length;
  json body = p->body(o);
  EXPECT_EQ(body["stop_reason"], "max_tokens");
  EXPECT_EQ(body["content"][0]["input"], json::object());
  o.stop = ChatOutcome::Stop::StopString;
  o.stop_string = "##";
  body = anthropic_protocol("m")->body(o);
  EXPECT_EQ(body["stop_reason"], "stop_sequence");
  EXPECT_EQ(body["stop_sequence"], "##");
  EXPECT_EQ(body["content"], json::array());
  SseEvents fail;
  anthropic_protocol("m")->fail(503, "shutting down", fail);
  ASSERT_EQ(fail.size(), 1u);
  EXPECT_EQ(fail[0].name, "error");
  EXPECT_EQ(json::parse(fail[0].data), json::parse(R"({"type":"error","error":{"type":"overloaded_error","message":"shutting down"}})"));
}

TEST(Agents, ResponsesEventsFollowTheGrammarAndAddUpToTheBody) {
  const json request = responses_body();
  const ChatRequest r = parse_responses_request(request, limits());
  auto p = responses_protocol(request, r, "m", [](std::string_view s) { return static_cast<int32_t>(s.size()); });
  SseEvents ev;
  p->begin(9, 0, ev);
  p->delta(text_delta("Hm.", "Hi"), ev);
  p->delta(text_delta("", "!"), ev);
  p->delta(call_delta(0, true, R"({"a":)"), ev);
  p->delta(call_delta(0, false, "1}"), ev);
  k3::chat::ChatMessage m;
  ChatOutcome o;
  o.message = &m;
  o.n_prompt = 9;
  o.n_gen = 20;
  p->end(o, ev);
  const std::vector<std::string> want = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(names(ev), want);
  for (size_t i = 0; i < ev.size(); ++i) {
    const json e = json::parse(ev[i].data);
    EXPECT_EQ(e["type"], ev[i].name);
    EXPECT_EQ(e["sequence_number"], i);
  }
  const json done = json::parse(ev.back().data)["response"];
  json body = p->body(o), last = done;
  body.erase("completed_at");
  last.erase("completed_at");
  EXPECT_EQ(body, last);
  EXPECT_EQ(done["status"], "completed");
  ASSERT_EQ(done["output"].size(), 3u);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hm.");
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Hi!");
  EXPECT_EQ(done["output"][2]["arguments"], R"({"a":1})");
  EXPECT_EQ(done["output"][2]["name"], "edit");
  for (int k = 0; k < 3; ++k) EXPECT_EQ(done["output"][k]["status"], "completed");
  EXPECT_EQ(json::parse(ev[16].data)["item_id"], done["output"][2]["id"]);
  EXPECT_EQ(done["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
  EXPECT_EQ(done["instructions"], "Be brief.");
  EXPECT_EQ(done["tools"], request["tools"]);
}

TEST(Agents, ResponsesCutByTheBudgetIsIncomplete) {
  const json request = json::parse(R"({"input":"Hi","max_output_tokens":5})");
  const ChatRequest r = parse_responses_request(request, limits());
  auto p = responses_protocol(request, r, "m", [](std::string_view) { return 0; });
  SseEvents ev;
  p->delta(text_delta("", "Hel"), ev);
  k3::chat::ChatMessage m;
  ChatOutcome o;
  o.message = &m;
  o.stop = ChatOutcome::Stop::Length;
  p->end(o, ev);
  EXPECT_EQ(ev.back().name, "response.incomplete");
  const json resp = json::parse(ev.back().data)["response"];
  EXPECT_EQ(resp["status"], "incomplete");
  EXPECT_EQ(resp["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(resp["output"][0]["status"], "incomplete");
  EXPECT_EQ(resp["max_output_tokens"], 5);
}

TEST(Agents, ErrorShapeFollowsTheRoute) {
  EXPECT_EQ(error_body_for("/v1/messages", 400, "bad"),
            json::parse(R"({"type":"error","error":{"type":"invalid_request_error","message":"bad"}})"));
  EXPECT_EQ(error_body_for("/v1/messages/count_tokens", 413, "big")["error"]["type"], "request_too_large");
  EXPECT_EQ(error_body_for("/v1/messages", 500, "oops")["error"]["type"], "api_error");
  EXPECT_EQ(error_body_for("/v1/messagesX", 400, "bad")["error"]["param"], nullptr);  // OpenAI's shape
  EXPECT_EQ(error_body_for("/v1/responses", 400, "bad", "input")["error"]["param"], "input");
}
