// Hostile input against `k3 serve`: malformed HTTP, slowloris-style partial requests, huge and
// endless bodies, broken JSON, deep nesting, invalid UTF-8, wrong types, absurd limits, bad
// token ids, template errors, bad API keys, connection floods. Every request must get the
// expected 4xx (or be closed, where no request ever arrived), and after each one the server must
// still answer /health; at the end it must shut down cleanly.
//
//   node tests/server/hostile.mjs [--k3 build-srv/bin/k3]
import fs from "node:fs";
import net from "node:net";
import * as L from "./lib.mjs";

const { assert, eq } = L;
const opt = L.args();
const dir = L.tmpdir();
const modelPath = L.makeTinyModel(opt.k3, dir);
const KEY = "hostile-key";
const srv = await L.startServer(opt.k3, modelPath, [
  "-P", "2", "-c", "512", "--timeout", "2", "--idle-timeout", "2", "--max-body-mb", "1", "--api-key", KEY,
  "--http-threads", "24",
]);
const AUTH = { authorization: "Bearer " + KEY };
const rss0 = L.rssKiB(srv.pid);

// Sends `chunks` on a raw connection (`gapMs` between them) and reads until the server closes
// or `waitMs` passes (or, unless untilClose, a whole response has come). Returns {status, text,
// closed, ms, count: responses seen}.
function raw(chunks, { gapMs = 0, waitMs = 6000, untilClose = false } = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const sock = net.connect(srv.port, "127.0.0.1");
    let data = Buffer.alloc(0),
      done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const text = data.toString("latin1");
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      const count = (text.match(/(^|\r\n\r\n|\})HTTP\/1\.1 \d{3}/g) || []).length;
      resolve({ status: m ? Number(m[1]) : 0, text, closed, ms: Date.now() - t0, count });
    };
    const timer = setTimeout(() => finish(false), waitMs);
    sock.on("data", (d) => {
      data = Buffer.concat([data, d]);
      // A complete response (headers + Content-Length bytes) is enough; keep-alive would wait.
      const text = data.toString("latin1");
      const end = text.indexOf("\r\n\r\n");
      const cl = /\r\ncontent-length: *(\d+)/i.exec(text);
      if (!untilClose && end >= 0 && cl && data.length >= end + 4 + Number(cl[1])) finish(false);
    });
    sock.on("end", () => finish(true));
    sock.on("close", () => finish(true));
    sock.on("error", () => {});
    sock.on("connect", async () => {
      for (const c of chunks) {
        if (done || sock.destroyed) break;
        sock.write(c);
        if (gapMs) await L.sleep(gapMs);
      }
    });
  });
}
const post = (path, body, headers = {}) => L.postJson(srv, path, body, { ...AUTH, ...headers });
const chat = (body) => post("/v1/chat/completions", body);
const USER = [{ role: "user", content: "Hi" }];
const req = (method, path, body = "", headers = "") =>
  `${method} ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n${headers}` +
  (body !== null ? `Content-Length: ${Buffer.byteLength(body)}\r\n` : "") + `\r\n${body ?? ""}`;

const cases = [];
// expect: a status, a list of acceptable statuses, or "closed" (no request ever arrived).
const hostile = (name, expect, fn, check) => cases.push({ name, expect, fn, check });

// ---- HTTP framing ----
hostile("garbage request line", 400, () => raw(["HELLO THERE\r\n\r\n"]));
hostile("unknown method", 501, () => raw(["BREW /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"]));
hostile("NUL bytes in the request line", 400, () => raw(["GET /he\0alth HTTP/1.1\r\n\r\n"]));
hostile("HTTP/0.9 request", 400, () => raw(["GET /\r\n\r\n"]));
hostile("URI of 20000 bytes", 414, () => raw([`GET /${"a".repeat(20000)} HTTP/1.1\r\nHost: x\r\n\r\n`]));
hostile("URI of 70000 bytes", 414, () => raw([`GET /${"a".repeat(70000)} HTTP/1.1\r\nHost: x\r\n\r\n`]));
hostile("header line of 70 KiB", 431, () => raw([`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${"b".repeat(70000)}\r\n\r\n`]));
hostile("100000 header lines", 431, () => raw([`GET /health HTTP/1.1\r\n${"X-h: v\r\n".repeat(100000)}\r\n`]));
hostile("Content-Length not a number", 400, () => raw([req("POST", "/tokenize", null, "Content-Length: abc\r\n")]));
hostile("negative Content-Length", 400, () => raw([req("POST", "/tokenize", null, "Content-Length: -5\r\n")]));
hostile("Content-Length: -1", 400, () => raw([req("POST", "/tokenize", null, "Content-Length: -1\r\n")]));
hostile("Content-Length of 10^12", 413, () => raw([req("POST", "/tokenize", null, "Content-Length: 1000000000000\r\n")]));
hostile("POST without Content-Length", 411, () => raw([`POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n\r\n`]));
hostile("malformed chunked body", 400, () =>
  raw([`POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n`]),
);
hostile("endless chunked body (8 MiB against a 1 MiB cap)", 413, () => {
  const chunk = Buffer.alloc(65536, 97);
  const parts = [`POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nTransfer-Encoding: chunked\r\n\r\n`];
  for (let i = 0; i < 128; i++) parts.push("10000\r\n", chunk, "\r\n");
  return raw(parts);
});
// ---- strict framing (RFC 9112): one answer, then the connection closes; what was smuggled behind
// the request is never answered ----
const TAIL = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
const once = (name, expect, bytes) =>
  hostile(name, expect, () => raw([bytes], { untilClose: true }), (r) => {
    assert(r.closed, "connection closed");
    eq(r.count, 1, "responses");
  });
