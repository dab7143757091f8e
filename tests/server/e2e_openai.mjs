// End to end with the official `openai` npm client against `k3 serve` on a synthetic model:
// chat (non-streaming and streaming), reasoning and tool calls through canned output, a tools
// round trip, usage numbers (checked against @huggingface/jinja's rendering of the same
// conversation), stop sequences, seeded reproducibility (also under concurrency), completions,
// raw-id /completion, tokenize/detokenize, API keys, overload 503, client disconnect, queue hygiene,
// context overflow, shutdown.
//
//   node tests/server/e2e_openai.mjs [--k3 build-srv/bin/k3]
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import * as L from "./lib.mjs";

const { assert, eq, test } = L;
const opt = L.args();
const dir = L.tmpdir();
const modelPath = L.makeTinyModel(opt.k3, dir);
const srv = await L.startServer(opt.k3, modelPath, ["-P", "4", "-c", "2048", "--test-canned"]);
const ai = L.client(srv);
const MODEL = "k3-synthetic-tiny";

const k3Template = new L.Template(fs.readFileSync(path.join(L.root, "data/templates/kimi-k3.jinja"), "utf8"));
// What the server renders: llama.cpp's normalization (developer -> system, JSON-string tool
// arguments parsed into objects), then the template with a generation prompt.
function render(messages, extra = {}) {
  const msgs = structuredClone(messages).map((m) => {
    if (m.role === "developer") m.role = "system";
    for (const c of m.tool_calls || []) {
      const fn = c.function || c;
      if (typeof fn.arguments === "string") {
        try {
          const v = JSON.parse(fn.arguments);
          if (v && typeof v === "object" && !Array.isArray(v)) fn.arguments = v;
        } catch {}
      }
    }
    return m;
  });
  return k3Template.render({ messages: msgs, add_generation_prompt: true, ...extra });
}
async function ntokens(text) {
  const r = await L.postJson(srv, "/tokenize", { content: text });
  eq(r.status, 200, "tokenize status");
  return r.body.tokens.length;
}

const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get weather",
      parameters: {
        type: "object",
        properties: { city: { type: "string" }, days: { type: "integer" } },
        required: ["city"],
      },
    },
  },
];
const THINK_REPLY =
  "I think so.<|close|>think<|sep|><|open|>response<|sep|>Hello there!<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
const TOOL_CALL =
  'Need the weather tool.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>2<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>';
const FINAL =
  "Sunny, so no umbrella.<|close|>think<|sep|><|open|>response<|sep|>It is sunny in Paris.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
const USER = [{ role: "user", content: "Hi there, how are you?" }];

