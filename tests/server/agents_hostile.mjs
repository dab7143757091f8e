// Hostile requests against the agent routes of `k3 serve`: /v1/messages (+ count_tokens) and
// /v1/responses (+ input_tokens). Missing required fields, wrong block and item types, tool results
// that answer no call, invalid tool schemas, stored-state fields, oversized and broken bodies,
// fields of the wrong type, bad keys: each must get its 4xx in the protocol's own error shape
// (Anthropic's {"type":"error","error":{"type","message"}} on /v1/messages, OpenAI's
// {"error":{"message","type","param"}} on /v1/responses) naming the field, and the server must
// keep serving.
//
//   node tests/server/agents_hostile.mjs [--k3 build/bin/k3]
import fs from "node:fs";
import * as L from "./lib.mjs";

const { assert, eq } = L;
const opt = L.args();
const dir = L.tmpdir();
const modelPath = L.makeTinyModel(opt.k3, dir);
const KEY = "agents-key";
const srv = await L.startServer(opt.k3, modelPath, ["-P", "2", "-c", "512", "--max-body-mb", "1", "--api-key", KEY]);

const USER = [{ role: "user", content: "Hi" }];
const TOOL = { name: "get_weather", description: "Weather", input_schema: { type: "object", properties: { city: { type: "string" } } } };
const FN = { type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } };
const USE = { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } };
const RESULT = { type: "tool_result", tool_use_id: "toolu_1", content: "Sunny" };
const CALL = { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' };

const messages = (body, headers = { "x-api-key": KEY }) => L.postJson(srv, "/v1/messages", body, headers);
const responses = (body, headers = { authorization: "Bearer " + KEY }) => L.postJson(srv, "/v1/responses", body, headers);
const M = (patch) => ({ model: "m", max_tokens: 16, messages: USER, ...patch });
const R = (patch) => ({ model: "m", input: "Hi", ...patch });

const cases = [];
// Anthropic shape; `mention` must appear in the message (the field it is about).
const anth = (name, status, type, fn, mention) => cases.push({ name: "messages: " + name, status, fn, check: (r) => {
  eq(r.body?.type, "error", "anthropic body type");
  eq(r.body?.error?.type, type, "anthropic error type");
  if (mention) assert(r.body.error.message.includes(mention), `message mentions ${mention}: ${r.body.error.message}`);
} });
// OpenAI shape; `param` must be the field.
const oai = (name, status, fn, param) => cases.push({ name: "responses: " + name, status, fn, check: (r) => {
  assert(r.body?.error?.message, "openai error body");
  if (param !== undefined) eq(r.body.error.param, param, "param");
} });
const badM = (name, patch, mention) => anth(name, 400, "invalid_request_error", () => messages(M(patch)), mention);
const badR = (name, patch, param) => oai(name, 400, () => responses(R(patch)), param);

// ---- /v1/messages ----
anth("missing max_tokens", 400, "invalid_request_error", () => messages({ model: "m", messages: USER }), "'max_tokens' is required");
badM("max_tokens 0", { max_tokens: 0 }, "max_tokens");
badM("max_tokens a string", { max_tokens: "16" }, "max_tokens");
badM("max_tokens fractional", { max_tokens: 2.5 }, "max_tokens");
anth("missing model", 400, "invalid_request_error", () => messages({ max_tokens: 4, messages: USER }), "'model' is required");
badM("messages a string", { messages: "hi" }, "'messages'");
badM("messages empty", { messages: [] }, "'messages'");
badM("system message with an image block", { messages: [...USER, { role: "system", content: [{ type: "image" }] }] }, "messages[1].content[0].type");
badM("message output_config effort bogus", { messages: [{ ...USER[0], output_config: { effort: "extreme" } }] }, "messages[0].output_config.effort");
badM("message output_config effort none", { messages: [{ ...USER[0], output_config: { effort: "none" } }] }, "messages[0].output_config.effort");
badM("message output_config with a format", { messages: [{ ...USER[0], output_config: { format: {} } }] }, "messages[0].output_config.format");
badM("role tool", { messages: [{ role: "tool", content: "x" }] }, "messages[0].role");
badM("content a number", { messages: [{ role: "user", content: 5 }] }, "messages[0].content");
badM("content missing", { messages: [{ role: "user" }] }, "messages[0].content");
badM("empty content array", { messages: [{ role: "user", content: [] }] }, "messages[0].content");
badM("image block without --mmproj", { messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] },
  "no vision model");
