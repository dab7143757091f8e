// End to end with the official agent-protocol SDKs against `k3 serve` on a synthetic model:
// @anthropic-ai/sdk on /v1/messages (create, the stream helper, a tool_use round trip with
// tool_result, thinking on/off, count_tokens, error shapes, x-api-key) and `openai` on
// /v1/responses (create streamed and not, the responses.stream helper, a function-call round
// trip, namespace / custom / hosted tools and k3's encrypted reasoning items, input_tokens).
// Canned model outputs (reasoning, tool calls with nested JSON, stop sequences, multi-byte text
// split across tokens, a cut by the token budget) must come out identical streamed and not, and
// identical through /v1/chat/completions, /v1/messages and /v1/responses; the three routes must
// count the same prompt tokens as @huggingface/jinja's rendering of the conversation.
//
//   node tests/server/e2e_agents.mjs [--k3 build/bin/k3]
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import * as L from "./lib.mjs";

const { assert, eq, test } = L;
const require = createRequire(path.join(L.root, "tests/node/package.json"));
const Anthropic = (await import(require.resolve("@anthropic-ai/sdk"))).default;

const opt = L.args();
const dir = L.tmpdir();
const modelPath = L.makeTinyModel(opt.k3, dir);
const srv = await L.startServer(opt.k3, modelPath, ["-P", "2", "-c", "2048", "--test-canned"]);
const ai = L.client(srv);
const claude = new Anthropic({ apiKey: "unused", baseURL: srv.url, maxRetries: 0, timeout: 60000 });
const MODEL = "k3-synthetic-tiny";

const k3Template = new L.Template(fs.readFileSync(path.join(L.root, "data/templates/kimi-k3.jinja"), "utf8"));
// The server's normalization (JSON-string tool arguments parsed into objects), then the template.
function render(messages, extra = {}) {
  const msgs = structuredClone(messages).map((m) => {
    for (const c of m.tool_calls || []) {
      const v = JSON.parse(c.function.arguments);
      if (v && typeof v === "object" && !Array.isArray(v)) c.function.arguments = v;
    }
    return m;
  });
  return k3Template.render({ messages: msgs, add_generation_prompt: true, ...extra });
}
async function tokens(text) {
  const r = await L.postJson(srv, "/tokenize", { content: text, with_pieces: true });
  eq(r.status, 200, "tokenize status");
  return r.body.tokens;
}

// ---- one conversation in the three protocols ----
const SYSTEM = "You are a coding agent.";
const QUESTION = "Fix src/main.c, please.";
const SCHEMA = {
  type: "object",
  properties: {
    path: { type: "string" },
    edits: { type: "array", items: { type: "object", properties: { old: { type: "string" }, new: { type: "string" } } } },
    options: { type: "object", properties: { dry_run: { type: "boolean" }, depth: { type: "integer" } } },
  },
  required: ["path", "edits"],
};
const TOOLS = {
  chat: [{ type: "function", function: { name: "edit_file", description: "Edit a file", parameters: SCHEMA } }],
  anthropic: [{ name: "edit_file", description: "Edit a file", input_schema: SCHEMA }],
  responses: [{ type: "function", name: "edit_file", description: "Edit a file", parameters: SCHEMA }],
};
const CHAT_MESSAGES = [{ role: "system", content: SYSTEM }, { role: "user", content: QUESTION }];

const END = "<|close|>message<|sep|><|end_of_msg|>";
const THINK = (r, c) => `${r}<|close|>think<|sep|><|open|>response<|sep|>${c}<|close|>response<|sep|>${END}`;
const arg = (k, t, v) => `<|open|>argument key="${k}" type="${t}"<|sep|>${v}<|close|>argument<|sep|>`;
const call = (i, args) => `<|open|>call tool="edit_file" index="${i}"<|sep|>${args}<|close|>call<|sep|>`;
const CANNED = {
  reasoning: THINK("I think so.", "Hello there!"),
  multibyte: THINK("Grüße — 世界 🎉 ok", "naïve café: 東京 🚀 done"),
  tools:
    "Two edits needed.<|close|>think<|sep|><|open|>response<|sep|>Editing now.<|close|>response<|sep|><|open|>tools<|sep|>" +
    call(1, arg("path", "string", "src/main.c") +
      arg("edits", "array", '[{"old": "a \\"q\\"", "new": "b\\nc"}, {"old": "x", "new": "ü 🎉"}]') +
      arg("options", "object", '{"dry_run": true, "depth": 2}')) +
    call(2, arg("path", "string", "README.md") + arg("edits", "array", "[]")) +
    "<|close|>tools<|sep|>" + END,
  stop: THINK("Stop words may hide here.", "Hello world STOP and more text"),
};

