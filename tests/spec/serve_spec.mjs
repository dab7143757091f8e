// `k3 serve` with speculative decoding, end to end over HTTP: greedy completions with n-gram drafts
// and with a DSpark draft (written by dspark_ref.py, converted by `k3 convert`) are exactly those
// of a plain server, two requests at a time (--parallel 2), again after a prompt-cache restore; the
// responses' timings count drafted and accepted tokens and /metrics exports k3_spec_*.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { args, tmpdir, makeTinyModel, startServer, postJson, test, run, assert, eq, here } from "../server/lib.mjs";

const a = args();
const dir = tmpdir();
const model = makeTinyModel(a.k3, dir);
execFileSync("/usr/bin/python3", [path.join(here, "../spec/dspark_ref.py"), "write", path.join(dir, "draft-hf"), "--seed", "4"]);
execFileSync(a.k3, ["convert", "-q", "--src", path.join(dir, "draft-hf"), "--out-dir", dir, "--name", "draft"]);
const draft = path.join(dir, "draft.gguf");

const prompts = [
  "The lighthouse keeper climbed the lighthouse stairs, and the lighthouse keeper",
  "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(",
  "red green blue red green blue red",
];

async function complete(server, prompt) {
  const r = await postJson(server, "/v1/completions", { prompt, max_tokens: 32, temperature: 0, ignore_eos: true });
  assert(r.status === 200, `status ${r.status}: ${r.text}`);
  return r.body;
}
// all prompts at once (two slots), twice: the second round is served from the prompt cache
async function rounds(server) {
  const out = [];
  for (let round = 0; round < 2; round++) out.push(await Promise.all(prompts.map((p) => complete(server, p))));
  return out;
}

let plain;
test("plain server", async () => {
  const s = await startServer(a.k3, model, ["--parallel", "2"]);
  try {
    plain = (await rounds(s))[0].map((b) => b.choices[0].text);
  } finally {
    await s.stop();
  }
});

for (const [name, flags] of [["ngram", ["--spec-type", "ngram"]], ["dspark", ["-md", draft]], ["dspark, draft-max 3", ["-md", draft, "--draft-max", "3"]]]) {
  test(`${name}: the plain server's text, with drafts counted`, async () => {
    const s = await startServer(a.k3, model, ["--parallel", "2", ...flags]);
    try {
      const [first, second] = await rounds(s);
      eq(first.map((b) => b.choices[0].text), plain, `${name} texts`);
      eq(second.map((b) => b.choices[0].text), plain, `${name} texts after a prompt-cache restore`);
      assert(second.every((b) => b.usage.prompt_tokens_details.cached_tokens > 0), "the second round restored prompts");
      const drafted = [...first, ...second].reduce((n, b) => n + b.timings.draft_n, 0);
      const accepted = [...first, ...second].reduce((n, b) => n + b.timings.draft_n_accepted, 0);
      assert(drafted > 0 && accepted <= drafted, `drafted ${drafted}, accepted ${accepted}`);
      const metrics = await (await fetch(s.url + "/metrics")).text();
      const m = /k3_spec_draft_tokens_total (\d+)/.exec(metrics);
      assert(m && Number(m[1]) === drafted, `/metrics counts the drafts: ${m && m[1]} vs ${drafted}`);
    } finally {
      await s.stop();
    }
  });
}

test("a draft that does not fit the model is refused at start", async () => {
  execFileSync("/usr/bin/python3", [path.join(here, "../spec/dspark_ref.py"), "write", path.join(dir, "bad-hf"), "--hidden", "32"]);
  execFileSync(a.k3, ["convert", "-q", "--src", path.join(dir, "bad-hf"), "--out-dir", dir, "--name", "bad"]);
  let err = "";
  try {
    await startServer(a.k3, model, ["-md", path.join(dir, "bad.gguf")]);
  } catch (e) {
    err = String(e);
  }
  assert(/does not fit/.test(err) && /hidden size/.test(err), "refusal names the mismatch: " + err);
});

run("serve_spec");