async function collect(stream) {
  const out = { chunks: [], content: "", reasoning: "", calls: [], finish: null, usage: null, ids: new Set() };
  for await (const ch of stream) {
    out.chunks.push(ch);
    out.ids.add(ch.id);
    if (ch.usage) out.usage = ch.usage;
    for (const c of ch.choices) {
      const d = c.delta || {};
      if (d.content) out.content += d.content;
      if (d.reasoning_content) out.reasoning += d.reasoning_content;
      for (const tc of d.tool_calls || []) {
        if (!out.calls[tc.index]) out.calls[tc.index] = { id: "", name: "", arguments: "" };
        const slot = out.calls[tc.index];
        if (tc.id) slot.id = tc.id;
        if (tc.function?.name) slot.name += tc.function.name;
        if (tc.function?.arguments) slot.arguments += tc.function.arguments;
      }
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

test("GET /v1/models lists the model", async () => {
  const list = await ai.models.list();
  eq(list.data.map((m) => m.id), [MODEL], "model ids");
  const h = await L.getJson(srv, "/health");
  eq(h.status, 200, "health status");
  eq(h.body.status, "ok", "health");
});

test("non-streaming chat: message, finish_reason, usage match the template rendering", async () => {
  const r = await ai.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 12, temperature: 0, ignore_eos: true });
  eq(r.object, "chat.completion", "object");
  assert(r.id.startsWith("chatcmpl-"), "id");
  const c = r.choices[0];
  eq(c.message.role, "assistant", "role");
  eq(c.finish_reason, "length", "finish_reason");
  eq(r.usage.completion_tokens, 12, "completion_tokens");
  eq(r.usage.prompt_tokens, await ntokens(render(USER)), "prompt_tokens = tokens of the rendered prompt");
  eq(r.usage.total_tokens, r.usage.prompt_tokens + 12, "total_tokens");
});

test("reasoning and content are split (canned output)", async () => {
  const r = await ai.chat.completions.create({ model: MODEL, messages: USER, k3_canned: { text: THINK_REPLY } });
  const m = r.choices[0].message;
  eq(m.reasoning_content, "I think so.", "reasoning_content");
  eq(m.content, "Hello there!", "content");
  eq(r.choices[0].finish_reason, "stop", "finish_reason");
  eq(r.usage.completion_tokens, (await ntokens(THINK_REPLY)) - 1, "completion_tokens (end token not counted)");
});

test("reasoning_format none: the think text goes to content", async () => {
  const r = await ai.chat.completions.create({ model: MODEL, messages: USER, reasoning_format: "none", k3_canned: { text: THINK_REPLY } });
  eq(r.choices[0].message.content, "I think so.Hello there!", "content");
  eq(r.choices[0].message.reasoning_content, undefined, "no reasoning_content");
});

test("streaming chat: well-formed chunks that add up to the non-streaming answer", async () => {
  const body = { model: MODEL, messages: USER, k3_canned: { text: THINK_REPLY } };
  const s = await collect(await ai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }));
  eq(s.ids.size, 1, "one id for every chunk");
  eq(s.chunks[0].choices[0].delta.role, "assistant", "first chunk has the role");
  eq(s.reasoning, "I think so.", "streamed reasoning");
  eq(s.content, "Hello there!", "streamed content");
  eq(s.finish, "stop", "finish_reason");
  const plain = await ai.chat.completions.create(body);
  eq(s.usage, plain.usage, "usage chunk = non-streaming usage");
  for (const ch of s.chunks) {
    eq(ch.object, "chat.completion.chunk", "object");
    const txt = JSON.stringify(ch);
    assert(!/<\|(open|close|sep|end_of_msg)\|>/.test(txt), "no special token in a chunk: " + txt);
  }
  assert(s.chunks.length >= 4, "several chunks");
});

test("tools round trip: a call, the tool result, the final answer", async () => {
  const r1 = await ai.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Weather in Paris?" }],
    tools: TOOLS,
    k3_canned: { text: TOOL_CALL },
  });
  const c1 = r1.choices[0];
  eq(c1.finish_reason, "tool_calls", "finish_reason");
  eq(c1.message.content, null, "content is null");
  eq(c1.message.reasoning_content, "Need the weather tool.", "reasoning");
  eq(c1.message.tool_calls.length, 1, "one call");
  const call = c1.message.tool_calls[0];
  eq(call.type, "function", "type");
  eq(call.function.name, "get_weather", "name");
  eq(JSON.parse(call.function.arguments), { city: "Paris", days: 2 }, "arguments");
  assert(/^call_/.test(call.id), "call id");

  const history = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: null, reasoning_content: c1.message.reasoning_content, tool_calls: c1.message.tool_calls },
    { role: "tool", tool_call_id: call.id, content: "Sunny, 24 C" },
  ];
  const r2 = await ai.chat.completions.create({ model: MODEL, messages: history, tools: TOOLS, k3_canned: { text: FINAL } });
  eq(r2.choices[0].message.content, "It is sunny in Paris.", "final content");
  eq(r2.choices[0].finish_reason, "stop", "final finish_reason");
  const rendered = render(history, { tools: TOOLS });
  assert(rendered.includes('<|open|>message role="tool" tool="get_weather" index="1"<|sep|>Sunny, 24 C'), "tool result rendered");
  eq(r2.usage.prompt_tokens, await ntokens(rendered), "prompt_tokens of the round trip");
});

test("tools, streaming: call deltas assemble into the same call", async () => {
  const s = await collect(
    await ai.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Weather in Paris?" }],
      tools: TOOLS,
      stream: true,
      k3_canned: { text: TOOL_CALL },
    }),
  );
  eq(s.finish, "tool_calls", "finish_reason");
  eq(s.calls.length, 1, "one call");
  eq(s.calls[0].name, "get_weather", "name");
  eq(JSON.parse(s.calls[0].arguments), { city: "Paris", days: 2 }, "arguments");
  assert(/^call_/.test(s.calls[0].id), "id");
  eq(s.content, "", "no content");
});