// The three request bodies for one canned output.
function bodies(canned, { tools = false, stop = null, max = 1500 } = {}) {
  const k3_canned = { text: canned };
  return {
    chat: { model: MODEL, messages: CHAT_MESSAGES, max_tokens: max, k3_canned, ...(tools && { tools: TOOLS.chat }), ...(stop && { stop }) },
    anthropic: {
      model: MODEL, system: SYSTEM, messages: [{ role: "user", content: QUESTION }], max_tokens: max,
      thinking: { type: "adaptive" }, k3_canned,
      ...(tools && { tools: TOOLS.anthropic }), ...(stop && { stop_sequences: stop }),
    },
    responses: { model: MODEL, instructions: SYSTEM, input: QUESTION, max_output_tokens: max, k3_canned, ...(tools && { tools: TOOLS.responses }) },
  };
}

// Each answer reduced to {reasoning, text, calls: [{name, arguments (text), input (object)}], stop}.
const parsedArgs = (s) => { try { return JSON.parse(s); } catch { return null; } };
function fromChat(r) {
  const m = r.choices[0].message;
  return {
    reasoning: m.reasoning_content || "", text: m.content || "",
    calls: (m.tool_calls || []).map((c) => ({ name: c.function.name, arguments: c.function.arguments, input: parsedArgs(c.function.arguments) })),
    stop: r.choices[0].finish_reason, prompt: r.usage.prompt_tokens,
  };
}
async function fromChatStream(stream) {
  const out = { reasoning: "", text: "", calls: [], stop: null, prompt: null };
  for await (const ch of stream) {
    if (ch.usage) out.prompt = ch.usage.prompt_tokens;
    for (const c of ch.choices) {
      out.reasoning += c.delta.reasoning_content || "";
      out.text += c.delta.content || "";
      for (const tc of c.delta.tool_calls || []) {
        out.calls[tc.index] ??= { name: "", arguments: "" };
        out.calls[tc.index].name += tc.function?.name || "";
        out.calls[tc.index].arguments += tc.function?.arguments || "";
      }
      out.stop = c.finish_reason || out.stop;
    }
  }
  for (const c of out.calls) c.input = parsedArgs(c.arguments);
  return out;
}
// Anthropic's input_tokens leaves out what the prompt cache served (cache_read_input_tokens).
const anthropicPrompt = (u) => u.input_tokens + u.cache_read_input_tokens;
const ANTHROPIC_STOP = { end_turn: "stop", tool_use: "tool_calls", max_tokens: "length", stop_sequence: "stop" };
function fromMessage(m, partialJson = null) {
  const uses = m.content.filter((b) => b.type === "tool_use");
  return {
    reasoning: m.content.filter((b) => b.type === "thinking").map((b) => b.thinking).join(""),
    text: m.content.filter((b) => b.type === "text").map((b) => b.text).join(""),
    calls: uses.map((b, i) => ({ name: b.name, arguments: partialJson ? partialJson[i] : JSON.stringify(b.input), input: b.input })),
    stop: ANTHROPIC_STOP[m.stop_reason], prompt: anthropicPrompt(m.usage),
  };
}
function fromResponse(r) {
  const items = r.output;
  return {
    reasoning: items.filter((i) => i.type === "reasoning").flatMap((i) => i.content.map((c) => c.text)).join(""),
    text: items.filter((i) => i.type === "message").flatMap((i) => i.content.map((c) => c.text)).join(""),
    calls: items.filter((i) => i.type === "function_call").map((i) => ({ name: i.name, arguments: i.arguments, input: parsedArgs(i.arguments) })),
    stop: r.status === "incomplete" ? "length" : items.some((i) => i.type === "function_call") ? "tool_calls" : "stop",
    prompt: r.usage.input_tokens,
  };
}