badM("unknown block type", { messages: [{ role: "user", content: [{ type: "hologram" }] }] }, "messages[0].content[0].type");
badM("text block without text", { messages: [{ role: "user", content: [{ type: "text" }] }] }, "messages[0].content[0].text");
badM("text block with text a number", { messages: [{ role: "user", content: [{ type: "text", text: 7 }] }] }, "messages[0].content[0].text");
badM("unknown field in a block", { messages: [{ role: "user", content: [{ type: "text", text: "x", evil: 1 }] }] }, "messages[0].content[0].evil");
badM("tool_result with no tool_use before it", { messages: [{ role: "user", content: [RESULT] }] }, "messages[0].content[0].tool_use_id");
badM("tool_result for another id", { messages: [...USER, { role: "assistant", content: [USE] },
  { role: "user", content: [{ ...RESULT, tool_use_id: "toolu_2" }] }], tools: [TOOL] }, "messages[2].content[0].tool_use_id");
badM("tool_use left unanswered", { messages: [...USER, { role: "assistant", content: [USE] }, { role: "user", content: "and?" }], tools: [TOOL] },
  "no tool_result");
badM("tool_result twice", { messages: [...USER, { role: "assistant", content: [USE] }, { role: "user", content: [RESULT, RESULT] }], tools: [TOOL] },
  "messages[2].content[1].tool_use_id");
badM("duplicate tool_use ids", { messages: [...USER, { role: "assistant", content: [USE, USE] }, { role: "user", content: [RESULT] }] },
  "messages[1].content[1].id");
badM("tool_use input a string", { messages: [...USER, { role: "assistant", content: [{ ...USE, input: "{}" }] }, { role: "user", content: [RESULT] }] },
  "messages[1].content[0].input");
badM("tool_use in a user message", { messages: [{ role: "user", content: [USE] }] }, "messages[0].content[0].type");
badM("assistant message last (prefill)", { messages: [...USER, { role: "assistant", content: "The answer is" }] }, "prefill");
badM("tool without input_schema", { tools: [{ name: "f" }] }, "tools[0].input_schema");
badM("input_schema a string", { tools: [{ name: "f", input_schema: "object" }] }, "tools[0].input_schema");
badM("input_schema of type string", { tools: [{ name: "f", input_schema: { type: "string" } }] }, "tools[0].input_schema.type");
badM("input_schema properties an array", { tools: [{ name: "f", input_schema: { type: "object", properties: ["a"] } }] },
  "tools[0].input_schema.properties");
badM("input_schema required not strings", { tools: [{ name: "f", input_schema: { type: "object", required: [1] } }] },
  "tools[0].input_schema.required");