const tokenizeHead = `POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n`;
once("two different Content-Length (17 and 73)", 400,
  tokenizeHead + 'Content-Length: 17\r\nContent-Length: 73\r\n\r\n{"content":"abc"}' + TAIL + "x".repeat(73 - 17 - TAIL.length));
once("two equal Content-Length", 400, req("POST", "/tokenize", '{"content":"abc"}', "Content-Length: 17\r\n") + TAIL);
once("Transfer-Encoding chunked with Content-Length", 400,
  tokenizeHead + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n11\r\n{\"content\":\"abc\"}\r\n0\r\n\r\n" + TAIL);
once("'Content-Length : 5' (space before the colon)", 400,
  tokenizeHead + "Content-Length : 5\r\nContent-Length: 17\r\n\r\n{\"content\":\"abc\"}" + TAIL);
once("header line without a colon", 400, `GET /health HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n`);
once("obsolete line folding", 400, `GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n`);
once("no Host header", 400, `GET /health HTTP/1.1\r\n\r\n`);
once("two Host headers", 400, `GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n`);
once("HTTP/2.0 request line", 505, `GET /health HTTP/2.0\r\nHost: x\r\n\r\n`);
hostile("Transfer-Encoding: gzip gets 501 at once (not the request timeout)", 501, () =>
  raw([tokenizeHead + "Transfer-Encoding: gzip\r\n\r\nxx"], { untilClose: true }), (r) => assert(r.closed, "closed"));
hostile("one chunk of 1 MiB + 1 (cap 1 MiB)", 413, () => raw([tokenizeHead + "Transfer-Encoding: chunked\r\n\r\n100001\r\n"]));
hostile("chunked body of 9 MiB in 1 MiB chunks", 413, () => {
  const parts = [tokenizeHead + "Transfer-Encoding: chunked\r\n\r\n"];
  for (let i = 0; i < 9; i++) parts.push("100000\r\n", Buffer.alloc(1 << 20, 97), "\r\n");
  return raw(parts);
});
hostile("body of 20 MiB with Content-Length", 413, () => post("/v1/chat/completions", "x".repeat(20 << 20)));
hostile("unknown route", 404, async () => {
  const r = await fetch(srv.url + "/v2/secret", { headers: AUTH });
  return { status: r.status, body: await r.json() };
});
hostile("unknown route without a key", 401, () => L.getJson(srv, "/v2/secret"));
hostile("path traversal", [400, 404], () => raw([req("GET", "/../../../../etc/passwd")]));
hostile("wrong method on a known route", 405, async () => {
  const r = await fetch(srv.url + "/v1/chat/completions", { headers: AUTH });
  return { status: r.status };
});

// ---- slowloris and slow bodies (server --timeout 2) ----
hostile("slowloris: headers one line every 0.7 s", 408, () =>
  raw(["POST /v1/chat/completions HTTP/1.1\r\n", ...Array.from({ length: 20 }, (_, i) => `X-Slow-${i}: 1\r\n`)], { gapMs: 700 }),
  (r) => assert(r.ms < 4500, "answered within the request timeout, took " + r.ms + " ms"));
hostile("slowloris: request line never finished", 408, () => raw(["GET /heal"], { waitMs: 6000 }),
  (r) => assert(r.ms < 4500, "answered within the timeout, took " + r.ms + " ms"));
hostile("connection that never sends a byte", "closed", () => raw([], { waitMs: 6000 }),
  (r) => assert(r.closed && r.ms < 4500, "closed within the timeout, took " + r.ms + " ms"));
hostile("slow body: 1 byte every 0.5 s", 408, () =>
  raw([req("POST", "/tokenize", null, "Content-Length: 100\r\n"), ...Array.from({ length: 30 }, () => "a")], { gapMs: 500 }),
  (r) => assert(r.ms < 4500, "answered within the request timeout, took " + r.ms + " ms"));
hostile("body shorter than Content-Length", 408, () => raw([req("POST", "/tokenize", null, "Content-Length: 1000\r\n"), "{\"content\":"]));

// ---- JSON ----
hostile("empty body", 400, () => chat(""));
hostile("broken JSON", 400, () => chat('{"model": "m", "messages": ['));
hostile("trailing garbage after JSON", 400, () => chat('{"messages": []} xyz'));
hostile("top-level array", 400, () => chat("[1,2,3]"));
hostile("top-level string", 400, () => chat('"hello"'));
hostile("NaN literal", 400, () => chat('{"messages": [], "temperature": NaN}'));
hostile("number overflow 1e400", 400, () => chat('{"messages": [{"role":"user","content":"x"}], "temperature": 1e400}'));
hostile("100000 nested arrays", 400, () => chat("[".repeat(100000)));
hostile("100000 nested objects", 400, () => chat('{"a":'.repeat(100000)));
hostile("nesting 70 deep inside messages", 400, () =>
  chat(`{"messages":[{"role":"user","content":${"[".repeat(70)}${"]".repeat(70)}}]}`));
hostile("invalid UTF-8 in a string", 400, () => chat(Buffer.from('{"messages":[{"role":"user","content":"\xff\xfe"}]}', "latin1")));
hostile("overlong UTF-8 encoding", 400, () => chat(Buffer.from('{"messages":[{"role":"user","content":"\xc0\xaf"}]}', "latin1")));
hostile("lone surrogate escape", 400, () => chat('{"messages":[{"role":"user","content":"\\ud800"}]}'));
hostile("control character in a string", 400, () => chat('{"messages":[{"role":"user","content":"a\u0001b"}]}'));

// ---- wrong types and values ----
const bad = (name, body, param) =>
  hostile(name, 400, () => chat(body), (r) => eq(r.body?.error?.param ?? null, param, "param"));
bad("messages is a string", { messages: "hi" }, "messages");
bad("messages is empty", { messages: [] }, "messages");
bad("message is a number", { messages: [5] }, "messages[0]");
bad("role missing", { messages: [{ content: "x" }] }, "messages[0].role");
bad("role invalid", { messages: [{ role: "root", content: "x" }] }, "messages[0].role");
bad("content is a number", { messages: [{ role: "user", content: 42 }] }, "messages[0].content");
bad("image content part", { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] },
  "messages[0].content[0].type");
