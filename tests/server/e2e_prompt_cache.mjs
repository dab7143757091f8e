// The prompt cache end to end, with the official `openai` npm client against `k3 serve` on a
// synthetic model, every answer checked against a `--cache-ram 0` server (greedy, so equal text
// means equal tokens; raw /completion compares the token ids):
//  * hits: turn 2 reuses turn 1's prompt, an identical resend everything, a new question the system
//    prompt, a restarted server its --cache-dir, the --cache-ram 0 server nothing; streamed usage,
//    /v1/completions and llama.cpp's /completion timings (cache_n, prompt_n); /metrics;
//  * exactness over random conversations sent two at a time (turns, branches, edits, truncations,
//    resends) with small prefill chunks and snapshots every 16 tokens;
//  * the slot API: save, restore on another server (then turn 2 hits), erase, and its errors;
//  * faults: corrupt, truncated and foreign files in --cache-dir, a full disk (hook), a real
//    file-size limit, kill -9 while writing, two servers on one directory.
//
//   node tests/server/e2e_prompt_cache.mjs [--k3 build/bin/k3]
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import * as L from "./lib.mjs";

const { assert, eq, test } = L;
const opt = L.args();
const dir = L.tmpdir();
const modelPath = L.makeTinyModel(opt.k3, dir);
const otherModel = path.join(dir, "other.gguf");
execFileSync(opt.k3, ["make-tiny", "--out", otherModel, "--seed", "99", "-q"], { stdio: "inherit" });
const sub = (name) => fs.mkdirSync(path.join(dir, name), { recursive: true }) || path.join(dir, name);

const ref = await L.startServer(opt.k3, modelPath, ["--cache-ram", "0", "-c", "2048"]);
const cacheDir = sub("cache");
const slotDir = sub("slots");
const CACHED = ["-P", "2", "-b", "5", "--cache-snapshot-every", "16", "-c", "2048", "-v"];
let srv = await L.startServer(opt.k3, modelPath, [...CACHED, "--cache-dir", cacheDir]);
const servers = [ref, srv];
const k3Template = new L.Template(fs.readFileSync(path.join(L.root, "data/templates/kimi-k3.jinja"), "utf8"));

const SYSTEM = { role: "system", content: "You are a careful assistant who answers briefly. ".repeat(8) };
async function chat(server, messages, extra = {}) {
  const r = await L.client(server).chat.completions.create({ model: "k3", messages, temperature: 0, max_tokens: 8, ...extra });
  const m = r.choices[0].message;
  return { usage: r.usage, content: m.content, reasoning: m.reasoning_content, msg: m };
}
// A reply as a client sends it back in the next turn.
const back = (m) => ({ role: "assistant", content: m.content ?? "", reasoning_content: m.reasoning_content });
// The same request on the reference server gives the same answer.
async function exact(server, messages, extra = {}) {
  const [got, want] = await Promise.all([chat(server, messages, extra), chat(ref, messages, extra)]);
  eq([got.content, got.reasoning, got.usage.completion_tokens], [want.content, want.reasoning, want.usage.completion_tokens],
    "answer with the cache vs --cache-ram 0");
  eq(want.usage.prompt_tokens_details.cached_tokens, 0, "--cache-ram 0 reuses nothing");
  return got;
}
async function ntokens(text) {
  return (await L.postJson(ref, "/tokenize", { content: text })).body.tokens.length;
}
async function metric(server, name) {
  const text = await (await fetch(server.url + "/metrics")).text();
  const m = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  assert(m, `metric ${name} missing`);
  return Number(m[1]);
}
const turn1 = (q) => [SYSTEM, { role: "user", content: q }];

test("turn 2, a resend and a new question reuse what they share", async () => {
  const m1 = turn1("What is the capital of France?");
  const r1 = await exact(srv, m1);
  const p1 = r1.usage.prompt_tokens;
  const m2 = [...m1, back(r1.msg), { role: "user", content: "And of Germany?" }];
  const r2 = await exact(srv, m2);
  assert(r2.usage.prompt_tokens_details.cached_tokens >= 0.9 * p1, `turn 2 cached ${r2.usage.prompt_tokens_details.cached_tokens} of turn 1's ${p1}`);
  const r3 = await exact(srv, m2);
  assert(r3.usage.prompt_tokens_details.cached_tokens >= r3.usage.prompt_tokens - 4, `resend cached ${r3.usage.prompt_tokens_details.cached_tokens} of ${r3.usage.prompt_tokens}`);
  const sysTokens = await ntokens(k3Template.render({ messages: [SYSTEM], add_generation_prompt: false }));
  const r4 = await exact(srv, turn1("Something else entirely: how do tides work?"));
  assert(r4.usage.prompt_tokens_details.cached_tokens >= sysTokens, `new question cached ${r4.usage.prompt_tokens_details.cached_tokens}, system prompt ${sysTokens}`);
});