badM("tool name with spaces", { tools: [{ ...TOOL, name: "get weather" }] }, "tools[0].name");
badM("two tools of one name", { tools: [TOOL, TOOL] }, "tools[1].name");
badM("server tool", { tools: [{ type: "web_search_20250305", name: "web_search" }] }, "tools[0].type");
badM("tools not an array", { tools: TOOL }, "'tools'");
badM("tool_choice any without tools", { tool_choice: { type: "any" } }, "tool_choice");
badM("tool_choice names an unknown tool", { tools: [TOOL], tool_choice: { type: "tool", name: "rm_rf" } }, "tool_choice.name");
badM("tool_choice a string", { tool_choice: "auto" }, "tool_choice");
badM("tool_choice type bogus", { tool_choice: { type: "bogus" } }, "tool_choice.type");
badM("thinking enabled without budget", { max_tokens: 4000, thinking: { type: "enabled" } }, "thinking.budget_tokens");
badM("thinking budget below 1024", { max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 10 } }, "thinking.budget_tokens");
badM("thinking budget not below max_tokens", { max_tokens: 2000, thinking: { type: "enabled", budget_tokens: 2000 } }, "thinking.budget_tokens");
badM("thinking type bogus", { thinking: { type: "maybe" } }, "thinking.type");
badM("output_config.effort none", { output_config: { effort: "none" } }, "output_config.effort");
badM("temperature 1.5 (Anthropic's range is 0..1)", { temperature: 1.5 }, "temperature");
badM("temperature a string", { temperature: "hot" }, "temperature");
badM("top_k negative", { top_k: -1 }, "top_k");
badM("stop_sequences a string", { stop_sequences: "STOP" }, "stop_sequences");
badM("5000 stop_sequences", { stop_sequences: Array.from({ length: 5000 }, (_, i) => "s" + i) }, "stop_sequences");
badM("an empty stop sequence", { stop_sequences: [""] }, "stop_sequences");
badM("stream a string", { stream: "yes" }, "stream");
badM("system a number", { system: 3 }, "system");
badM("system block of type image", { system: [{ type: "image" }] }, "system[0].type");
badM("unknown top-level field", { frobnicate: 1 }, "frobnicate");
badM("metadata a string", { metadata: "x" }, "metadata");
badM("metadata with an unknown key", { metadata: { user_id: "u", evil: 1 } }, "metadata.evil");
badM("container", { container: "c1" }, "container");
badM("an MCP server", { mcp_servers: [{ type: "url", url: "http://127.0.0.1:1/mcp", name: "x" }] }, "mcp_servers");
badM("k3_canned without --test-canned", { k3_canned: { text: "x" } }, "k3_canned");
badM("prompt longer than the context", { messages: [{ role: "user", content: "long ".repeat(2000) }] }, "context");
badM("a bad field in a streaming request", { stream: true, top_p: 7 }, "top_p");
anth("broken JSON", 400, "invalid_request_error", () => messages('{"model": "m", "messages": ['), "not valid JSON");
anth("100000 nested arrays", 400, "invalid_request_error", () => messages("[".repeat(100000)), "deeper than");
anth("invalid UTF-8", 400, "invalid_request_error",
  () => messages(Buffer.from('{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"\xff"}]}', "latin1")), "UTF-8");
anth("body of 2 MiB", 413, "request_too_large", () => messages("x".repeat(2 << 20)), "larger than");
anth("no API key", 401, "authentication_error", () => messages(M({}), {}), "x-api-key");
anth("wrong x-api-key", 401, "authentication_error", () => messages(M({}), { "x-api-key": "nope" }), "invalid API key");
anth("count_tokens without messages", 400, "invalid_request_error",
  () => L.postJson(srv, "/v1/messages/count_tokens", { model: "m" }, { "x-api-key": KEY }), "'messages' is required");
anth("count_tokens with an unanswerable tool_result", 400, "invalid_request_error",
  () => L.postJson(srv, "/v1/messages/count_tokens", { model: "m", messages: [{ role: "user", content: [RESULT] }] }, { "x-api-key": KEY }),
  "tool_use_id");
anth("GET /v1/messages", 405, "invalid_request_error", async () => {
  const r = await fetch(srv.url + "/v1/messages", { headers: { "x-api-key": KEY } });
  return { status: r.status, body: await r.json() };
}, "not allowed");
anth("unknown route under /v1/messages", 404, "not_found_error", async () => {
  const r = await fetch(srv.url + "/v1/messages/batches", { headers: { "x-api-key": KEY } });
  return { status: r.status, body: await r.json() };
}, "unknown route");

// ---- /v1/responses ----
badR("input missing", { input: undefined }, "input");
badR("input a number", { input: 5 }, "input");
badR("input an empty array", { input: [] }, "input");
badR("item of unknown type", { input: [{ type: "hologram" }] }, "input[0].type");
badR("message role tool", { input: [{ role: "tool", content: "x" }] }, "input[0].role");
badR("message content a number", { input: [{ role: "user", content: 1 }] }, "input[0].content");
badR("input_image part without --mmproj", { input: [{ role: "user", content: [{ type: "input_image", image_url: "data:image/png;base64,AA" }] }] },
  "input[0].content[0]");