bad("unknown top-level field", { messages: USER, frobnicate: true }, "frobnicate");
bad("unknown field in a message", { messages: [{ role: "user", content: "x", evil: 1 }] }, "messages[0].evil");
bad("max_tokens negative", { messages: USER, max_tokens: -1 }, "max_tokens");
bad("max_tokens 10^12", { messages: USER, max_tokens: 1e12 }, "max_tokens");
bad("max_tokens fractional", { messages: USER, max_tokens: 2.5 }, "max_tokens");
bad("max_tokens a string", { messages: USER, max_tokens: "10" }, "max_tokens");
bad("temperature negative", { messages: USER, temperature: -0.5 }, "temperature");
bad("top_p above 1", { messages: USER, top_p: 1.5 }, "top_p");
bad("seed 1e30", { messages: USER, seed: 1e30 }, "seed");
bad("stream a string", { messages: USER, stream: "true" }, "stream");
bad("5000 stop strings", { messages: USER, stop: Array.from({ length: 5000 }, (_, i) => "s" + i) }, "stop");
bad("a stop string of 100 KB", { messages: USER, stop: ["x".repeat(100000)] }, "stop");
bad("a stop string that is a number", { messages: USER, stop: [123] }, "stop[0]");
bad("n = 5", { messages: USER, n: 5 }, "n");
bad("tools not an array", { messages: USER, tools: { type: "function" } }, "tools");
bad("tool without a name", { messages: USER, tools: [{ type: "function", function: { parameters: {} } }] },
  "tools[0].function.name");
bad("tool_choice names an unknown tool",
  { messages: USER, tools: [{ type: "function", function: { name: "f" } }], tool_choice: { type: "function", function: { name: "rm_rf" } } },
  "tool_choice.function.name");
bad("response_format xml", { messages: USER, response_format: { type: "xml" } }, "response_format.type");
bad("10000 messages", { messages: Array.from({ length: 10000 }, () => ({ role: "user", content: "x" })) }, "messages");
bad("test-only k3_canned without --test-canned", { messages: USER, k3_canned: { text: "x" } }, "k3_canned");
bad("prompt longer than the context", { messages: [{ role: "user", content: "long ".repeat(2000) }] }, "messages");
bad("template rejects thinking_effort=medium", { messages: USER, chat_template_kwargs: { thinking_effort: "medium" } }, "messages");
bad("tool result without any call", { messages: [{ role: "tool", content: "x" }] }, "messages");
hostile("/completion with an id outside the vocabulary", 400, () => post("/completion", { prompt: [1, 2, 1 << 30] }),
  (r) => eq(r.body.error.param, "prompt[2]", "param"));