test("streamed usage, /v1/completions and /completion report the cached tokens", async () => {
  const msgs = turn1("Streaming question?");
  await exact(srv, msgs);
  const stream = await L.client(srv).chat.completions.create({
    model: "k3", messages: msgs, temperature: 0, max_tokens: 8, stream: true, stream_options: { include_usage: true },
  });
  let usage = null;
  for await (const ch of stream) if (ch.usage) usage = ch.usage;
  eq(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens, "a resent streamed request is restored whole");
  const prompt = "Once upon a time, in a lighthouse by the sea, there lived a keeper who";
  for (let i = 0; i < 2; i++) {
    const c = await L.client(srv).completions.create({ model: "k3", prompt, temperature: 0, max_tokens: 6 });
    const want = await L.client(ref).completions.create({ model: "k3", prompt, temperature: 0, max_tokens: 6 });
    eq(c.choices[0].text, want.choices[0].text, "completion text");
    eq(c.usage.prompt_tokens_details.cached_tokens, i ? c.usage.prompt_tokens : 0, "completion cached tokens");
  }
  const ids = (await L.postJson(ref, "/tokenize", { content: prompt + " sang" })).body.tokens;
  for (let i = 0; i < 2; i++) {
    const r = await L.postJson(srv, "/completion", { prompt: ids, n_predict: 5, temperature: 0, return_tokens: true });
    const w = await L.postJson(ref, "/completion", { prompt: ids, n_predict: 5, temperature: 0, return_tokens: true });
    eq(r.body.tokens, w.body.tokens, "/completion tokens");
    const t = r.body.timings;
    eq(t.cache_n + t.prompt_n, ids.length, "cache_n + prompt_n = the prompt");
    eq(r.body.tokens_cached, t.cache_n, "tokens_cached");
    if (i) eq([t.cache_n, t.prompt_n], [ids.length, 0], "an identical /completion processes nothing");
    else assert(t.cache_n > 0 && t.prompt_n > 0, `the shared prefix is reused (${t.cache_n}, ${t.prompt_n})`);
    eq(w.body.timings.cache_n, 0, "reference cache_n");
  }
});

test("random conversations, two at a time, match --cache-ram 0", async () => {
  let seed = 7;
  const rnd = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
  const words = ["tide", "moon", "lamp", "ship", "rope", "gull", "salt", "fog", "reef", "oar", "bell", "map"];
  const say = () => Array.from({ length: 2 + rnd(8) }, () => words[rnd(words.length)]).join(" ");
  const pool = [];
  let cached = 0, total = 0;
  for (let round = 0; round < 10; round++) {
    const reqs = [];
    for (let i = 0; i < 2; i++) {
      let msgs;
      const op = pool.length ? rnd(6) : 0;
      const base = pool.length ? structuredClone(pool[rnd(pool.length)]) : null;
      if (op === 0) msgs = turn1(say());
      else if (op === 1) msgs = [...base.msgs, back(base.reply), { role: "user", content: say() }]; // the next turn
      else if (op === 2) msgs = [...base.msgs.slice(0, 1 + rnd(base.msgs.length)), { role: "user", content: say() }]; // branch
      else if (op === 3) (msgs = base.msgs), (msgs[msgs.length - 1].content = say()); // edit the last message
      else if (op === 4) msgs = [...base.msgs.slice(0, Math.max(2, base.msgs.length - 2))]; // truncate
      else msgs = base.msgs; // resend
      if (msgs[msgs.length - 1].role !== "user") msgs.push({ role: "user", content: say() });
      reqs.push(msgs);
    }
    const got = await Promise.all(reqs.map((m) => exact(srv, m)));
    got.forEach((g, i) => {
      pool.push({ msgs: reqs[i], reply: g.msg });
      cached += g.usage.prompt_tokens_details.cached_tokens;
      total += g.usage.prompt_tokens;
    });
  }
  assert(cached > total / 3, `the cache was used: ${cached} of ${total} prompt tokens`);
});

