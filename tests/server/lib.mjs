// Helpers for the server tests: start the real `k3 serve` on a loopback port, a tiny synthetic
// model, the official `openai` client and @huggingface/jinja from tests/node/node_modules, a
// minimal test runner.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

export const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, "../..");
const require = createRequire(path.join(root, "tests/node/package.json"));
export const OpenAI = (await import(require.resolve("openai"))).default;
export const { Template } = await import(require.resolve("@huggingface/jinja"));

export function args() {
  const a = process.argv.slice(2);
  const out = { k3: path.join(root, "build-srv/bin/k3") };
  for (let i = 0; i < a.length; i++) {
    if (!a[i].startsWith("--")) continue;
    const key = a[i].slice(2);
    if (i + 1 < a.length && !a[i + 1].startsWith("--")) out[key] = a[++i];
    else out[key] = true;
  }
  return out;
}

export function tmpdir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), "k3-server-test-"));
}

export function makeTinyModel(k3, dir) {
  const file = path.join(dir, "tiny.gguf");
  execFileSync(k3, ["make-tiny", "--out", file, "-q"], { stdio: "inherit" });
  return file;
}

// Servers still running when this process exits (a test that threw) are killed with it.
const started = new Set();
process.on("exit", () => {
  for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
});

// Starts `k3 serve` on a free loopback port; resolves once it listens. opts.env: extra environment;
// opts.fileSizeKiB: run under `ulimit -f` (the kernel refuses writes past it); opts.launcher: the
// command that starts k3 (["mpirun", "-np", "2"]); opts.startMs: how long it may take.
export function startServer(k3, model, extra = [], opts = {}) {
  return new Promise((resolve, reject) => {
    const threads = extra.includes("-t") ? [] : ["-t", "1"];
    const argv = ["serve", "-m", model, "--host", "127.0.0.1", "--port", "0", ...threads, ...extra];
    const launched = opts.launcher ? [opts.launcher[0], [...opts.launcher.slice(1), k3, ...argv]] : [k3, argv];
    const [cmd, cmdArgs] = opts.fileSizeKiB
      ? ["bash", ["-c", `ulimit -f ${opts.fileSizeKiB}; exec "$0" "$@"`, launched[0], ...launched[1]]]
      : launched;
    const proc = spawn(cmd, cmdArgs, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...(opts.env || {}) } });
    started.add(proc);
    let log = "";
    const timer = setTimeout(() => reject(new Error("k3 serve did not start:\n" + log)), opts.startMs || 30000);
    proc.stderr.on("data", (d) => {
      log += d;
      const m = /listening on http:\/\/([\d.]+):(\d+)/.exec(log);
      if (m && !proc.port) {
        clearTimeout(timer);
        proc.port = Number(m[2]);
        proc.url = `http://127.0.0.1:${proc.port}`;
        resolve(proc);
      }
    });
    proc.on("exit", (code, sig) => {
      proc.exitCode_ = code;
      proc.exitSignal_ = sig;
      if (!proc.port) {
        clearTimeout(timer);
        reject(new Error(`k3 serve exited (${code ?? sig}):\n${log}`));
      }
    });
    proc.log = () => log;
    proc.alive = () => proc.exitCode === null && proc.signalCode === null;
    proc.stop = (signal = "SIGTERM", timeoutMs = 20000) =>
      new Promise((res, rej) => {
        if (!proc.alive()) return res({ code: proc.exitCode, signal: proc.signalCode });
        const t = setTimeout(() => {
          proc.kill("SIGKILL");
          rej(new Error("k3 serve did not exit after " + signal));
        }, timeoutMs);
        proc.once("exit", (code, sig) => {
          clearTimeout(t);
          res({ code, signal: sig });
        });
        proc.kill(signal);
      });
  });
}

export function client(server, opts = {}) {
  return new OpenAI({ apiKey: "unused", baseURL: server.url + "/v1", maxRetries: 0, timeout: 60000, ...opts });
}

export async function getJson(server, p) {
  const r = await fetch(server.url + p);
  return { status: r.status, body: await r.json() };
}

export async function postJson(server, p, body, headers = {}) {
  const r = await fetch(server.url + p, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, headers: r.headers, text, body: json };
}

export function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : 0;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Minimal runner: tests run in order; a failure is reported and the run continues.
const tests = [];
export function test(name, fn) {
  tests.push({ name, fn });
}
export async function run(title, cleanup) {
  let failed = 0;
  const t0 = Date.now();
  for (const t of tests) {
    const s = Date.now();
    try {
      await t.fn();
      console.log(`ok   ${t.name} (${Date.now() - s} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  if (cleanup && (await cleanup()) === false) failed++;
  console.log(`${title}: ${tests.length - failed}/${tests.length} passed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  process.exit(failed ? 1 : 0);
}

export function assert(cond, msg) {
  if (!cond) throw new Error("assertion failed: " + msg);
}
export function eq(a, b, msg) {
  const ja = JSON.stringify(a),
    jb = JSON.stringify(b);
  if (ja !== jb) throw new Error(`${msg}: expected ${jb}, got ${ja}`);
}

// A w x h PNG (RGB, filter 0) written here, so a test owns its image.
function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
export function png(w, h, tint = 0) {
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) for (let c = 0; c < 3; c++) raw[y * (w * 3 + 1) + 1 + x * 3 + c] = (x * 7 + y * 13 + c * 50 + tint) & 255;
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr),
                        chunk("IDAT", zlib.deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]);
}
