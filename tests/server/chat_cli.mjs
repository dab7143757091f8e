// `k3 chat` driven through a pipe: turns, commands, a reply per turn, clean exit.
//
//   node tests/server/chat_cli.mjs [--k3 build-srv/bin/k3]
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import * as L from "./lib.mjs";

const opt = L.args();
const dir = L.tmpdir();
const model = L.makeTinyModel(opt.k3, dir);

L.test("a conversation of three turns with commands", async () => {
  const input = "Hello there\n/think off\nA second\\\nline\n/effort high\n/think on\nThird\n/reset\n/bogus\n/exit\n";
  const r = spawnSync(opt.k3, ["chat", "-m", model, "-t", "1", "-n", "12", "--seed", "7", "--temp", "0.8"], {
    input,
    encoding: "utf8",
    timeout: 30000,
  });
  L.eq(r.status, 0, "exit status; stderr: " + r.stderr);
  const out = r.stdout;
  const replies = out.match(/\[\d+ tokens, [\d.]+ tok\/s[^\]]*\]/g) || [];
  L.eq(replies.length, 3, "one reply line per turn:\n" + out);
  L.assert(/\(thinking off\)/.test(out) && /\(thinking on\)/.test(out), "think commands acknowledged");
  L.assert(/\(conversation cleared\)/.test(out), "reset acknowledged");
  L.assert(/unknown command \/bogus/.test(out), "unknown command reported");
  L.assert(!/\x1b\[/.test(out), "no ANSI escapes when stdout is not a terminal");
});

L.test("same seed, same replies", async () => {
  const run = () =>
    spawnSync(opt.k3, ["chat", "-m", model, "-t", "1", "-n", "16", "--seed", "3"], { input: "Hi\n", encoding: "utf8" })
      .stdout.replace(/\[\d+ tokens.*\]/g, "");
  L.eq(run(), run(), "output");
});

L.test("the cache keeps each turn's state; --session keeps the conversation across runs", async () => {
  const session = `${dir}/chat.session`;
  const chat = (input, extra) =>
    spawnSync(opt.k3, ["chat", "-m", model, "-t", "1", "-n", "10", "--temp", "0", ...extra], { input, encoding: "utf8" });
  const stats = (out) => [...out.matchAll(/prompt (\d+) tokens, (\d+) cached/g)].map((m) => [Number(m[1]), Number(m[2])]);
  const replies = (out) => out.replace(/^(k3 chat:|\(resumed).*\n/gm, "").split(/\[\d+ tokens[^\]]*\]/).slice(0, -1).map((x) => x.trim());
  const a = chat("Hello there\nA second question\n", ["--session", session]);
  L.eq(a.status, 0, "first run; stderr: " + a.stderr);
  const sa = stats(a.stdout);
  L.eq(sa.length, 2, "two turns:\n" + a.stdout);
  L.eq(sa[0][1], 0, "turn 1 cached");
  L.assert(sa[1][1] >= 0.9 * sa[0][0], `turn 2 cached ${sa[1][1]} of turn 1's ${sa[0][0]}`);
  const b = chat("A third one\n", ["--session", session]);
  L.eq(b.status, 0, "resumed run; stderr: " + b.stderr);
  L.assert(/\(resumed 4 messages/.test(b.stdout), "resumed:\n" + b.stdout);
  const sb = stats(b.stdout);
  L.assert(sb[0][1] >= 0.9 * sa[1][0], `turn 3 after the restart cached ${sb[0][1]} of turn 2's ${sa[1][0]}`);
  const ref = chat("Hello there\nA second question\nA third one\n", ["--cache-ram", "0"]);
  L.eq(stats(ref.stdout).map((x) => x[1]), [0, 0, 0], "--cache-ram 0 caches nothing");
  L.eq([...replies(a.stdout), ...replies(b.stdout)], replies(ref.stdout), "the same replies as one run without a cache");
  const other = `${dir}/other.gguf`;
  spawnSync(opt.k3, ["make-tiny", "--out", other, "--seed", "5", "-q"]);
  const f = spawnSync(opt.k3, ["chat", "-m", other, "-t", "1", "--session", session], { input: "Hi\n", encoding: "utf8" });
  L.assert(f.status !== 0 && /another model or setup/.test(f.stderr), "a session of another model is refused: " + f.stderr);
  L.assert(fs.statSync(session).size > 0, "and left as it was");
});

await L.run("chat_cli", () => fs.rmSync(dir, { recursive: true, force: true }));