test("raw-id /completion branches match --cache-ram 0 token for token", async () => {
  const base = (await L.postJson(ref, "/tokenize", { content: "The keeper counted the ships that passed the reef at night" })).body.tokens;
  for (let i = 0; i < 8; i++) {
    const ids = base.slice(0, 10 + ((i * 7) % (base.length - 10)));
    ids.push(40 + i);
    const body = { prompt: ids, n_predict: 6, temperature: 0, return_tokens: true };
    const [r, w] = await Promise.all([L.postJson(srv, "/completion", body), L.postJson(ref, "/completion", body)]);
    eq(r.body.tokens, w.body.tokens, `branch ${i}`);
  }
});

test("/metrics counts hits, cached tokens, snapshots and disk entries", async () => {
  assert((await metric(srv, "k3_prompt_cache_hits_total")) > 0, "hits");
  assert((await metric(srv, "k3_prompt_tokens_cached_total")) > 0, "cached tokens");
  assert((await metric(srv, "k3_prompt_cache_snapshots")) > 0, "snapshots");
  assert((await metric(srv, "k3_prompt_cache_ram_bytes")) > 0, "RAM bytes");
  assert((await metric(srv, "k3_prompt_cache_disk_files")) > 0, "disk files");
  assert((await metric(srv, "k3_prompt_cache_misses_total")) > 0, "misses");
  eq(await metric(srv, "k3_prompt_cache_disk_skipped_total"), 0, "no bad files");
});

test("a restarted server serves turn 2 from --cache-dir", async () => {
  const m1 = turn1("Before the restart: where do gulls sleep?");
  const r1 = await exact(srv, m1);
  eq((await srv.stop()).code, 0, "graceful exit");
  srv = await L.startServer(opt.k3, modelPath, [...CACHED, "--cache-dir", cacheDir]);
  servers.push(srv);
  const r2 = await exact(srv, [...m1, back(r1.msg), { role: "user", content: "And in winter?" }]);
  assert(r2.usage.prompt_tokens_details.cached_tokens >= 0.9 * r1.usage.prompt_tokens,
    `after the restart turn 2 cached ${r2.usage.prompt_tokens_details.cached_tokens} of ${r1.usage.prompt_tokens}`);
  assert((await metric(srv, "k3_prompt_cache_disk_loads_total")) >= 1, "loaded from disk");
});

