// Load test: N concurrent streaming clients against `k3 serve --parallel P` for S seconds. Every
// SSE stream is checked strictly (each event a JSON chunk of one id, one finish_reason, the usage
// chunk, then [DONE] and nothing after); the only tolerated failures are deliberate 503s (client
// waits Retry-After and retries). Reports throughput, latency percentiles and the server's RSS
// before, during and after; RSS must come back to the baseline (plus what the prompt cache keeps).
//
//   node tests/server/load.mjs [--k3 build-srv/bin/k3] [--clients 64] [--seconds 60] [--parallel 8]
//        [--model F.gguf] [--threads 1] [--json out.json] [--queue N] [--gen 16-128 (max_tokens range)]
import fs from "node:fs";
import * as L from "./lib.mjs";

const opt = L.args();
const clients = Number(opt.clients ?? 64);
const seconds = Number(opt.seconds ?? 60);
const parallel = Number(opt.parallel ?? 8);
const [genMin, genMax] = String(opt.gen ?? "16-128").split("-").map(Number);
const dir = L.tmpdir();
const modelPath = opt.model ?? L.makeTinyModel(opt.k3, dir);
const extra = ["-P", String(parallel), "-c", "2048", "-t", String(opt.threads ?? 1)];
if (opt.queue !== undefined) extra.push("--queue", String(opt.queue));
const srv = await L.startServer(opt.k3, modelPath, extra);

const words = "the lighthouse keeper watched ships pass under a sky of slate while gulls argued over fish".split(" ");
let rngState = 12345;
const rand = (n) => ((rngState = (rngState * 1103515245 + 12345) % 2147483648) % n);
const prompt = () => Array.from({ length: 5 + rand(60) }, () => words[rand(words.length)]).join(" ");

// Strict SSE reader: returns {ttft, ms, usage, finish, chunks} or throws on any malformation.
async function streamOnce(body) {
  const t0 = performance.now();
  const r = await fetch(srv.url + "/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (r.status === 503) {
    await r.text();
    return { status: 503, retryAfter: Number(r.headers.get("retry-after") || 1) };
  }
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  if (!/^text\/event-stream/.test(r.headers.get("content-type"))) throw new Error("not an event stream");
  const dec = new TextDecoder("utf-8", { fatal: true });
  let buf = "",
    id = null,
    finish = null,
    usage = null,
    done = false,
    ttft = null,
    chunks = 0;
  const onEvent = (ev) => {
    if (done) throw new Error("event after [DONE]: " + ev);
    if (!ev.startsWith("data: ")) throw new Error("not a data event: " + ev.slice(0, 80));
    const data = ev.slice(6);
    if (data === "[DONE]") {
      done = true;
      return;
    }
    const j = JSON.parse(data);
    if (j.error) throw new Error("error event: " + data);
    if (j.object !== "chat.completion.chunk") throw new Error("bad object " + j.object);
    if (id === null) id = j.id;
    else if (j.id !== id) throw new Error("id changed");
    if (usage) throw new Error("chunk after the usage chunk");
    if (j.usage) {
      usage = j.usage;
      if (j.choices.length) throw new Error("usage chunk with choices");
      return;
    }
    chunks++;
    const c = j.choices[0];
    if (c.finish_reason) {
      if (finish) throw new Error("two finish_reasons");
      finish = c.finish_reason;
    } else if (finish) throw new Error("delta after finish_reason");
    const d = c.delta || {};
    if (ttft === null && (d.content || d.reasoning_content)) ttft = performance.now() - t0;
  };
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      onEvent(buf.slice(0, k));
      buf = buf.slice(k + 2);
    }
  }
  buf += dec.decode();
  if (buf.length) throw new Error("trailing bytes: " + JSON.stringify(buf.slice(0, 80)));
  if (!done) throw new Error("stream ended without [DONE]");
  if (!finish) throw new Error("no finish_reason");
  if (!usage) throw new Error("no usage chunk");
  if (finish !== "length" || usage.completion_tokens !== body.max_tokens)
    throw new Error(`expected ${body.max_tokens} tokens and length, got ${usage.completion_tokens} ${finish}`);
  return { status: 200, ttft: ttft ?? performance.now() - t0, ms: performance.now() - t0, usage, chunks };
}