// Anthropic streaming through the SDK's stream helper, keeping the raw events.
async function anthropicStream(body) {
  const events = [];
  const s = claude.messages.stream(body);
  s.on("streamEvent", (e) => events.push(structuredClone(e)));
  const final = await s.finalMessage();
  return { events, final };
}
// The raw event sequence must be Anthropic's grammar; returns the partial_json text of each tool_use.
function checkAnthropicEvents(events) {
  eq(events[0].type, "message_start", "first event");
  eq(events.at(-1).type, "message_stop", "last event");
  eq(events.at(-2).type, "message_delta", "message_delta before message_stop");
  // Claude Code reports a response's usage from message_start: the cache split is known there.
  const start = events[0].message.usage, end = events.at(-2).usage;
  eq([start.input_tokens, start.cache_read_input_tokens], [end.input_tokens, end.cache_read_input_tokens], "message_start usage = final usage");
  let open = -1, next = 0;
  const partial = [];
  for (const e of events.slice(1, -2)) {
    if (e.type === "content_block_start") {
      eq(open, -1, "no block open at content_block_start");
      eq(e.index, next, "blocks numbered in order");
      open = next++;
      if (e.content_block.type === "tool_use") partial.push("");
      else eq(e.content_block[e.content_block.type === "text" ? "text" : "thinking"], "", "a block starts empty");
    } else if (e.type === "content_block_delta") {
      eq(e.index, open, "delta of the open block");
      if (e.delta.type === "input_json_delta") partial[partial.length - 1] += e.delta.partial_json;
      else assert(e.delta.type === "text_delta" || e.delta.type === "thinking_delta", "delta type " + e.delta.type);
    } else if (e.type === "content_block_stop") {
      eq(e.index, open, "stop of the open block");
      open = -1;
    } else {
      throw new Error("unexpected event " + e.type);
    }
  }
  eq(open, -1, "every block stopped");
  return partial;
}

// Responses streaming: raw events from create({stream: true}) and the SDK's strict accumulator.
async function responsesStream(body) {
  const events = [];
  for await (const e of await ai.responses.create({ ...body, stream: true })) events.push(e);
  events.forEach((e, i) => eq(e.sequence_number, i, "sequence_number"));
  eq(events[0].type, "response.created", "first event");
  eq(events[1].type, "response.in_progress", "second event");
  assert(["response.completed", "response.incomplete"].includes(events.at(-1).type), "last event " + events.at(-1).type);
  const deltas = { reasoning: "", text: "", args: [] };
  for (const e of events) {
    if (e.type === "response.reasoning_text.delta") deltas.reasoning += e.delta;
    if (e.type === "response.output_text.delta") deltas.text += e.delta;
    if (e.type === "response.output_item.added" && e.item.type === "function_call") deltas.args.push("");
    if (e.type === "response.function_call_arguments.delta") deltas.args[deltas.args.length - 1] += e.delta;
  }
  const helper = await ai.responses.stream(body).finalResponse();
  return { events, final: events.at(-1).response, deltas, helper };
}

// All six answers (three routes, streamed and not) of one conversation must agree.
async function acrossRoutes(name, canned, opts = {}) {
  const b = bodies(canned, opts);
  const chat = fromChat(await ai.chat.completions.create(b.chat));
  const chatStream = await fromChatStream(await ai.chat.completions.create({ ...b.chat, stream: true, stream_options: { include_usage: true } }));
  const msg = fromMessage(await claude.messages.create(b.anthropic));
  const as = await anthropicStream(b.anthropic);
  const partial = checkAnthropicEvents(as.events);
  const msgStream = fromMessage(as.final, partial);
  const answers = { chatStream, msg, msgStream };
  if (!opts.stop) {  // the Responses API has no stop sequences
    answers.resp = fromResponse(await ai.responses.create(b.responses));
    const rs = await responsesStream(b.responses);
    answers.respStream = fromResponse(rs.final);
    eq(rs.deltas.reasoning, answers.respStream.reasoning, `${name}: responses reasoning deltas`);
    eq(rs.deltas.text, answers.respStream.text, `${name}: responses text deltas`);
    eq(rs.deltas.args, answers.respStream.calls.map((c) => c.arguments), `${name}: responses argument deltas`);
    eq(fromResponse(rs.helper), answers.respStream, `${name}: responses.stream() helper`);
  }
  for (const [route, a] of Object.entries(answers)) {
    eq(a.reasoning, chat.reasoning, `${name}: reasoning, ${route} vs chat`);
    eq(a.text, chat.text, `${name}: text, ${route} vs chat`);
    eq(a.calls.map((c) => [c.name, c.input]), chat.calls.map((c) => [c.name, c.input]), `${name}: tool calls, ${route} vs chat`);
    if (route !== "msg") eq(a.calls.map((c) => c.arguments), chat.calls.map((c) => c.arguments), `${name}: argument text, ${route} vs chat`);
    eq(a.prompt, chat.prompt, `${name}: prompt tokens, ${route} vs chat`);
  }
  return { chat, stops: Object.fromEntries(Object.entries(answers).map(([k, a]) => [k, a.stop])), b };
}