badR("input_file part", { input: [{ role: "user", content: [{ type: "input_file", file_id: "f" }] }] }, "input[0].content[0].type");
badR("function_call_output with no call", { input: [{ type: "function_call_output", call_id: "call_9", output: "x" }] }, "input[0].call_id");
badR("function_call_output for another call", { input: ["Hi", CALL, { type: "function_call_output", call_id: "call_2", output: "x" }].map((x) =>
  typeof x === "string" ? { role: "user", content: x } : x), tools: [FN] }, "input[2].call_id");
badR("function_call_output twice", { input: [{ role: "user", content: "Hi" }, CALL, { type: "function_call_output", call_id: "call_1", output: "x" },
  { type: "function_call_output", call_id: "call_1", output: "y" }] }, "input[3].call_id");
badR("function_call without call_id", { input: [{ ...CALL, call_id: undefined }] }, "input[0].call_id");
badR("function_call arguments an object", { input: [{ ...CALL, arguments: { city: "Paris" } }] }, "input[0].arguments");
badR("two function_calls of one id", { input: [CALL, CALL] }, "input[1].call_id");
badR("item_reference", { input: [{ type: "item_reference", id: "msg_1" }] }, "input[0].type");
badR("previous_response_id", { previous_response_id: "resp_1" }, "previous_response_id");
badR("store true", { store: true }, "store");
badR("conversation", { conversation: "conv_1" }, "conversation");
badR("background true", { background: true }, "background");
badR("tool of unknown type", { tools: [{ type: "teleporter" }] }, "tools[0].type");
badR("tool_choice forcing web_search", { tools: [{ type: "web_search" }, FN], tool_choice: { type: "web_search" } }, "tool_choice.type");
badR("tool_choice forcing mcp", { tools: [FN], tool_choice: { type: "mcp", server_label: "x" } }, "tool_choice.type");
badR("tool_choice of unknown type", { tools: [FN], tool_choice: { type: "teleporter" } }, "tool_choice.type");
badR("tool_choice required with hosted tools only", { tools: [{ type: "web_search" }], tool_choice: "required" }, "tool_choice");
badR("namespace holding a hosted tool", { tools: [{ type: "namespace", name: "ns", description: "d", tools: [{ type: "web_search" }] }] },
  "tools[0].tools[0].type");
badR("namespace without tools", { tools: [{ type: "namespace", name: "ns", description: "d" }] }, "tools[0].tools");
badR("namespace name with a dot", { tools: [{ type: "namespace", name: "a.b", tools: [FN] }] }, "tools[0].name");
badR("namespace function named twice", { tools: [{ type: "namespace", name: "ns", tools: [FN, FN] }] }, "tools[0].tools[1].name");
badR("custom tool grammar of unknown syntax", { tools: [{ type: "custom", name: "patch", format: { type: "grammar", syntax: "ebnf", definition: "x" } }] },
  "tools[0].format.syntax");
badR("custom tool format of unknown type", { tools: [{ type: "custom", name: "patch", format: { type: "binary" } }] }, "tools[0].format.type");
badR("custom tool and function of one name", { tools: [FN, { type: "custom", name: "get_weather" }] }, "tools[1].name");
badR("allowed_tools mode bogus", { tools: [FN], tool_choice: { type: "allowed_tools", mode: "sometimes", tools: [] } }, "tool_choice.mode");
badR("allowed_tools naming an unknown function", { tools: [FN], tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "rm_rf" }] } },
  "tool_choice.tools[0].name");
badR("include of an unknown value", { include: ["reasoning.plaintext"] }, "include[0]");
badR("service_tier bogus", { service_tier: "platinum" }, "service_tier");
badR("prompt_cache_retention bogus", { prompt_cache_retention: "forever" }, "prompt_cache_retention");
badR("prompt_cache_options ttl bogus", { prompt_cache_options: { ttl: "1y" } }, "prompt_cache_options.ttl");
badR("client_metadata value a number", { client_metadata: { session: 5 } }, "client_metadata.session");
badR("client_metadata an array", { client_metadata: ["x"] }, "client_metadata");
badR("context_management not an array", { context_management: { type: "compaction" } }, "context_management");
badR("reasoning context bogus", { reasoning: { context: "everything" } }, "reasoning.context");
badR("text verbosity bogus", { text: { verbosity: "loud" } }, "text.verbosity");
badR("a stored prompt", { prompt: { id: "pmpt_1" } }, "prompt");
badR("k3 reasoning item with broken base64", { input: [{ type: "reasoning", summary: [], encrypted_content: "k3-reasoning:@@@" }, { role: "user", content: "Hi" }] },
  "input[0].encrypted_content");
