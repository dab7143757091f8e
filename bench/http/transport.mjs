// Measures an HTTP/1.1 server as a transport for `k3 serve` (docs/server.md, "Transport"):
// framing strictness (RFC 9112 cases, status and whether the connection closes), what an idle
// connection costs (RSS and threads per connection), /health latency while 256 sockets stall in
// their request line, and whether a request that trickles in is cut off by a deadline.
//
//   node bench/http/transport.mjs --port P --pid PID [--health /health] [--post /echo]
import fs from "node:fs";
import net from "node:net";

const a = Object.fromEntries(
  process.argv.slice(2).reduce((o, v, i, arr) => (v.startsWith("--") ? [...o, [v.slice(2), arr[i + 1]]] : o), []),
);
const port = Number(a.port), pid = Number(a.pid);
const health = a.health ?? "/health", post = a.post ?? "/echo";
const extra = a.header ? a.header + "\r\n" : "";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const proc = () => {
  const s = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  return { rss: Number(/VmRSS:\s+(\d+)/.exec(s)[1]), threads: Number(/Threads:\s+(\d+)/.exec(s)[1]) };
};

// Sends the parts, reads until close or waitMs; {status, all statuses, closed, ms}.
function raw(parts, { waitMs = 3000, gapMs = 0 } = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const s = net.connect(port, "127.0.0.1");
    let data = "", done = false;
    const fin = (closed) => {
      if (done) return;
      done = true;
      s.destroy();
      const st = [...data.matchAll(/HTTP\/1\.[01] (\d{3})/g)].map((m) => Number(m[1]));
      resolve({ status: st[0] ?? 0, statuses: st, closed, ms: Date.now() - t0 });
    };
    setTimeout(() => fin(false), waitMs);
    s.on("data", (d) => (data += d.toString("latin1")));
    s.on("close", () => fin(true));
    s.on("error", () => {});
    s.on("connect", async () => {
      for (const p of parts) {
        if (done) return;
        s.write(p);
        if (gapMs) await sleep(gapMs);
      }
    });
  });
}