test("tool_choice none: a tools section stays visible as content, nothing dropped", async () => {
  const r = await ai.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "Weather?" }],
    tools: TOOLS,
    tool_choice: "none",
    k3_canned: { text: TOOL_CALL },
  });
  const m = r.choices[0].message;
  assert(!m.tool_calls || m.tool_calls.length === 0, "no tool calls");
  assert((m.content || "").includes("Paris"), "unparsed call kept in content: " + m.content);
});

test("stop sequences cut the text and report stop", async () => {
  const canned = { text: "Hello world STOP and more text<|close|>response<|sep|><|end_of_msg|>" };
  const base = { model: MODEL, messages: USER, chat_template_kwargs: { thinking: false }, k3_canned: canned };
  const r = await ai.chat.completions.create({ ...base, stop: ["STOP", "more"] });
  eq(r.choices[0].message.content, "Hello world ", "content before the stop string");
  eq(r.choices[0].finish_reason, "stop", "finish_reason");
  assert(r.usage.completion_tokens < (await ntokens(canned.text)) - 1, "generation stopped early");
  const s = await collect(await ai.chat.completions.create({ ...base, stop: "world", stream: true }));
  eq(s.content, "Hello ", "streamed content before the stop string");
  eq(s.finish, "stop", "streamed finish_reason");
  const none = await ai.chat.completions.create({ ...base, stop: ["absent"] });
  eq(none.choices[0].message.content, "Hello world STOP and more text", "no stop string found");
});

test("seeded sampling is reproducible (streaming and not)", async () => {
  const body = { model: MODEL, messages: USER, temperature: 1.0, top_p: 1, max_tokens: 40, ignore_eos: true };
  const a = await ai.chat.completions.create({ ...body, seed: 1234 });
  const b = await ai.chat.completions.create({ ...body, seed: 1234 });
  const c = await ai.chat.completions.create({ ...body, seed: 4321 });
  const text = (r) => (r.choices[0].message.reasoning_content || "") + "|" + (r.choices[0].message.content || "");
  eq(text(a), text(b), "same seed, same text");
  assert(text(a) !== text(c), "another seed, another text");
  const s = await collect(await ai.chat.completions.create({ ...body, seed: 1234, stream: true }));
  eq(s.reasoning + "|" + s.content, text(a), "streamed with the same seed");
});

test("concurrent seeded requests give the tokens they give one at a time", async () => {
  // Different prompt and output lengths, so prompt chunks and decode steps of several sequences
  // share the server's batches (-P 4).
  const bodies = [0, 1, 2, 3].map((i) => ({
    prompt: "the keeper watched ships ".repeat(1 + 12 * i),
    n_predict: 12 + 9 * i,
    seed: 500 + i,
    temperature: 1.0,
    ignore_eos: true,
    return_tokens: true,
  }));
  const alone = [];
  for (const b of bodies) alone.push(await L.postJson(srv, "/completion", b));
  const together = await Promise.all(bodies.map((b) => L.postJson(srv, "/completion", b)));
  for (let i = 0; i < bodies.length; i++) {
    eq(alone[i].status, 200, `request ${i} alone`);
    eq(together[i].status, 200, `request ${i} concurrent`);
    eq(alone[i].body.tokens.length, bodies[i].n_predict, `request ${i} length`);
    eq(together[i].body.tokens, alone[i].body.tokens, `request ${i} tokens`);
  }
  assert(JSON.stringify(alone[0].body.tokens) !== JSON.stringify(alone[1].body.tokens), "different requests differ");
  const metrics = await (await fetch(srv.url + "/metrics")).text();
  const count = (name) => Number(new RegExp(name + " (\\d+)").exec(metrics)[1]);
  assert(count("k3_batch_sequences_total") > count("k3_forward_passes_total"), "several sequences per forward pass");
});

test("json_object response format reaches the template and the content parses", async () => {
  const canned = { text: '{"answer": 42, "list": [1, 2]}<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>' };
  const msgs = [{ role: "user", content: "JSON please" }];
  const r = await ai.chat.completions.create({
    model: MODEL,
    messages: msgs,
    response_format: { type: "json_object" },
    chat_template_kwargs: { thinking: false },
    k3_canned: canned,
  });
  eq(JSON.parse(r.choices[0].message.content), { answer: 42, list: [1, 2] }, "JSON content");
  const rendered = render(msgs, { response_format: { type: "json_object" }, thinking: false });
  assert(rendered.includes('type="response-format"'), "response-format note rendered");
  eq(r.usage.prompt_tokens, await ntokens(rendered), "prompt_tokens");
});

