// `k3 serve` as two processes under mpirun against `k3 serve` as one, through the official `openai`
// client: the same completions (greedy and seeded sampling, chat and text, streamed and not, two
// at once so they share batched passes, an image whose rows the leader sends the others); then
// SIGTERM to mpirun stops the leader's server gracefully and every process ends.
//
//   node tests/multinode/serve_mpi.mjs --k3 build/bin/k3 [--mpirun mpirun]
import { execFileSync, spawn } from "node:child_process";
import path from "node:path";
import * as L from "../server/lib.mjs";

const { assert, eq, test } = L;
const opt = L.args();
const mpirun = opt.mpirun || "mpirun";
const dir = L.tmpdir();
const modelPath = path.join(dir, "tiny.gguf");
execFileSync(opt.k3, ["make-tiny", "-q", "--out", modelPath, "--vision"], { stdio: "inherit" });
const mmproj = path.join(dir, "mmproj-tiny.gguf");
// CI runs as root; Open MPI refuses that unless told (docs/multinode.md).
const env = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1" };

// Starts a server (cmd: the program and its arguments before `serve`); resolves once it listens.
function start(cmd) {
  return new Promise((resolve, reject) => {
    // Both without the prompt cache, so the usage fields agree (cache_mpi.mjs tests it under mpirun).
    const args = [...cmd.slice(1), "serve", "-m", modelPath, "--mmproj", mmproj, "--host", "127.0.0.1", "--port", "0",
                  "-t", "1", "-P", "2", "--cache-ram", "0"];
    const proc = spawn(cmd[0], args, { stdio: ["ignore", "ignore", "pipe"], env });
    let log = "";
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + log)), 60000);
    proc.stderr.on("data", (d) => {
      log += d;
      const m = /listening on http:\/\/([\d.]+):(\d+)/.exec(log);
      if (m && !proc.url) {
        clearTimeout(timer);
        proc.url = `http://127.0.0.1:${m[2]}`;
        resolve(proc);
      }
    });
    proc.on("exit", (code, sig) => {
      proc.ended = { code, sig };
      if (!proc.url) {
        clearTimeout(timer);
        reject(new Error(`server exited (${code ?? sig}):\n${log}`));
      }
    });
    proc.log = () => log;
  });
}

const one = await start([opt.k3]);
const two = await start([mpirun, "--oversubscribe", "-np", "2", opt.k3]);
const servers = [one, two];

async function both(fn) {
  return Promise.all(servers.map((s) => fn(L.client(s), s)));
}
const MODEL = "k3-synthetic-tiny";
const chat = (msgs, extra = {}) => (c) =>
  c.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 24, temperature: 0, ...extra });

test("two processes give the one-process chat completion (greedy)", async () => {
  const [a, b] = await both(chat([{ role: "user", content: "Tell me about the lighthouse." }]));
  assert(a.usage.completion_tokens > 0, "tokens generated");
  eq(b.choices[0].message, a.choices[0].message, "message");
  eq(b.usage, a.usage, "usage");
});

test("seeded sampling and text completions agree", async () => {
  const [a, b] = await both((c) =>
    c.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 32, temperature: 0.9, seed: 7 }),
  );
  eq(b.choices[0].text, a.choices[0].text, "text");
  eq(b.choices[0].finish_reason, a.choices[0].finish_reason, "finish");
});

test("streamed replies agree", async () => {
  const texts = await both(async (c) => {
    const s = await c.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Stream, please." }],
      max_tokens: 20,
      temperature: 0,
      stream: true,
    });
    let t = "";
    for await (const ch of s) t += (ch.choices[0]?.delta?.content ?? "") + (ch.choices[0]?.delta?.reasoning_content ?? "");
    return t;
  });
  assert(texts[0].length > 0, "some text");
  eq(texts[1], texts[0], "streamed text");
});

test("two requests at once (one batched pass per step) agree with one process", async () => {
  const prompts = ["First question?", "A second, longer question about ships and storms?"];
  const [a, b] = await both((c) =>
    Promise.all(prompts.map((p) => chat([{ role: "user", content: p }], { max_tokens: 16 })(c))),
  );
  for (let i = 0; i < prompts.length; i++) eq(b[i].choices[0].message, a[i].choices[0].message, "reply " + i);
});

test("an image: its rows replace the pads' embeddings on every process", async () => {
  const url = "data:image/png;base64," + L.png(64, 48).toString("base64");
  const msgs = [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url } }] }];
  const [a, b] = await both(chat(msgs, { max_tokens: 16 }));
  const [t] = await both(chat([{ role: "user", content: "What is this?" }], { max_tokens: 1 }));
  assert(a.usage.prompt_tokens > t.usage.prompt_tokens + 4, "the image's rows are in the prompt");
  eq(b.choices[0].message, a.choices[0].message, "message");
  eq(b.usage, a.usage, "usage");
});

await L.run("multinode serve", async () => {
  // SIGTERM: mpirun passes it on, the leader's server shuts down gracefully and stops the others
  // (mpirun itself then reports the signal it got)
  let ok = true;
  for (const s of servers) {
    if (s.ended) continue;
    const t0 = Date.now();
    s.kill("SIGTERM");
    while (!s.ended && Date.now() - t0 < 30000) await L.sleep(50);
    const clean = s === one ? s.ended?.code === 0 : s.ended && /k3 serve: stopped/.test(s.log());
    if (!clean) {
      console.log(`FAIL server did not stop cleanly (${JSON.stringify(s.ended)}):\n${s.log()}`);
      s.kill("SIGKILL");
      ok = false;
    }
  }
  return ok;
});