test("slot save, restore on another server, erase; and the slot API's errors", async () => {
  const one = await L.startServer(opt.k3, modelPath, ["-P", "1", "-c", "2048", "--slot-save-path", slotDir]);
  servers.push(one);
  const m1 = turn1("Saved in a slot: what is a reef?");
  const r1 = await exact(one, m1);
  const slots = (await L.getJson(one, "/slots")).body;
  eq(slots.length, 1, "one slot");
  assert(slots[0].n_tokens >= r1.usage.prompt_tokens && !slots[0].is_processing, JSON.stringify(slots[0]));
  const saved = await L.postJson(one, "/slots/0?action=save", { filename: "reef.bin" });
  eq(saved.status, 200, "save: " + saved.text);
  assert(saved.body.n_saved >= r1.usage.prompt_tokens && saved.body.n_snapshots >= 2, JSON.stringify(saved.body));

  const two = await L.startServer(opt.k3, modelPath, ["-P", "1", "-c", "2048", "--slot-save-path", slotDir]);
  servers.push(two);
  const restored = await L.postJson(two, "/slots/0?action=restore", { filename: "reef.bin" });
  eq(restored.status, 200, "restore: " + restored.text);
  eq(restored.body.n_restored, saved.body.n_saved, "n_restored");
  eq((await L.getJson(two, "/slots")).body[0].n_tokens, saved.body.n_saved, "the slot holds the sequence");
  const r2 = await exact(two, [...m1, back(r1.msg), { role: "user", content: "Is it alive?" }]);
  assert(r2.usage.prompt_tokens_details.cached_tokens >= 0.9 * r1.usage.prompt_tokens,
    `turn 2 after a slot restore cached ${r2.usage.prompt_tokens_details.cached_tokens} of ${r1.usage.prompt_tokens}`);
  const erased = await L.postJson(two, "/slots/0?action=erase", "");
  eq([erased.status, erased.body.n_erased > 0], [200, true], "erase");
  eq((await L.getJson(two, "/slots")).body[0].n_tokens, 0, "erased");

  const expect = async (server, url, body, status, words, param) => {
    const r = await L.postJson(server, url, body);
    eq(r.status, status, `${url} ${JSON.stringify(body)}: ${r.text}`);
    assert(r.body.error.message.includes(words), `message "${r.body.error.message}" should say "${words}"`);
    if (param) eq(r.body.error.param, param, "param");
  };
  await expect(two, "/slots/0?action=restore", { filename: "missing.bin" }, 404, "cannot open", "filename");
  await expect(two, "/slots/0?action=save", { filename: "../escape.bin" }, 400, "plain file name", "filename");
  await expect(two, "/slots/0?action=save", { filename: ".hidden" }, 400, "plain file name", "filename");
  await expect(two, "/slots/0?action=save", { name: "x" }, 400, "name", "name");
  await expect(two, "/slots/0?action=fly", { filename: "x" }, 400, "save, restore or erase", "action");
  await expect(two, "/slots/5?action=save", { filename: "x" }, 404, "/slots/5");
  await expect(ref, "/slots/0?action=save", { filename: "x" }, 400, "prompt cache is off");
  const bytes = fs.readFileSync(path.join(slotDir, "reef.bin"));
  bytes[bytes.length - 10] ^= 1;
  fs.writeFileSync(path.join(slotDir, "flipped.bin"), bytes);
  await expect(two, "/slots/0?action=restore", { filename: "flipped.bin" }, 400, "checksum mismatch", "filename");
  fs.writeFileSync(path.join(slotDir, "cut.bin"), bytes.subarray(0, 1000));
  await expect(two, "/slots/0?action=restore", { filename: "cut.bin" }, 400, "truncated", "filename");
  const otherDir = sub("other-slots");
  const other = await L.startServer(opt.k3, otherModel, ["-P", "1", "--slot-save-path", otherDir]);
  servers.push(other);
  await chat(other, m1);
  eq((await L.postJson(other, "/slots/0?action=save", { filename: "o.bin" })).status, 200, "save on the other model");
  fs.copyFileSync(path.join(otherDir, "o.bin"), path.join(slotDir, "foreign.bin"));
  await expect(two, "/slots/0?action=restore", { filename: "foreign.bin" }, 400, "another model or setup", "filename");
  const nosave = await L.startServer(opt.k3, modelPath, ["-P", "1"]);
  servers.push(nosave);
  await expect(nosave, "/slots/0?action=save", { filename: "x.bin" }, 400, "--slot-save-path");
  eq((await L.getJson(two, "/health")).status, 200, "still serving");
  await exact(two, m1);
  for (const s of [one, two, other, nosave]) eq((await s.stop()).code, 0, "clean exit");
});

// A copy of the main cache directory with some files damaged, plus another model's entries.
function damagedCopy() {
  const d = sub("damaged");
  for (const f of fs.readdirSync(cacheDir)) fs.copyFileSync(path.join(cacheDir, f), path.join(d, f));
  const files = fs.readdirSync(d).filter((f) => f.endsWith(".k3pc")).sort();
  assert(files.length >= 4, `${files.length} entries to damage`);
  const cut = fs.readFileSync(path.join(d, files[0]));
  fs.writeFileSync(path.join(d, files[0]), cut.subarray(0, cut.length - 64));
  const flip = fs.readFileSync(path.join(d, files[1]));
  flip[flip.length - 8] ^= 1;
  fs.writeFileSync(path.join(d, files[1]), flip);
  fs.writeFileSync(path.join(d, files[2].slice(0, 17) + "0123456789abcdef.k3pc"), "not a cache file at all. ".repeat(10));
  fs.writeFileSync(path.join(d, ".k3pc-tmp-999999999-1"), "half written by a process long gone");
  return d;
}

test("corrupt, truncated and foreign files are skipped with a warning; the server serves exactly", async () => {
  const otherCache = sub("other-cache");
  const o = await L.startServer(opt.k3, otherModel, ["--cache-dir", otherCache]);
  servers.push(o);
  await chat(o, turn1("What is the capital of France?"));
  eq((await o.stop()).code, 0, "other model's server stops");
  const d = damagedCopy();
  for (const f of fs.readdirSync(otherCache)) fs.copyFileSync(path.join(otherCache, f), path.join(d, f));
  const s = await L.startServer(opt.k3, modelPath, [...CACHED, "--cache-dir", d]);
  servers.push(s);
  const log = s.log();
  assert(/skipping .*truncated/.test(log), "truncated file warned about:\n" + log);
  assert(/skipping .*wrong magic/.test(log), "garbage file warned about");
  assert(/skipping 1 file\(s\) of other models/.test(log), "foreign file warned about");
  assert(!fs.existsSync(path.join(d, ".k3pc-tmp-999999999-1")), "a dead writer's temporary file is removed");
  // Every conversation the main server saw, again: the flipped file is found at load, never used.
  const m1 = turn1("What is the capital of France?");
  const r1 = await exact(s, m1);
  await exact(s, [...m1, back(r1.msg), { role: "user", content: "And of Germany?" }]);
  await exact(s, turn1("Before the restart: where do gulls sleep?"));
  await exact(s, turn1("Streaming question?"));
  eq((await L.getJson(s, "/health")).status, 200, "healthy");
  eq((await s.stop()).code, 0, "clean exit");
});