test("reasoning and text: identical through the three routes, streamed and not; prompt tokens match the template", async () => {
  const { chat, stops, b } = await acrossRoutes("reasoning", CANNED.reasoning);
  eq(chat.reasoning, "I think so.", "reasoning");
  eq(chat.text, "Hello there!", "text");
  eq(stops, { chatStream: "stop", msg: "stop", msgStream: "stop", resp: "stop", respStream: "stop" }, "stop reasons");
  eq(chat.prompt, (await tokens(render(CHAT_MESSAGES))).length, "prompt tokens = tokens of the jinja rendering");
  const count = await claude.messages.countTokens({ model: MODEL, system: SYSTEM, messages: b.anthropic.messages, thinking: b.anthropic.thinking });
  eq(count.input_tokens, chat.prompt, "count_tokens");
  const text = await claude.messages.stream(b.anthropic).finalText();
  eq(text, "Hello there!", "stream helper finalText");
  const it = await ai.responses.inputTokens.count({ model: MODEL, instructions: SYSTEM, input: QUESTION });
  eq(it.input_tokens, chat.prompt, "responses input_tokens");
  eq(it.object, "response.input_tokens", "object");
});

test("multi-byte text split across tokens arrives whole and identical everywhere", async () => {
  const pieces = await tokens("世界 🎉");
  assert(pieces.some((t) => Array.isArray(t.piece)), "a character is split across tokens (a piece that is not UTF-8 alone)");
  const { chat } = await acrossRoutes("multibyte", CANNED.multibyte);
  eq(chat.reasoning, "Grüße — 世界 🎉 ok", "reasoning");
  eq(chat.text, "naïve café: 東京 🚀 done", "text");
});

test("tool calls with nested JSON arguments: identical argument text and input through the three routes", async () => {
  const { chat, stops } = await acrossRoutes("tools", CANNED.tools, { tools: true });
  eq(chat.text, "Editing now.", "text");
  eq(chat.calls.length, 2, "two calls");
  eq(chat.calls[0].input, {
    path: "src/main.c",
    edits: [{ old: 'a "q"', new: "b\nc" }, { old: "x", new: "ü 🎉" }],
    options: { dry_run: true, depth: 2 },
  }, "nested arguments");
  eq(chat.calls[1].input, { path: "README.md", edits: [] }, "second call");
  eq(stops, { chatStream: "tool_calls", msg: "tool_calls", msgStream: "tool_calls", resp: "tool_calls", respStream: "tool_calls" }, "stop reasons");
});

test("stop sequences: the same text cut through chat and messages, stop_reason stop_sequence", async () => {
  const { chat, stops, b } = await acrossRoutes("stop", CANNED.stop, { stop: ["STOP"] });
  eq(chat.text, "Hello world ", "text before the stop sequence");
  eq(stops.msg, "stop", "anthropic stop");
  const m = await claude.messages.create(b.anthropic);
  eq(m.stop_reason, "stop_sequence", "stop_reason");
  eq(m.stop_sequence, "STOP", "stop_sequence");
  const s = await anthropicStream(b.anthropic);
  eq(s.final.stop_reason, "stop_sequence", "streamed stop_reason");
  eq(s.final.stop_sequence, "STOP", "streamed stop_sequence");
});