test("/v1/completions, plain and streaming", async () => {
  const r = await ai.completions.create({ model: MODEL, prompt: "The lighthouse", max_tokens: 8, temperature: 0, ignore_eos: true });
  eq(r.object, "text_completion", "object");
  eq(r.usage.completion_tokens, 8, "completion_tokens");
  eq(r.usage.prompt_tokens, await ntokens("The lighthouse"), "prompt_tokens");
  eq(r.choices[0].finish_reason, "length", "finish_reason");
  let text = "",
    finish = null;
  for await (const ch of await ai.completions.create({
    model: MODEL, prompt: "The lighthouse", max_tokens: 8, temperature: 0, ignore_eos: true, stream: true,
  })) {
    text += ch.choices[0]?.text || "";
    finish = ch.choices[0]?.finish_reason || finish;
  }
  eq(text, r.choices[0].text, "streamed text = non-streaming text (greedy)");
  eq(finish, "length", "streamed finish_reason");
});

test("/completion with raw token ids; /tokenize and /detokenize", async () => {
  const hello = await L.postJson(srv, "/tokenize", { content: "Hello, 世界! <|open|>", with_pieces: true });
  eq(hello.status, 200, "tokenize");
  const ids = hello.body.tokens.map((t) => t.id);
  const back = await L.postJson(srv, "/detokenize", { tokens: ids });
  eq(back.body.content, "Hello, 世界! <|open|>", "round trip");
  const canned = (await L.postJson(srv, "/tokenize", { content: "abc def" })).body.tokens;
  const r = await L.postJson(srv, "/completion", { prompt: ids, n_predict: 50, return_tokens: true, k3_canned: { ids: canned } });
  eq(r.status, 200, "status");
  eq(r.body.tokens, canned, "generated ids");
  eq(r.body.content, "abc def", "content");
  eq(r.body.tokens_evaluated, ids.length, "tokens_evaluated");
  eq(r.body.stop_type, "eos", "stop_type");
  const bad = await L.postJson(srv, "/completion", { prompt: [1, 99999] });
  eq(bad.status, 400, "bad id");
  eq(bad.body.error.param, "prompt[1]", "param names the element");
});

test("/completion streaming: content events, then a final event with stop", async () => {
  const r = await fetch(srv.url + "/completion", {
    method: "POST",
    body: JSON.stringify({ prompt: "abc", n_predict: 6, stream: true, return_tokens: true, k3_canned: { text: "one two three" } }),
  });
  eq(r.headers.get("content-type"), "text/event-stream", "content type");
  const events = (await r.text()).split("\n\n").filter((e) => e).map((e) => JSON.parse(e.replace(/^data: /, "")));
  const last = events.at(-1);
  eq(last.stop, true, "last event stops");
  eq(last.stop_type, "limit", "stop_type");
  eq(events.map((e) => e.content).join(""), (await L.postJson(srv, "/detokenize", { tokens: events.flatMap((e) => e.tokens) })).body.content, "content = tokens");
  eq(events.flatMap((e) => e.tokens).length, 6, "6 tokens");
});

test("--chat-template-file overrides the template; a broken one stops the server at start", async () => {
  const good = path.join(dir, "t.jinja");
  fs.writeFileSync(good, "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>");
  const s5 = await L.startServer(opt.k3, modelPath, ["--chat-template-file", good]);
  try {
    const r = await L.client(s5).chat.completions.create({ model: MODEL, messages: USER, max_tokens: 1 });
    eq(r.usage.prompt_tokens, await ntokens("<user>" + USER[0].content + "<assistant>"), "prompt from the custom template");
  } finally {
    await s5.stop();
  }
  const empty = path.join(dir, "empty.jinja");
  fs.writeFileSync(empty, "{% if false %}x{% endif %}");
  const s6 = await L.startServer(opt.k3, modelPath, ["--chat-template-file", empty]);
  try {
    const r = await L.postJson(s6, "/v1/chat/completions", { messages: USER });
    eq(r.status, 400, "a template that renders nothing");
    assert(/prompt is empty/.test(r.body.error.message), r.body.error.message);
  } finally {
    await s6.stop();
  }
  const bad = path.join(dir, "bad.jinja");
  fs.writeFileSync(bad, "line one\n{% for x in %}");
  let err = null;
  try {
    await L.startServer(opt.k3, modelPath, ["--chat-template-file", bad]);
  } catch (e) {
    err = e;
  }
  assert(err && /bad\.jinja:2/.test(err.message), "error names the template line: " + (err && err.message));
});