test("a full disk (hook) and a file-size limit (real EFBIG) degrade to RAM with a warning", async () => {
  for (const how of ["hook", "ulimit"]) {
    const d = sub("full-" + how);
    const s = await L.startServer(opt.k3, modelPath, [...CACHED, "--cache-dir", d],
      how === "hook" ? { env: { K3_CACHE_FREE_BYTES: "4096" } } : { fileSizeKiB: 16 });
    servers.push(s);
    const m1 = turn1("Full disk " + how + ": what is salt?");
    const r1 = await exact(s, m1);
    const r2 = await exact(s, [...m1, back(r1.msg), { role: "user", content: "Why?" }]);
    assert(r2.usage.prompt_tokens_details.cached_tokens >= 0.9 * r1.usage.prompt_tokens, "RAM still serves");
    eq((await s.stop()).code, 0, "clean exit");
    const want = how === "hook" ? /the disk is full/ : /File too large/;
    assert(want.test(s.log()), `warning for ${how}:\n${s.log()}`);
    eq(fs.readdirSync(d).length, 0, "nothing half-written left");
  }
});

test("kill -9 while writing leaves nothing a restart would load wrongly", async () => {
  const d = sub("killed");
  const long = { role: "system", content: "Long prompt for a long write. ".repeat(40) };
  for (let i = 0; i < 3; i++) {
    const s = await L.startServer(opt.k3, modelPath, [...CACHED, "--cache-dir", d]);
    servers.push(s);
    await exact(s, [long, { role: "user", content: "kill " + i }]);
    s.kill("SIGKILL");
    await new Promise((r) => s.once("exit", r));
  }
  const s = await L.startServer(opt.k3, modelPath, [...CACHED, "--cache-dir", d]);
  servers.push(s);
  assert(!/skipping/.test(s.log()), "no file is bad:\n" + s.log());
  for (let i = 0; i < 3; i++) await exact(s, [long, { role: "user", content: "kill " + i }]);
  // The live server may be writing an entry right now (its own temporary file, renamed when done):
  // the killed servers' files must be gone while it runs, and every temporary file after it stops.
  const tmps = () => fs.readdirSync(d).filter((f) => f.startsWith(".k3pc-tmp-"));
  eq(tmps().filter((f) => !f.startsWith(`.k3pc-tmp-${s.pid}-`)).length, 0, "no temporary files of the killed servers left");
  eq((await s.stop()).code, 0, "clean exit");
  eq(tmps().length, 0, "no temporary files left");
});

test("two servers on one directory share it without corrupting it", async () => {
  const d = sub("shared");
  const small = ["--cache-ram", "200K"]; // evictions go to disk
  const a = await L.startServer(opt.k3, modelPath, [...CACHED, ...small, "--cache-dir", d]);
  const b = await L.startServer(opt.k3, modelPath, [...CACHED, ...small, "--cache-dir", d]);
  servers.push(a, b);
  const convs = Array.from({ length: 6 }, (_, i) => turn1(`Shared directory question ${i % 3}?`));
  const replies = await Promise.all(convs.map((m, i) => exact(i % 2 ? b : a, m)));
  await Promise.all(convs.map((m, i) => exact(i % 2 ? a : b, [...m, back(replies[i].msg), { role: "user", content: "More?" }])));
  for (const s of [a, b]) eq((await s.stop()).code, 0, "clean exit");
  const c = await L.startServer(opt.k3, modelPath, [...CACHED, "--cache-dir", d]);
  servers.push(c);
  assert(!/skipping/.test(c.log()), "every file is good:\n" + c.log());
  const r = await exact(c, [...convs[0], back(replies[0].msg), { role: "user", content: "More?" }]);
  assert(r.usage.prompt_tokens_details.cached_tokens > 0, "a third server reuses their files");
  eq((await c.stop()).code, 0, "clean exit");
});

await L.run("server_e2e_prompt_cache", async () => {
  for (const s of servers) if (s.alive()) await s.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});