test("a cut by the token budget: max_tokens / incomplete, the same partial text everywhere", async () => {
  const { chat, stops, b } = await acrossRoutes("budget", CANNED.multibyte, { max: 30 });
  eq(chat.stop, "length", "chat finish_reason");
  eq(stops, { chatStream: "length", msg: "length", msgStream: "length", resp: "length", respStream: "length" }, "stop reasons");
  const m = await claude.messages.create(b.anthropic);
  eq(m.stop_reason, "max_tokens", "anthropic stop_reason");
  eq(m.usage.output_tokens, 30, "output_tokens");
  const r = await ai.responses.create(b.responses);
  eq(r.status, "incomplete", "responses status");
  eq(r.incomplete_details, { reason: "max_output_tokens" }, "incomplete_details");
  eq(r.usage.output_tokens, 30, "output_tokens");
});

test("anthropic: tool_use round trip with a tool_result; the history renders as the chat route's", async () => {
  const q = [{ role: "user", content: QUESTION }];
  const base = { model: MODEL, system: SYSTEM, max_tokens: 1500, tools: TOOLS.anthropic, thinking: { type: "enabled", budget_tokens: 1024 } };
  const r1 = await claude.messages.create({ ...base, messages: q, k3_canned: { text: CANNED.tools } });
  eq(r1.stop_reason, "tool_use", "stop_reason");
  eq(r1.content.map((b) => b.type), ["thinking", "text", "tool_use", "tool_use"], "blocks");
  const uses = r1.content.filter((b) => b.type === "tool_use");
  assert(uses.every((u) => /^toolu_/.test(u.id)) && uses[0].id !== uses[1].id, "tool_use ids");
  const history = [
    ...q,
    { role: "assistant", content: r1.content },
    { role: "user", content: [
      { type: "tool_result", tool_use_id: uses[0].id, content: "patched" },
      { type: "tool_result", tool_use_id: uses[1].id, content: [{ type: "text", text: "no " }, { type: "text", text: "change" }], is_error: true },
      { type: "text", text: "Thanks." },
    ] },
  ];
  const final = THINK("Both done.", "All edits applied.");
  const r2 = await claude.messages.create({ ...base, messages: history, k3_canned: { text: final } });
  eq(r2.content.map((b) => b.type), ["thinking", "text"], "final blocks");
  eq(r2.content[1].text, "All edits applied.", "final text");
  eq(r2.stop_reason, "end_turn", "final stop_reason");

  const chatHistory = [
    ...CHAT_MESSAGES,
    { role: "assistant", content: "Editing now.", reasoning_content: "Two edits needed.",
      tool_calls: uses.map((u) => ({ id: u.id, type: "function", function: { name: u.name, arguments: JSON.stringify(u.input) } })) },
    { role: "tool", tool_call_id: uses[0].id, content: "patched" },
    { role: "tool", tool_call_id: uses[1].id, content: "no change" },
    { role: "user", content: "Thanks." },
  ];
  const rendered = render(chatHistory, { tools: TOOLS.chat });
  assert(rendered.includes('<|open|>message role="tool" tool="edit_file" index="2"<|sep|>no change'), "tool results rendered");
  eq(anthropicPrompt(r2.usage), (await tokens(rendered)).length, "input + cache_read tokens = tokens of the jinja rendering");
  const c2 = await ai.chat.completions.create({ model: MODEL, messages: chatHistory, tools: TOOLS.chat, k3_canned: { text: final } });
  eq(c2.usage.prompt_tokens, anthropicPrompt(r2.usage), "same prompt through the chat route");
  const count = await claude.messages.countTokens({ model: MODEL, system: SYSTEM, messages: history, tools: TOOLS.anthropic, thinking: base.thinking });
  eq(count.input_tokens, anthropicPrompt(r2.usage), "count_tokens of the round trip");

  const s = claude.messages.stream({ ...base, messages: history, k3_canned: { text: final } });
  const texts = [];
  s.on("text", (t) => texts.push(t));
  eq((await s.finalText()), "All edits applied.", "stream helper finalText");
  eq(texts.join(""), "All edits applied.", "text events");
});

