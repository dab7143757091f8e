// Pressure on `k3 serve` from clients that cost the server memory or connections:
//  1. 256 sockets stall in their request line for --stall-seconds (a socket the server closes at
//     its request timeout is opened again at once, so 256 are always waiting); meanwhile /health is
//     probed every 50 ms on fresh connections and chat completions must succeed;
//  2. 8 (--tokenize) concurrent /tokenize requests of 7.7 MiB each: all answered alike, peak RSS
//     (VmHWM) under 1.5 GB;
//  3. afterwards RSS comes back within 100 MiB of where it started (waiting up to a minute).
// Latencies are reported; --max-ms N also asserts the slowest /health probe (by hand: the check is
// about the machine as much as the server).
//
//   node tests/server/pressure.mjs [--k3 build/bin/k3] [--stall-seconds 20] [--max-ms 100] [--tokenize 8]
import fs from "node:fs";
import net from "node:net";
import * as L from "./lib.mjs";

const { assert, eq, test } = L;
const opt = L.args();
const stallS = Number(opt["stall-seconds"] ?? 20);
const maxMs = opt["max-ms"] !== undefined ? Number(opt["max-ms"]) : null;
const nTokenize = Number(opt.tokenize ?? 8);
const dir = L.tmpdir();
const modelPath = L.makeTinyModel(opt.k3, dir);
// --timeout 120: eight 7.7 MiB uploads at once may take longer than the default 10 s to arrive whole
// on a busy machine, and deadlines are not what this test is about.
const srv = await L.startServer(opt.k3, modelPath, ["-P", "2", "-c", "512", "--timeout", "120"]);
const status = () => fs.readFileSync(`/proc/${srv.pid}/status`, "utf8");
const kib = (key) => Number(new RegExp(key + ":\\s+(\\d+)").exec(status())[1]);
const USER = [{ role: "user", content: "Hi" }];
await L.client(srv).chat.completions.create({ model: "k3", messages: USER, max_tokens: 2 });
const rss0 = kib("VmRSS");

// One /health on a fresh connection: [status, ms].
function health() {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const s = net.connect(srv.port, "127.0.0.1");
    let data = "";
    const done = () => {
      s.destroy();
      const m = /^HTTP\/1\.1 (\d{3})/.exec(data);
      resolve([m ? Number(m[1]) : 0, performance.now() - t0]);
    };
    s.setTimeout(15000, done);
    s.on("data", (d) => (data += d));
    s.on("close", done);
    s.on("error", () => {});
    s.on("connect", () => s.write("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  });
}

test(`256 stalled sockets for ${stallS} s: /health answers throughout, chat completions succeed`, async () => {
  let holding = true,
    reopened = 0;
  const stall = () => {
    const s = net.connect(srv.port, "127.0.0.1");
    s.on("error", () => {});
    s.on("connect", () => s.write("POST /v1/chat/completions HTTP/1.1\r\nHo"));
    s.on("data", () => {});  // the 408 at the request timeout; reading it lets the close arrive
    s.on("close", () => {
      if (holding) reopened++, stall();
    });
    return s;
  };
  const socks = Array.from({ length: 256 }, stall);
  await L.sleep(500);
  const lat = [];
  let bad = 0,
    chats = 0;
  const end = Date.now() + stallS * 1000;
  const chatting = (async () => {
    while (Date.now() < end) {
      const r = await L.client(srv).chat.completions.create({ model: "k3", messages: USER, max_tokens: 4 });
      eq(r.object, "chat.completion", "chat answer");
      chats++;
      await L.sleep(1000);
    }
  })();
  while (Date.now() < end) {
    const [st, ms] = await health();
    if (st !== 200) bad++;
    lat.push(ms);
    await L.sleep(50);
  }
  await chatting;
  holding = false;
  for (const s of socks) s.destroy();
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(1);
  console.log(`     /health: ${lat.length} probes, p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${lat.at(-1).toFixed(1)} ms; ` +
    `${chats} chat completions; ${reopened} stalled sockets closed by the server and reopened`);
  eq(bad, 0, "non-200 /health answers");
  assert(chats >= 1, "a chat completion succeeded");
  if (maxMs !== null) assert(lat.at(-1) < maxMs, `slowest /health ${lat.at(-1).toFixed(1)} ms < ${maxMs} ms`);
});

test(`${nTokenize} concurrent /tokenize of 7.7 MiB: all answered alike, peak RSS under 1.5 GB`, async () => {
  const words = "the lighthouse keeper watched ships pass under a sky of slate while gulls argued over fish ";
  const text = words.repeat(Math.ceil((7.7 * 1048576) / words.length)).slice(0, 7.7 * 1048576 - 16);
  const body = JSON.stringify({ content: text });
  const t0 = Date.now();
  const rs = await Promise.all(
    Array.from({ length: nTokenize }, async () => {
      const r = await fetch(srv.url + "/tokenize", { method: "POST", headers: { "content-type": "application/json" }, body });
      const j = await r.json();
      return [r.status, j.tokens?.length ?? -1];
    }),
  );
  const peak = kib("VmHWM");
  console.log(`     ${rs.length} x ${(body.length / 1048576).toFixed(2)} MiB in ${Date.now() - t0} ms, ${rs[0][1]} tokens each; ` +
    `RSS ${(rss0 / 1024).toFixed(1)} MiB before, peak ${(peak / 1024).toFixed(1)} MiB`);
  for (const [st, n] of rs) {
    eq(st, 200, "status");
    eq(n, rs[0][1], "token count");
  }
  assert(rs[0][1] > 1000000, "the text was tokenized");
  assert(peak < 1.5 * 1024 * 1024, "peak RSS under 1.5 GB");
});

test("RSS back within 100 MiB of the start (waiting up to a minute)", async () => {
  const t0 = Date.now();
  let rss = kib("VmRSS");
  while (rss >= rss0 + 100 * 1024 && Date.now() - t0 < 60000) {
    await L.sleep(500);
    rss = kib("VmRSS");
  }
  console.log(`     RSS ${(rss0 / 1024).toFixed(1)} MiB at the start, ${(rss / 1024).toFixed(1)} MiB now (${Date.now() - t0} ms later)`);
  assert(rss < rss0 + 100 * 1024, "RSS within 100 MiB of the start");
});

await L.run("pressure", async () => {
  const st = await srv.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  if (st.code !== 0) {
    console.log("FAIL server exit " + JSON.stringify(st) + "\n" + srv.log());
    return false;
  }
});