const sleep = L.sleep;
const stats = { ok: 0, r503: 0, errors: [], ttft: [], lat: [], tokens: 0, promptTokens: 0 };
const fresh = () => ({ ok: 0, r503: 0, errors: [], ttft: [], lat: [], tokens: 0, promptTokens: 0 });
async function client(deadline, st) {
  while (performance.now() < deadline) {
    const body = {
      model: "k3",
      messages: [{ role: "user", content: prompt() }],
      max_tokens: genMin + rand(genMax - genMin + 1),
      temperature: 0.8,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    };
    try {
      const r = await streamOnce(body);
      if (r.status === 503) {
        st.r503++;
        await sleep(Math.min(1000, 1000 * r.retryAfter));
        continue;
      }
      st.ok++;
      st.ttft.push(r.ttft);
      st.lat.push(r.ms);
      st.tokens += r.usage.completion_tokens;
      st.promptTokens += r.usage.prompt_tokens;
    } catch (e) {
      st.errors.push(String(e.message || e));
      await sleep(100);
    }
  }
}
async function waitIdle() {
  for (let i = 0; i < 200; i++) {
    const h = await L.getJson(srv, "/health");
    if (h.body.slots_processing === 0 && h.body.queued === 0) break;
    await sleep(50);
  }
  await sleep(1500);
}

// Warm-up at full concurrency (every connection thread, allocator arena and per-thread tokenizer
// scratch buffer gets used), then the baseline RSS.
const warm = fresh();
const warmS = Math.min(10, Math.max(1, seconds / 6));
await Promise.all(Array.from({ length: clients }, () => client(performance.now() + warmS * 1000, warm)));
if (warm.errors.length) stats.errors.push(...warm.errors.map((e) => "warm-up: " + e));
await waitIdle();
const rssBase = L.rssKiB(srv.pid);
const gauge = async (name) => Number((new RegExp(name + " (\\d+)").exec(await (await fetch(srv.url + "/metrics")).text()) || [0, 0])[1]);
const heapInUse = () => gauge("k3_heap_in_use_bytes");
const heapBase = await heapInUse();
// What the prompt cache keeps on purpose (within --cache-ram) is not a leak.
const cacheBase = await gauge("k3_prompt_cache_ram_bytes");

let rssPeak = rssBase;
const rssTimer = setInterval(() => (rssPeak = Math.max(rssPeak, L.rssKiB(srv.pid))), 250);
const t0 = performance.now();
await Promise.all(Array.from({ length: clients }, () => client(t0 + seconds * 1000, stats)));
const wall = (performance.now() - t0) / 1000;
clearInterval(rssTimer);

// Idle again: every slot free, then RSS.
await waitIdle();
const rssAfter = L.rssKiB(srv.pid);
const heapAfter = await heapInUse();
const cacheGrowthKiB = Math.ceil(((await gauge("k3_prompt_cache_ram_bytes")) - cacheBase) / 1024);
const metrics = await (await fetch(srv.url + "/metrics")).text();

const pct = (a, p) => {
  if (!a.length) return 0;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const r = (x) => Math.round(x * 10) / 10;
// Mean sequences per forward pass (servers without these counters: null).
const counter = (name) => Number((new RegExp(name + " (\\d+)").exec(metrics) || [])[1]);
const batchWidth = r(counter("k3_batch_sequences_total") / counter("k3_forward_passes_total")) || null;
const summary = {
  clients, parallel, seconds: r(wall), requests_ok: stats.ok, deliberate_503: stats.r503, errors: stats.errors.length,
  completion_tokens: stats.tokens, prompt_tokens: stats.promptTokens,
  tokens_per_s: r(stats.tokens / wall), prompt_tokens_per_s: r(stats.promptTokens / wall),
  requests_per_s: r(stats.ok / wall), batch_width: batchWidth,
  ttft_ms: { p50: r(pct(stats.ttft, 50)), p90: r(pct(stats.ttft, 90)), p99: r(pct(stats.ttft, 99)) },
  latency_ms: { p50: r(pct(stats.lat, 50)), p90: r(pct(stats.lat, 90)), p99: r(pct(stats.lat, 99)) },
  rss_kib: { baseline: rssBase, peak: rssPeak, after: rssAfter, prompt_cache_growth: cacheGrowthKiB },
  heap_in_use_kib: { baseline: Math.round(heapBase / 1024), after: Math.round(heapAfter / 1024) },
};
console.log(JSON.stringify(summary, null, 1));
if (opt.json) fs.writeFileSync(opt.json, JSON.stringify(summary, null, 1) + "\n");
for (const e of stats.errors.slice(0, 10)) console.log("error: " + e);

let failed = 0;
const check = (cond, msg) => {
  console.log((cond ? "ok   " : "FAIL ") + msg);
  if (!cond) failed++;
};
check(stats.errors.length === 0, "no errors other than deliberate 503s");
check(stats.ok >= clients, `at least one completed stream per client (${stats.ok})`);
check(rssAfter <= rssBase + 3072 + cacheGrowthKiB,
  `RSS back to baseline (within 3 MiB, plus the prompt cache's growth of ${cacheGrowthKiB} KiB) (${rssBase} -> ${rssAfter} KiB, peak ${rssPeak})`);
check(/k3_slots_busy 0/.test(metrics) && /k3_queue_depth 0/.test(metrics), "metrics: no busy slot, empty queue");
const st = await srv.stop();
check(st.code === 0, "server exits 0 on SIGTERM");
fs.rmSync(dir, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