test("anthropic: thinking on and off (off when absent, as the API's default)", async () => {
  const q = [{ role: "user", content: "Hi" }];
  const off = "Just text.<|close|>response<|sep|>" + END;
  for (const thinking of [undefined, { type: "disabled" }]) {
    const r = await claude.messages.create({ model: MODEL, max_tokens: 50, messages: q, ...(thinking && { thinking }), k3_canned: { text: off } });
    eq(r.content, [{ type: "text", text: "Just text." }], "no thinking block");
    eq(anthropicPrompt(r.usage), (await tokens(render(q, { thinking: false }))).length, "prompt rendered with thinking off");
  }
  for (const thinking of [{ type: "enabled", budget_tokens: 1024 }, { type: "adaptive" }]) {
    const r = await claude.messages.create({ model: MODEL, max_tokens: 2000, messages: q, thinking, k3_canned: { text: CANNED.reasoning } });
    eq(r.content.map((b) => b.type), ["thinking", "text"], "thinking block first");
    eq(r.content[0].thinking, "I think so.", "thinking text");
    eq(anthropicPrompt(r.usage), (await tokens(render(q))).length, "prompt rendered with thinking on");
  }
  const beta = await claude.beta.messages.create({ model: MODEL, max_tokens: 50, messages: q, betas: ["context-management-2025-06-27"],
    context_management: { edits: [] }, k3_canned: { text: off } });
  eq(beta.content, [{ type: "text", text: "Just text." }], "the beta endpoint (?beta=true) is the same route");
  const low = await claude.messages.create({ model: MODEL, max_tokens: 2000, messages: q, thinking: { type: "adaptive" },
    output_config: { effort: "low" }, k3_canned: { text: CANNED.reasoning } });
  eq(anthropicPrompt(low.usage), (await tokens(render(q, { thinking_effort: "low" }))).length, "output_config.effort low");
});

test("responses: a function-call round trip with function_call_output; output_text; history as in chat", async () => {
  const base = { model: MODEL, instructions: SYSTEM, tools: TOOLS.responses };
  const r1 = await ai.responses.create({ ...base, input: QUESTION, k3_canned: { text: CANNED.tools } });
  eq(r1.status, "completed", "status");
  eq(r1.output.map((i) => i.type), ["reasoning", "message", "function_call", "function_call"], "items");
  eq(r1.output_text, "Editing now.", "output_text");
  const calls = r1.output.filter((i) => i.type === "function_call");
  assert(calls.every((c) => /^call_/.test(c.call_id) && /^fc_/.test(c.id)), "ids");
  const input = [
    { role: "user", content: QUESTION },
    ...r1.output,
    { type: "function_call_output", call_id: calls[0].call_id, output: "patched" },
    { type: "function_call_output", call_id: calls[1].call_id, output: [{ type: "input_text", text: "no change" }] },
  ];
  const final = THINK("Both done.", "All edits applied.");
  const r2 = await ai.responses.create({ ...base, input, k3_canned: { text: final } });
  eq(r2.output_text, "All edits applied.", "final output_text");
  const chatHistory = [
    ...CHAT_MESSAGES,
    { role: "assistant", content: "Editing now.", reasoning_content: "Two edits needed.",
      tool_calls: calls.map((c) => ({ id: c.call_id, type: "function", function: { name: c.name, arguments: c.arguments } })) },
    { role: "tool", tool_call_id: calls[0].call_id, content: "patched" },
    { role: "tool", tool_call_id: calls[1].call_id, content: "no change" },
  ];
  eq(r2.usage.input_tokens, (await tokens(render(chatHistory, { tools: TOOLS.chat }))).length, "input_tokens = jinja rendering");
  const s = await responsesStream({ ...base, input, k3_canned: { text: final } });
  eq(s.helper.output_text, "All edits applied.", "streamed output_text (helper)");
  // The same request again: the same usage, except that the prompt cache now serves all of it.
  eq(s.final.usage.input_tokens_details.cached_tokens, s.final.usage.input_tokens, "the resent input is cached whole");
  const uncached = (u) => ({ ...u, input_tokens_details: undefined });
  eq(uncached(s.final.usage), uncached(r2.usage), "streamed usage = non-streamed usage");
  eq(r2.usage.output_tokens_details.reasoning_tokens > 0, true, "reasoning tokens counted");
});