hostile("/completion with a negative id", 400, () => post("/completion", { prompt: [-1] }));
hostile("/completion with ids as strings", 400, () => post("/completion", { prompt: ["1", "2"], n_predict: 2 }));
hostile("/completion with 200000 ids", 400, () => post("/completion", { prompt: Array(200000).fill(65) }),
  (r) => assert(/context/.test(r.body.error.message), r.body.error.message));
hostile("/detokenize tokens not an array", 400, () => post("/detokenize", { tokens: "1,2" }));
hostile("/tokenize content missing", 400, () => post("/tokenize", {}));

// ---- authentication ----
hostile("no API key", 401, () => L.postJson(srv, "/v1/chat/completions", { messages: USER }));
hostile("wrong API key", 401, () => L.postJson(srv, "/v1/chat/completions", { messages: USER }, { authorization: "Bearer nope" }));
hostile("API key as Basic auth", 401, () =>
  L.postJson(srv, "/v1/chat/completions", { messages: USER }, { authorization: "Basic " + Buffer.from(KEY).toString("base64") }));
hostile("key prefix only", 401, () => L.postJson(srv, "/v1/chat/completions", { messages: USER }, { authorization: "Bearer " + KEY.slice(0, 5) }));

// ---- floods ----
hostile("200 idle connections, then a request: answered at once", 200, async () => {
  const socks = [];
  for (let i = 0; i < 200; i++) socks.push(net.connect(srv.port, "127.0.0.1").on("error", () => {}));
  await L.sleep(300);
  const t0 = Date.now();
  const r = await raw(["GET /health HTTP/1.1\r\nHost: x\r\n\r\n"], { waitMs: 5000 });
  r.ms = Date.now() - t0;
  for (const s of socks) s.destroy();
  return r;
}, (r) => assert(r.ms < 3000, "answered in " + r.ms + " ms"));
hostile("50 concurrent streams that disconnect at once", 200, async () => {
  const acs = [];
  const streams = [];
  for (let i = 0; i < 50; i++) {
    const ac = new AbortController();
    acs.push(ac);
    streams.push(
      fetch(srv.url + "/v1/chat/completions", {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: JSON.stringify({ messages: USER, stream: true, max_tokens: 400, ignore_eos: true }),
        signal: ac.signal,
      }).then((r) => r.status).catch(() => "aborted"),
    );
  }
  await L.sleep(300);
  for (const ac of acs) ac.abort();
  await Promise.all(streams);
  // every slot must come free
  for (let i = 0; i < 100; i++) {
    const h = await L.getJson(srv, "/health");
    if (h.body.slots_processing === 0 && h.body.queued === 0) return { status: 200 };
    await L.sleep(50);
  }
  return { status: 0 };
});

let n = 0;
for (const c of cases) {
  L.test(`${String(++n).padStart(2)} ${c.name}`, async () => {
    const r = await c.fn();
    const expect = Array.isArray(c.expect) ? c.expect : [c.expect];
    const got = r.status === 0 && r.closed ? "closed" : r.status;
    assert(expect.includes(got), `expected ${expect.join(" or ")}, got ${got} ${(r.text || JSON.stringify(r.body) || "").slice(0, 200)}`);
    if (typeof got === "number" && got >= 400 && r.body) assert(r.body.error && r.body.error.message, "OpenAI error body");
    if (c.check) await c.check(r);
    assert(srv.alive(), "server alive");
    const h = await L.getJson(srv, "/health");
    eq(h.status, 200, "health after the request");
  });
}

L.test("server still serves a normal request; RSS back within 100 MiB of its start (waiting up to a minute)", async () => {
  const r = await chat({ messages: USER, max_tokens: 4 });
  eq(r.status, 200, "status");
  const t0 = Date.now();
  let rss = L.rssKiB(srv.pid);
  while (rss >= rss0 + 100 * 1024 && Date.now() - t0 < 60000) {
    await L.sleep(500);
    rss = L.rssKiB(srv.pid);
  }
  console.log(`     RSS ${rss0} KiB at start, ${rss} KiB after ${cases.length} hostile requests (${Date.now() - t0} ms later)`);
  assert(rss < rss0 + 100 * 1024, "RSS within 100 MiB of the start");
});

await L.run(`hostile (${cases.length} hostile requests)`, async () => {
  const st = await srv.stop();
  if (st.code !== 0) {
    console.log("FAIL server exit " + JSON.stringify(st) + "\n" + srv.log());
    return false;
  }
  fs.rmSync(dir, { recursive: true, force: true });
});