test("context overflow is a 400 with a clear message", async () => {
  let err = null;
  try {
    await ai.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "word ".repeat(3000) }] });
  } catch (e) {
    err = e;
  }
  assert(err && err.status === 400, "400, got " + (err && err.status));
  assert(/does not fit the context of 2048 tokens/.test(err.message), err.message);
});

test("validation errors come back as BadRequestError naming the field", async () => {
  for (const [body, param] of [
    [{ model: MODEL, messages: USER, temperature: "warm" }, "temperature"],
    [{ model: MODEL, messages: USER, bogus_field: 1 }, "bogus_field"],
    [{ model: MODEL, messages: [{ role: "user" }] }, "messages[0].content"],
  ]) {
    let err = null;
    try {
      await ai.chat.completions.create(body);
    } catch (e) {
      err = e;
    }
    assert(err instanceof L.OpenAI.BadRequestError, "BadRequestError for " + param);
    eq(err.param, param, "param");
  }
});

// A second server: API key, one slot, no queue.
test("API key: missing or wrong -> 401, right -> 200; /health is open", async () => {
  const s2 = await L.startServer(opt.k3, modelPath, ["--api-key", "s3cret"]);
  try {
    for (const key of ["wrong", "s3cret"]) {
      let status = 200;
      try {
        await L.client(s2, { apiKey: key }).chat.completions.create({ model: MODEL, messages: USER, max_tokens: 2 });
      } catch (e) {
        status = e.status;
      }
      eq(status, key === "s3cret" ? 200 : 401, "status with key " + key);
    }
    const none = await L.postJson(s2, "/v1/chat/completions", { messages: USER });
    eq(none.status, 401, "no key");
    eq(none.body.error.type, "authentication_error", "error type");
    eq((await L.getJson(s2, "/health")).status, 200, "health without key");
    eq((await fetch(s2.url + "/metrics")).status, 401, "metrics need the key");
  } finally {
    await s2.stop();
  }
});

test("overload -> 503 with Retry-After; client disconnect frees the slot at once", async () => {
  const s3 = await L.startServer(opt.k3, modelPath, ["-P", "1", "--queue", "0", "--test-canned"]);
  try {
    const c3 = L.client(s3);
    const ac = new AbortController();
    const long = await c3.chat.completions.create(
      { model: MODEL, messages: USER, max_tokens: 4000, ignore_eos: true, stream: true },
      { signal: ac.signal },
    );
    const it = long[Symbol.asyncIterator]();
    await it.next();
    await it.next();
    const busy = await L.postJson(s3, "/v1/chat/completions", { messages: USER, max_tokens: 2 });
    eq(busy.status, 503, "busy status");
    eq(busy.headers.get("retry-after"), "1", "Retry-After");
    eq(busy.body.error.type, "overloaded_error", "error type");
    let err = null;
    try {
      await c3.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 2 });
    } catch (e) {
      err = e;
    }
    eq(err && err.status, 503, "openai client sees 503");

    const t0 = Date.now();
    ac.abort();
    let idle = false;
    while (Date.now() - t0 < 2000) {
      const h = await L.getJson(s3, "/health");
      if (h.body.slots_idle === 1) {
        idle = true;
        break;
      }
      await L.sleep(20);
    }
    assert(idle, "slot freed within 2 s of the disconnect");
    console.log(`     slot freed ${Date.now() - t0} ms after the client disconnected`);
    // The same for a non-streaming request: the handler notices the closed connection.
    const ac2 = new AbortController();
    const pending = c3.chat.completions
      .create({ model: MODEL, messages: USER, max_tokens: 4000, ignore_eos: true }, { signal: ac2.signal })
      .catch((e) => e);
    let busyNow = false;
    for (let i = 0; i < 100 && !busyNow; i++) {
      busyNow = (await L.getJson(s3, "/health")).body.slots_processing === 1;
      if (!busyNow) await L.sleep(10);
    }
    assert(busyNow, "non-streaming request generating");
    const t1 = Date.now();
    ac2.abort();
    await pending;
    let idle2 = false;
    while (Date.now() - t1 < 2000 && !idle2) {
      idle2 = (await L.getJson(s3, "/health")).body.slots_idle === 1;
      if (!idle2) await L.sleep(20);
    }
    assert(idle2, "slot freed after a non-streaming client disconnected");
    console.log(`     non-streaming: slot freed ${Date.now() - t1} ms after the disconnect`);
    const ok = await c3.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 3 });
    eq(ok.choices[0].finish_reason === "length" || ok.choices[0].finish_reason === "stop", true, "served again");
    const metrics = await (await fetch(s3.url + "/metrics")).text();
    assert(/k3_generations_cancelled_total [1-9]/.test(metrics), "cancel counted");
    assert(/k3_generations_rejected_total [1-9]/.test(metrics), "rejection counted");
    assert(/k3_requests_total\{route="\/v1\/chat\/completions",code="503"\} 2/.test(metrics), "503s counted");
  } finally {
    await s3.stop();
  }
});