test("responses: namespace, custom and hosted tools as Codex sends them; k3's encrypted reasoning round trip", async () => {
  // A namespace's functions reach the model as NAMESPACE.NAME (with the namespace's description), a
  // custom tool as a function of one string `input` (its grammar in the description), hosted tools
  // not at all; calls come back as function_call with `namespace` and as custom_tool_call.
  const GRAMMAR = 'start: "*** Begin Patch" /(.|\\n)*/ "*** End Patch"';
  const tools = [
    { type: "namespace", name: "agents", description: "Sub-agents.", tools: [{ ...TOOLS.responses[0], name: "spawn" }] },
    { type: "custom", name: "apply_patch", description: "Edit files.", format: { type: "grammar", syntax: "lark", definition: GRAMMAR } },
    { type: "web_search", external_web_access: false },
    { type: "function", name: "exec_command", parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] } },
  ];
  const chatTools = [
    { type: "function", function: { name: "agents.spawn", description: "Sub-agents.\n\nEdit a file", parameters: SCHEMA } },
    { type: "function", function: { name: "apply_patch", description: `Edit files.\n\nThe input must match this lark grammar:\n${GRAMMAR}`,
      parameters: { type: "object", properties: { input: { type: "string", description: "the tool's input, free-form" } }, required: ["input"] } } },
    { type: "function", function: { name: "exec_command", parameters: tools[3].parameters } },
  ];
  const PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi \"there\"\n*** End Patch";
  const canned = "Patch, then spawn.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>" +
    `<|open|>call tool="apply_patch" index="1"<|sep|>${arg("input", "string", PATCH)}<|close|>call<|sep|>` +
    `<|open|>call tool="agents.spawn" index="2"<|sep|>${arg("path", "string", "a.txt")}${arg("edits", "array", "[]")}<|close|>call<|sep|>` +
    "<|close|>tools<|sep|>" + END;
  const base = { model: MODEL, tools, tool_choice: "auto", parallel_tool_calls: true, store: false, include: ["reasoning.encrypted_content"],
    prompt_cache_key: "session-1", client_metadata: { session_id: "s1" }, reasoning: { summary: "auto" } };
  const r1 = await ai.responses.create({ ...base, input: [{ type: "message", role: "user", content: [{ type: "input_text", text: QUESTION }] }],
    k3_canned: { text: canned } });
  eq(r1.output.map((i) => i.type), ["reasoning", "custom_tool_call", "function_call"], "items");
  const [rs, patch, spawn] = r1.output;
  eq(Buffer.from(rs.encrypted_content.replace(/^k3-reasoning:/, ""), "base64").toString(), "Patch, then spawn.", "encrypted_content holds the reasoning");
  eq([patch.name, patch.input, patch.namespace], ["apply_patch", PATCH, undefined], "custom_tool_call");
  assert(/^call_/.test(patch.call_id) && /^ctc_/.test(patch.id), "custom call ids");
  eq([spawn.name, spawn.namespace, JSON.parse(spawn.arguments)], ["spawn", "agents", { path: "a.txt", edits: [] }], "namespaced function_call");
  // Streamed: the custom call's input arrives whole in one delta, then .done; the items equal r1's.
  const s = await responsesStream({ ...base, input: QUESTION, k3_canned: { text: canned } });
  const inputs = s.events.filter((e) => e.type.startsWith("response.custom_tool_call_input."));
  eq(inputs.map((e) => [e.type, e.delta ?? e.input]), [["response.custom_tool_call_input.delta", PATCH], ["response.custom_tool_call_input.done", PATCH]],
    "custom input events");
  const strip = (items) => items.map(({ id, call_id, ...rest }) => rest);
  eq(strip(s.final.output), strip(r1.output), "streamed items = non-streamed items");
  // The client sends the items back (reasoning with only its encrypted_content, as a client that
  // keeps nothing else would) with both outputs: the history renders as the chat route's.
  const input = [
    { role: "user", content: QUESTION },
    { type: "reasoning", summary: [], encrypted_content: rs.encrypted_content },
    patch, spawn,
    { type: "custom_tool_call_output", call_id: patch.call_id, output: "Done!" },
    { type: "function_call_output", call_id: spawn.call_id, output: "spawned" },
  ];
  const r2 = await ai.responses.create({ ...base, input, k3_canned: { text: THINK("Both done.", "Patched and spawned.") } });
  eq(r2.output_text, "Patched and spawned.", "final output_text");
  const history = [
    { role: "user", content: QUESTION },
    { role: "assistant", content: "", reasoning_content: "Patch, then spawn.", tool_calls: [
      { id: patch.call_id, type: "function", function: { name: "apply_patch", arguments: JSON.stringify({ input: PATCH }) } },
      { id: spawn.call_id, type: "function", function: { name: "agents.spawn", arguments: spawn.arguments } }] },
    { role: "tool", tool_call_id: patch.call_id, content: "Done!" },
    { role: "tool", tool_call_id: spawn.call_id, content: "spawned" },
  ];
  eq(r2.usage.input_tokens, (await tokens(render(history, { tools: chatTools }))).length, "input_tokens = jinja rendering with the tools as the model sees them");
  // allowed_tools offers only the listed ones; a foreign reasoning item is opaque (ignored).
  const r3 = await L.postJson(srv, "/v1/responses/input_tokens", { ...base, input: [{ type: "reasoning", summary: [], encrypted_content: "gAAAAB-foreign" },
    { role: "user", content: QUESTION }], tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "exec_command" }] } });
  eq(r3.status, 200, "input_tokens status " + r3.text);
  eq(r3.body.input_tokens, (await tokens(render([{ role: "user", content: QUESTION }], { tools: [chatTools[2]], tool_choice: "required" }))).length,
    "allowed_tools: only exec_command, required");
});