badR("custom_tool_call_output with no call", { input: [{ type: "custom_tool_call_output", call_id: "call_9", output: "x" }] }, "input[0].call_id");
badR("custom_tool_call without input", { input: [{ type: "custom_tool_call", call_id: "call_1", name: "patch" }] }, "input[0].input");
badR("function_call_output with an image", { input: [{ role: "user", content: "Hi" }, CALL,
  { type: "function_call_output", call_id: "call_1", output: [{ type: "input_image", image_url: "data:image/png;base64,AA" }] }] }, "input[2].output[0].type");
badR("function tool without a name", { tools: [{ type: "function", parameters: {} }] }, "tools[0].name");
badR("parameters of type string", { tools: [{ ...FN, parameters: { type: "string" } }] }, "tools[0].parameters.type");
badR("parameters a string", { tools: [{ ...FN, parameters: "{}" }] }, "tools[0].parameters");
badR("tool_choice required without tools", { tool_choice: "required" }, "tool_choice");
badR("tool_choice names an unknown function", { tools: [FN], tool_choice: { type: "function", name: "rm_rf" } }, "tool_choice.name");
badR("max_output_tokens 0", { max_output_tokens: 0 }, "max_output_tokens");
badR("max_output_tokens a string", { max_output_tokens: "5" }, "max_output_tokens");
badR("temperature 3", { temperature: 3 }, "temperature");
badR("top_p 2", { top_p: 2 }, "top_p");
badR("reasoning effort extreme", { reasoning: { effort: "extreme" } }, "reasoning.effort");
badR("text.format xml", { text: { format: { type: "xml" } } }, "text.format.type");
badR("include not an array", { include: "reasoning.encrypted_content" }, "include");
badR("unknown top-level field", { frobnicate: 1 }, "frobnicate");
badR("stream a string", { stream: "true" }, "stream");
badR("prompt longer than the context", { input: "long ".repeat(2000) }, "input");
oai("body of 2 MiB", 413, () => responses("x".repeat(2 << 20)));
oai("broken JSON", 400, () => responses("{"), null);
oai("no API key", 401, () => responses(R({}), {}));
oai("input_tokens with store", 400, () => L.postJson(srv, "/v1/responses/input_tokens", R({ store: true }), { authorization: "Bearer " + KEY }), "store");

let n = 0;
for (const c of cases) {
  L.test(`${String(++n).padStart(3)} ${c.name}`, async () => {
    const r = await c.fn();
    eq(r.status, c.status, `status (${(r.text || JSON.stringify(r.body) || "").slice(0, 200)})`);
    await c.check(r);
    assert(srv.alive(), "server alive");
    eq((await L.getJson(srv, "/health")).status, 200, "health after the request");
  });
}

L.test("both routes still serve; a max_tokens above the cap is lowered to it", async () => {
  const m = await messages(M({ max_tokens: 1e12, messages: [{ role: "user", content: "Hi" }] }));
  eq(m.status, 200, "messages status");
  eq(m.body.type, "message", "a message");
  // The context (-c 512) holds the prompt and all but the last output token, which is sampled from it.
  assert(m.body.usage.input_tokens + m.body.usage.output_tokens <= 513, "generation stayed within the context: " + JSON.stringify(m.body.usage));
  const r = await responses(R({ max_output_tokens: 4 }));
  eq(r.status, 200, "responses status");
  eq(r.body.usage.output_tokens <= 4, true, "budget kept");
});

await L.run(`agents_hostile (${cases.length} hostile requests)`, async () => {
  const st = await srv.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  if (st.code !== 0) {
    console.log("FAIL server exit " + JSON.stringify(st) + "\n" + srv.log());
    return false;
  }
});