const H = `Host: x\r\n${extra}`;
const P = (hdrs, body = "") => `POST ${post} HTTP/1.1\r\n${H}${hdrs}\r\n${body}`;
const next = `GET ${health} HTTP/1.1\r\n${H}\r\n`;  // a second request that must never be answered
const bigChunks = () => {
  const parts = [P("Transfer-Encoding: chunked\r\n")];
  for (let i = 0; i < 144; i++) parts.push("10000\r\n" + "a".repeat(65536) + "\r\n");  // 9 MiB
  parts.push("0\r\n\r\n");
  return parts;
};
const cases = [
  ["two different Content-Length", [P("Content-Length: 17\r\nContent-Length: 73\r\n", '{"content":"abc"}' + next)]],
  ["two equal Content-Length", [P("Content-Length: 2\r\nContent-Length: 2\r\n", "{}" + next)]],
  ["Content-Length list '2, 2'", [P("Content-Length: 2, 2\r\n", "{}")]],
  ["TE chunked + Content-Length", [P("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "2\r\n{}\r\n0\r\n\r\n" + next)]],
  ["Content-Length + TE chunked", [P("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n" + next)]],
  ["space before colon", [P("Content-Length : 5\r\nContent-Length: 2\r\n", "{}" + next)]],
  ["header line without colon", [`GET ${health} HTTP/1.1\r\n${H}NoColonHere\r\n\r\n`]],
  ["obs-fold", [`GET ${health} HTTP/1.1\r\n${H}X-A: 1\r\n  folded\r\n\r\n`]],
  ["Transfer-Encoding: gzip", [P("Transfer-Encoding: gzip\r\n", "xx")]],
  ["Transfer-Encoding: gzip, chunked", [P("Transfer-Encoding: gzip, chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")]],
  ["two TE chunked headers", [P("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")]],
  ["Content-Length: -1", [P("Content-Length: -1\r\n")]],
  ["Content-Length: abc", [P("Content-Length: abc\r\n")]],
  ["Content-Length: +2", [P("Content-Length: +2\r\n", "{}")]],
  ["Content-Length: 0x2", [P("Content-Length: 0x2\r\n", "{}")]],
  ["9 MiB chunked body, 8 MiB cap", bigChunks()],
  ["one chunk of 8 MiB + 1", [P("Transfer-Encoding: chunked\r\n", "800001\r\n" + "a".repeat(1 << 16))]],
  ["chunk size of 20 hex digits", [P("Transfer-Encoding: chunked\r\n", "ffffffffffffffffffff\r\n")]],
  ["bare LF line ends", [`GET ${health} HTTP/1.1\nHost: x\n\n`]],
  ["URI of 70 KB", [`GET /${"a".repeat(70000)} HTTP/1.1\r\n${H}\r\n`]],
  ["NUL in a header value", [`GET ${health} HTTP/1.1\r\n${H}X-A: a\0b\r\n\r\n`]],
  ["invalid header name X(y)", [`GET ${health} HTTP/1.1\r\n${H}X(y): 1\r\n\r\n`]],
  ["no Host (HTTP/1.1)", [`GET ${health} HTTP/1.1\r\n${extra}\r\n`]],
  ["two Host headers", [`GET ${health} HTTP/1.1\r\n${H}Host: y\r\n\r\n`]],
  ["HTTP/2.0 request line", [`GET ${health} HTTP/2.0\r\n${H}\r\n`]],
  ["double space in request line", [`GET  ${health} HTTP/1.1\r\n${H}\r\n`]],
];

console.log("## strictness (first status, all statuses, closed)");
for (const [name, parts] of cases) {
  const r = await raw(parts);
  console.log(`${name.padEnd(34)} ${String(r.status).padEnd(4)} [${r.statuses.join(",")}] ${r.closed ? "closed" : "open"} ${r.ms} ms`);
}

console.log("## trickle: one header line every 0.7 s for 14 s");
{
  const lines = [`GET ${health} HTTP/1.1\r\n`, ...Array.from({ length: 20 }, (_, i) => `X-Slow-${i}: 1\r\n`)];
  const r = await raw(lines, { gapMs: 700, waitMs: 16000 });
  console.log(`answered ${r.status} after ${r.ms} ms (${r.closed ? "closed" : "still open"})`);
}

async function healthLatency(n, spanMs) {
  const lat = [];
  let fails = 0;
  const end = Date.now() + spanMs;
  while (Date.now() < end) {
    const t0 = performance.now();
    const r = await raw([`GET ${health} HTTP/1.1\r\n${H}Connection: close\r\n\r\n`], { waitMs: 15000 });
    if (r.status !== 200) fails++;
    lat.push(performance.now() - t0);
    await sleep(50);
  }
  lat.sort((x, y) => x - y);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(1);
  console.log(`/health with ${n} stalled sockets: ${lat.length} probes, p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${lat[lat.length - 1].toFixed(1)} ms, non-200 ${fails}`);
}

console.log("## idle cost and /health latency under stalled sockets");
for (const n of [256, 1000]) {
  const p0 = proc();
  const socks = [];
  for (let i = 0; i < n; i++) {
    const s = net.connect(port, "127.0.0.1");
    s.on("error", () => {});
    s.on("connect", () => s.write(`GET ${health.slice(0, 3)}`));
    socks.push(s);
  }
  await sleep(600);
  const p1 = proc();
  console.log(`${n} stalled: RSS +${p1.rss - p0.rss} KiB (${((p1.rss - p0.rss) / n).toFixed(1)} KiB each), threads ${p0.threads} -> ${p1.threads}`);
  if (n === 256) await healthLatency(n, 1500);
  for (const s of socks) s.destroy();
  await sleep(2500);
}