test("error shapes: Anthropic's on /v1/messages, OpenAI's on /v1/responses; SDK error classes", async () => {
  let err = null;
  try {
    await claude.messages.create({ model: MODEL, messages: [{ role: "user", content: "Hi" }] });
  } catch (e) {
    err = e;
  }
  assert(err instanceof Anthropic.BadRequestError, "BadRequestError");
  eq(err.status, 400, "status");
  eq(err.error.type, "error", "body type");
  eq(err.type, "invalid_request_error", "error type");
  assert(/'max_tokens' is required/.test(err.error.error.message), err.error.error.message);
  err = null;
  try {
    await ai.responses.create({ model: MODEL, input: "Hi", previous_response_id: "resp_123" });
  } catch (e) {
    err = e;
  }
  assert(err instanceof L.OpenAI.BadRequestError, "openai BadRequestError");
  eq(err.param, "previous_response_id", "param");
  const nf = await L.postJson(srv, "/v1/messages/nope", {});
  eq(nf.status, 404, "unknown route under /v1/messages");
  eq(nf.body.type, "error", "anthropic shape for 404");
  eq(nf.body.error.type, "not_found_error", "not_found_error");
  const wrong = await fetch(srv.url + "/v1/messages");
  eq(wrong.status, 405, "GET /v1/messages");
  eq((await wrong.json()).error.type, "invalid_request_error", "405 in anthropic shape");
});

test("API key: x-api-key (Anthropic SDK) and Bearer both accepted; a wrong key is a 401 in each shape", async () => {
  const s2 = await L.startServer(opt.k3, modelPath, ["--api-key", "s3cret"]);
  try {
    const ok = new Anthropic({ apiKey: "s3cret", baseURL: s2.url, maxRetries: 0 });
    const r = await ok.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }] });
    eq(r.type, "message", "x-api-key accepted");
    const viaBearer = new Anthropic({ authToken: "s3cret", apiKey: null, baseURL: s2.url, maxRetries: 0 });
    eq((await viaBearer.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }] })).type, "message",
      "Bearer on /v1/messages");
    eq((await L.client(s2, { apiKey: "s3cret" }).responses.create({ model: MODEL, input: "Hi", max_output_tokens: 2 })).object,
      "response", "Bearer on /v1/responses");
    let err = null;
    try {
      await new Anthropic({ apiKey: "nope", baseURL: s2.url, maxRetries: 0 }).messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "Hi" }] });
    } catch (e) {
      err = e;
    }
    assert(err instanceof Anthropic.AuthenticationError, "AuthenticationError");
    eq(err.type, "authentication_error", "anthropic error type");
    const none = await L.postJson(s2, "/v1/responses", { input: "Hi" });
    eq(none.status, 401, "no key");
    eq(none.body.error.type, "authentication_error", "openai shape");
    assert(/x-api-key/.test(none.body.error.message), none.body.error.message);
  } finally {
    await s2.stop();
  }
});

await L.run("e2e_agents", async () => {
  const st = await srv.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  if (st.code !== 0) {
    console.log("FAIL main server exit " + JSON.stringify(st) + "\n" + srv.log());
    return false;
  }
});
