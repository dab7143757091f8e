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

await L.run("chat_cli", () => fs.rmSync(dir, { recursive: true, force: true }));
