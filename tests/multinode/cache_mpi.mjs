// The prompt cache under mpirun, end to end through the official `openai` client: each process keeps
// its share of every cached state (docs/multinode.md, "Prompt cache"). Every answer is checked
// against one process without a cache (greedy, so equal text means equal tokens):
//  * turn 2 of a chat is >= 90 % cached, at 2 processes over shared memory, 3 over TCP loopback and
//    4 in 2 pipeline stages; after a restart on the same --cache-dir turn 3 is served from disk;
//  * a process whose files are gone turns the hit into a miss on every process;
//  * /slots save and restore: every process writes and reads its own file;
//  * kill -9 of a process while entries are written: the next start trusts nothing half-written.
//
//   node tests/multinode/cache_mpi.mjs --k3 build/bin/k3 [--mpirun mpirun]
import fs from "node:fs";
import path from "node:path";
import * as L from "../server/lib.mjs";

const { assert, eq, test } = L;
const opt = L.args();
const mpirun = opt.mpirun || "mpirun";
const dir = L.tmpdir();
const modelPath = L.makeTinyModel(opt.k3, dir);
const sub = (name) => fs.mkdirSync(path.join(dir, name), { recursive: true }) || path.join(dir, name);
// CI runs as root; Open MPI refuses that unless told (docs/multinode.md).
const env = { OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1" };
const FLAGS = ["-P", "1", "-b", "16", "-c", "2048", "-v"];

function launcher(np, net, tag) {
  const btl = net === "tcp" ? ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"] : ["--mca", "btl", "self,vader"];
  return [mpirun, "--oversubscribe", "-np", String(np), "--mca", "pml", "ob1", ...btl, "-x", `K3_TEST_TAG=${tag}`];
}
const servers = [];
async function start(np, net, extra, tag = "") {
  const s = await L.startServer(opt.k3, modelPath, [...FLAGS, ...extra], { launcher: launcher(np, net, tag), env, startMs: 120000 });
  servers.push(s);
  return s;
}
// mpirun reports the signal it got; the leader's server must have stopped gracefully.
async function stop(s) {
  await s.stop("SIGTERM", 60000);
  assert(/k3 serve: stopped/.test(s.log()), "graceful stop:\n" + s.log());
}
const ref = await L.startServer(opt.k3, modelPath, ["--cache-ram", "0", "-c", "2048"]);
servers.push(ref);

const SYSTEM = { role: "system", content: "You are a careful assistant who answers briefly. ".repeat(8) };
async function chat(server, messages) {
  const r = await L.client(server).chat.completions.create({ model: "k3", messages, temperature: 0, max_tokens: 8 });
  return { usage: r.usage, msg: r.choices[0].message };
}
async function exact(server, messages) {
  const [got, want] = await Promise.all([chat(server, messages), chat(ref, messages)]);
  eq([got.msg.content, got.msg.reasoning_content, got.usage.completion_tokens],
    [want.msg.content, want.msg.reasoning_content, want.usage.completion_tokens], "answer with the cache vs one process without");
  return got;
}
const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;
const back = (m) => ({ role: "assistant", content: m.content ?? "", reasoning_content: m.reasoning_content });
const turns = (q) => {
  const m1 = [SYSTEM, { role: "user", content: q }];
  return {
    m1,
    m2: (r1) => [...m1, back(r1.msg), { role: "user", content: "And why is that so?" }],
    m3: (m2, r2) => [...m2, back(r2.msg), { role: "user", content: "Say it once more." }],
  };
};
const files = (d) => (fs.existsSync(d) ? fs.readdirSync(d).filter((f) => f.endsWith(".k3pc")) : []);

for (const [np, net, pp] of [[2, "shm", 1], [3, "tcp", 1], [4, "shm", 2]]) {
  test(`${np} processes over ${net}${pp > 1 ? ` in ${pp} stages` : ""}: turn 2 from RAM, turn 3 from disk after a restart`, async () => {
    const d = sub(`cache-${np}-${net}`);
    const extra = ["--cache-dir", d, ...(pp > 1 ? ["--pp", String(pp)] : [])];
    const t = turns(`Tell me about process count ${np}.`);
    let s = await start(np, net, extra);
    const r1 = await exact(s, t.m1);
    eq(cached(r1), 0, "turn 1 finds nothing");
    const m2 = t.m2(r1);
    const r2 = await exact(s, m2);
    assert(cached(r2) >= 0.9 * r1.usage.prompt_tokens, `turn 2 cached ${cached(r2)} of turn 1's ${r1.usage.prompt_tokens}`);
    await stop(s);
    assert(files(d).length > 0, "the leader's entries");
    for (let r = 1; r < np; r++) eq(files(path.join(d, `rank-${r}`)).length, files(d).length, `rank ${r}'s entries`);
    s = await start(np, net, extra);
    const r3 = await exact(s, t.m3(m2, r2));
    assert(cached(r3) >= 0.9 * r2.usage.prompt_tokens, `turn 3 after a restart cached ${cached(r3)} of turn 2's ${r2.usage.prompt_tokens}`);
    assert(/from disk/.test(s.log()), "restored from disk:\n" + s.log());
    await stop(s);
  });
}

test("a process without its files turns the hit into a miss everywhere", async () => {
  const d = sub("cache-2-shm");  // the entries of the first test
  for (const f of files(path.join(d, "rank-1"))) fs.rmSync(path.join(d, "rank-1", f));
  const s = await start(2, "shm", ["--cache-dir", d]);
  const t = turns("Tell me about process count 2.");
  const r1 = await exact(s, t.m1);  // its entry is on disk for rank 0 only
  eq(cached(r1), 0, "nothing restored");
  assert(/could not read its share/.test(s.log()), "the leader says why:\n" + s.log());
  assert(/prompt cache \(rank 1\): not using/.test(s.log()), "rank 1 says why:\n" + s.log());
  const again = await exact(s, t.m1);  // written anew by both at its prompt's end
  eq(cached(again), again.usage.prompt_tokens, "a resend is restored whole");
  await stop(s);
  assert(files(path.join(d, "rank-1")).length > 0, "rank 1's entry written anew");
});

test("/slots save and restore: each process its own file", async () => {
  const slots = sub("slots");
  const s = await start(2, "tcp", ["--slot-save-path", slots]);
  const t = turns("A question for the slot API?");
  const r1 = await exact(s, t.m1);
  const saved = await L.postJson(s, "/slots/0?action=save", { filename: "conv" });
  eq(saved.status, 200, "save: " + saved.text);
  assert(fs.existsSync(path.join(slots, "conv")) && fs.existsSync(path.join(slots, "conv.rank-1")), "both files");
  eq((await L.postJson(s, "/slots/0?action=erase", {})).status, 200, "erase");
  const restored = await L.postJson(s, "/slots/0?action=restore", { filename: "conv" });
  eq(restored.status, 200, "restore: " + restored.text);
  const r2 = await exact(s, t.m2(r1));
  assert(cached(r2) >= 0.9 * r1.usage.prompt_tokens, `after a restore turn 2 cached ${cached(r2)} of ${r1.usage.prompt_tokens}`);
  fs.rmSync(path.join(slots, "conv.rank-1"));
  const partial = await L.postJson(s, "/slots/0?action=restore", { filename: "conv" });
  eq(partial.status, 400, "a restore without rank 1's file: " + partial.text);
  assert(/another process/.test(partial.text), partial.text);
  await stop(s);
});

// The pid of rank `rank` of the job tagged `tag` (its environment says both).
function rankPid(tag, rank) {
  for (const p of fs.readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    let e = "";
    try {
      e = fs.readFileSync(`/proc/${p}/environ`, "utf8");
    } catch {
      continue;
    }
    if (e.includes(`K3_TEST_TAG=${tag}\0`) && e.includes(`OMPI_COMM_WORLD_RANK=${rank}\0`)) return Number(p);
  }
  return 0;
}

test("kill -9 of a process while entries are written: the next start trusts nothing half-written", async () => {
  const d = sub("killed");
  const long = { role: "system", content: "Long prompt for a long write. ".repeat(40) };
  const conv = (i) => [long, { role: "user", content: "kill " + i }];
  for (let i = 0; i < 3; i++) {
    const tag = `kill-${process.pid}-${i}`;
    const s = await start(2, "shm", ["--cache-dir", d], tag);
    await exact(s, conv(i));
    const next = chat(s, conv(i + 10)).catch(() => null);  // its writes are under way
    await L.sleep(50 * i);
    const victim = rankPid(tag, 1);
    assert(victim > 0, "rank 1 found");
    process.kill(victim, "SIGKILL");
    await next;
    await s.stop("SIGTERM", 60000).catch(() => {});
  }
  const s = await start(2, "shm", ["--cache-dir", d]);
  assert(!/skipping/.test(s.log()), "no file is bad:\n" + s.log());
  for (let i = 0; i < 3; i++) await exact(s, conv(i));
  await stop(s);
  const tmps = [d, path.join(d, "rank-1")].flatMap((x) => fs.readdirSync(x).filter((f) => f.startsWith(".k3pc-tmp-")));
  eq(tmps, [], "no temporary files left");
});

await L.run("multinode prompt cache", async () => {
  for (const s of servers) if (s.alive()) await s.stop("SIGTERM", 60000).catch(() => s.kill("SIGKILL"));
  return true;
});
