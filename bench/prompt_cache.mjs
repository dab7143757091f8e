// Prompt-cache benchmark (docs/benchmarks.md, "Prompt cache"): a scripted 5-turn agent
// conversation — a ~3000-token system prompt with a tool, user questions, tool calls and their
// results — against `k3 serve` with the cache (and a --cache-dir) and with --cache-ram 0, one
// server at a time. Each turn is one request with the official openai client for a 16-token reply
// (greedy), which goes into the history; its time to first token is the request's wall time less
// the server's `timings.predicted_ms` (first token to last), so it includes HTTP, rendering,
// tokenizing, restoring and prefill. Each server first answers a short unrelated warm-up request.
// Then the cached server restarts on its --cache-dir and turn 5 is sent again: its state comes
// back from disk.
//
//   node bench/prompt_cache.mjs --k3 build/bin/k3 --model medium.gguf [--threads 2] [--system 3000]
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import * as L from "../tests/server/lib.mjs";

const opt = L.args();
const threads = String(opt.threads || 2);
const systemTokens = Number(opt.system || 3000);
if (!opt.model) throw new Error("--model FILE (make-tiny --preset medium) is required");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "k3-prompt-cache-bench-"));
const cacheDir = path.join(work, "cache");
const common = ["-t", threads, "-c", "8192", "-b", "256"];

// The client's transport: node:http, which has no headers timeout (an uncached turn on a loaded
// host takes longer than the 300 s of Node's own fetch).
function httpFetch(url, init = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(String(url), { method: init.method || "GET", headers: Object.fromEntries(new Headers(init.headers)) }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve(new Response(Buffer.concat(chunks), { status: res.statusCode, headers: res.headers })));
    });
    req.on("error", reject);
    if (init.body) req.write(init.body);
    req.end();
  });
}
const client = (srv) => L.client(srv, { timeout: 24 * 3600 * 1000, fetch: httpFetch });

const TOOLS = [{ type: "function", function: { name: "read_file", description: "Read a file of the project",
  parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } }];
const words = "the keeper of the lighthouse writes down every ship that passes the reef and the weather of each night".split(" ");
const text = (n, seed) => Array.from({ length: n }, (_, i) => words[(i * 7 + seed) % words.length]).join(" ");

async function metrics(srv) {
  const t = await (await fetch(srv.url + "/metrics")).text();
  const get = (name) => Number((new RegExp(`^${name} (\\S+)$`, "m").exec(t) || [0, NaN])[1]);
  return { get };
}

// Text of at least n tokens (words in a fixed order from `seed`).
async function sized(srv, n, seed) {
  let words_ = Math.ceil(n / 4), s = "";
  for (;;) {
    s = text(words_, seed);
    const t = (await L.postJson(srv, "/tokenize", { content: s })).body.tokens.length;
    if (t >= n) return s;
    words_ = Math.ceil(words_ * Math.max(1.05, n / t));
  }
}