test("queue hygiene: a queued stream sends nothing until it runs; a client that leaves the queue frees its place at once", async () => {
  const s7 = await L.startServer(opt.k3, modelPath, ["-P", "1", "--queue", "2"]);
  // A raw socket per queued request, so that every byte the server sends is seen.
  const open = (body) => {
    const sock = net.connect(s7.port, "127.0.0.1");
    sock.bytes = 0;
    sock.on("data", (d) => (sock.bytes += d.length));
    sock.on("error", () => {});
    const json = JSON.stringify(body);
    sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`);
    return sock;
  };
  const until = async (what, cond) => {
    for (let i = 0; i < 500; i++) {
      const h = (await L.getJson(s7, "/health")).body;
      if (cond(h)) return h;
      await L.sleep(10);
    }
    throw new Error("timed out waiting for " + what);
  };
  try {
    const ac = new AbortController();
    const running = await L.client(s7).chat.completions.create(
      { model: MODEL, messages: USER, max_tokens: 4000, ignore_eos: true, stream: true },
      { signal: ac.signal },
    );
    const it = running[Symbol.asyncIterator]();
    await it.next();
    const streamQueued = open({ messages: USER, max_tokens: 4, stream: true });
    const plainQueued = open({ messages: USER, max_tokens: 4 });
    await until("two queued requests", (h) => h.queued === 2);
    await L.sleep(300);
    eq(streamQueued.bytes, 0, "bytes sent to a queued stream");
    const t0 = Date.now();
    streamQueued.destroy();
    await until("the stream to leave the queue", (h) => h.queued === 1);
    plainQueued.destroy();
    await until("the plain request to leave the queue", (h) => h.queued === 0);
    console.log(`     both left the queue ${Date.now() - t0} ms after their clients closed (slot still busy)`);
    // A queued stream gets its first event once it has the slot.
    const next = open({ messages: USER, max_tokens: 4, stream: true });
    await until("a queued stream", (h) => h.queued === 1);
    eq(next.bytes, 0, "bytes sent while queued");
    ac.abort();
    const text = await new Promise((resolve) => {
      let s = "";
      next.on("data", (d) => {
        s += d.toString();
        if (s.includes("[DONE]")) resolve(s);
      });
      setTimeout(() => resolve(s), 10000);
    });
    next.destroy();
    assert(/^HTTP\/1\.1 200/.test(text) && text.includes('"role":"assistant"') && text.includes("[DONE]"), "stream after the queue: " + text.slice(0, 200));
    const m = await (await fetch(s7.url + "/metrics")).text();
    assert(/k3_generations_cancelled_total [3-9]/.test(m), "the two queued and the running one counted as cancelled");
  } finally {
    await s7.stop();
  }
});

test("graceful shutdown: SIGTERM lets an in-flight stream finish, then exits 0", async () => {
  const s4 = await L.startServer(opt.k3, modelPath, ["-P", "2"]);
  const c4 = L.client(s4);
  const stream = await c4.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 1500, ignore_eos: true, stream: true });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  const exited = s4.stop("SIGTERM");
  let finish = null,
    n = 0;
  for (let r = await it.next(); !r.done; r = await it.next()) {
    n++;
    finish = r.value.choices[0]?.finish_reason || finish;
  }
  eq(finish, "length", "the stream completed");
  const st = await exited;
  eq(st.code, 0, "exit code");
  assert(/shutting down/.test(s4.log()) && /stopped/.test(s4.log()), "log mentions shutdown");
});

await L.run("e2e_openai", async () => {
  const st = await srv.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  if (st.code !== 0) {
    console.log("FAIL main server exit " + JSON.stringify(st) + "\n" + srv.log());
    return false;
  }
});