async function conversation(srv, label) {
  const ai = client(srv);
  // Warm-up, so that neither server pays for faulting the weights in: a short unrelated prompt.
  await ai.chat.completions.create({ model: "k3", messages: [{ role: "user", content: await sized(srv, 64, 9) }], temperature: 0, max_tokens: 4 });
  const history = [{ role: "system", content: await sized(srv, systemTokens, 1) }];
  const ask = async (max_tokens) => {
    const t0 = performance.now();
    const r = await ai.chat.completions.create({ model: "k3", messages: history, tools: TOOLS, temperature: 0, max_tokens });
    return { ms: performance.now() - t0 - r.timings.predicted_ms, r };
  };
  const turns = [];
  // New input of each turn: a question, a question, a tool result, a question, a tool result.
  const steps = [
    { role: "user", content: await sized(srv, 40, 2) },
    { role: "user", content: await sized(srv, 40, 3) },
    { role: "tool", tool_call_id: "call_1", content: await sized(srv, 200, 4) },
    { role: "user", content: await sized(srv, 40, 5) },
    { role: "tool", tool_call_id: "call_2", content: await sized(srv, 200, 6) },
  ];
  for (let k = 0; k < steps.length; k++) {
    history.push(steps[k]);
    const first = await ask(16);
    turns.push({ turn: k + 1, ttft_ms: first.ms, prompt_tokens: first.r.usage.prompt_tokens,
      cached_tokens: first.r.usage.prompt_tokens_details.cached_tokens });
    console.error(`${label} turn ${k + 1}: TTFT ${first.ms.toFixed(0)} ms, prompt ${first.r.usage.prompt_tokens}, cached ${first.r.usage.prompt_tokens_details.cached_tokens}`);
    const reply = first.r.choices[0].message;
    const msg = { role: "assistant", content: reply.content ?? "", reasoning_content: reply.reasoning_content };
    // Turns 2 and 4 end in a tool call, whose result is the next turn's new input.
    if (k === 1 || k === 3) msg.tool_calls = [{ id: `call_${(k + 1) / 2}`, type: "function",
      function: { name: "read_file", arguments: JSON.stringify({ path: `logs/${k}.txt` }) } }];
    history.push(msg);
  }
  return { turns, history };
}

const results = {};
{
  const srv = await L.startServer(opt.k3, opt.model, [...common, "--cache-dir", cacheDir]);
  const describe = /prompt cache: ([^\n]*)/.exec(srv.log())[1];
  const { turns, history } = await conversation(srv, "cache");
  const m = await metrics(srv);
  results.cache = { turns, describe, ram_bytes: m.get("k3_prompt_cache_ram_bytes"), snapshots: m.get("k3_prompt_cache_snapshots"),
    disk_writes: m.get("k3_prompt_cache_disk_writes_total"), disk_write_s: m.get("k3_prompt_cache_disk_write_seconds_total"),
    disk_bytes: m.get("k3_prompt_cache_disk_bytes") };
  await srv.stop();
  // After a restart: turn 5's prompt again, restored from the disk tier.
  const again = await L.startServer(opt.k3, opt.model, [...common, "--cache-dir", cacheDir]);
  history.pop();
  const t0 = performance.now();
  const r = await client(again).chat.completions.create({ model: "k3", messages: history, tools: TOOLS, temperature: 0, max_tokens: 16 });
  const m2 = await metrics(again);
  results.restart = { ttft_ms: performance.now() - t0 - r.timings.predicted_ms, prompt_tokens: r.usage.prompt_tokens, cached_tokens: r.usage.prompt_tokens_details.cached_tokens,
    disk_loads: m2.get("k3_prompt_cache_disk_loads_total"), disk_load_s: m2.get("k3_prompt_cache_disk_load_seconds_total") };
  console.error(`restart turn 5: TTFT ${results.restart.ttft_ms.toFixed(0)} ms, cached ${results.restart.cached_tokens}`);
  await again.stop();
}
{
  const srv = await L.startServer(opt.k3, opt.model, [...common, "--cache-ram", "0"]);
  results.off = { turns: (await conversation(srv, "off")).turns };
  await srv.stop();
}
fs.rmSync(work, { recursive: true, force: true });

console.log("| turn | prompt tokens | cached | TTFT with cache | TTFT `--cache-ram 0` | ratio |");
console.log("|---|---|---|---|---|---|");
for (let k = 0; k < results.cache.turns.length; k++) {
  const a = results.cache.turns[k], b = results.off.turns[k];
  console.log(`| ${a.turn} | ${a.prompt_tokens} | ${a.cached_tokens} | ${a.ttft_ms.toFixed(0)} ms | ${b.ttft_ms.toFixed(0)} ms | ${(a.ttft_ms / b.ttft_ms).toFixed(3)} |`);
}
console.log(JSON.stringify(results, null, 1));
