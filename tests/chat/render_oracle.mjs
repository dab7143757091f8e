// Renders the chat-template test corpus with @huggingface/jinja (a real Jinja implementation)
// and writes the expectations that tests/chat/test_render_corpus.cpp compares k3 against.
//
//   node tests/chat/render_oracle.mjs            # rewrite tests/chat/data/expected_hf.json
//   node tests/chat/render_oracle.mjs --check    # exit 1 if the checked-in file is stale
//
// Templates: ../shared/data/Kimi-K3.jinja (the reference), data/templates/kimi-k3.jinja (k3's own)
// on data/corpus.json and data/divergences.json; tests/chat/templates/*.jinja on data/generic.json.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const require = createRequire(path.join(root, "tests/node/package.json"));
const { Template } = await import(require.resolve("@huggingface/jinja"));

const sharedTemplate = process.env.K3_SHARED_DIR
  ? path.join(process.env.K3_SHARED_DIR, "data/Kimi-K3.jinja")
  : path.resolve(root, "../shared/data/Kimi-K3.jinja");
const read = (p) => fs.readFileSync(p, "utf8");
if (!fs.existsSync(sharedTemplate)) {
  console.log(`skipped: no ${sharedTemplate}`);
  process.exit(77);
}

function render(source, vars) {
  try {
    return { output: new Template(source).render(structuredClone(vars)) };
  } catch (e) {
    return { error: String(e.message || e) };
  }
}

const hfVersion = JSON.parse(read(path.join(root, "tests/node/node_modules/@huggingface/jinja/package.json"))).version;
const result = { generator: "@huggingface/jinja " + hfVersion, templates: {} };
const corpus = JSON.parse(read(path.join(here, "data/corpus.json")));
const generic = JSON.parse(read(path.join(here, "data/generic.json")));
const divergences = JSON.parse(read(path.join(here, "data/divergences.json"))).cases;
const kimi = { "Kimi-K3.jinja": read(sharedTemplate), "kimi-k3.jinja": read(path.join(root, "data/templates/kimi-k3.jinja")) };
for (const [name, src] of Object.entries(kimi)) {
  result.templates[name] = {};
  for (const c of [...corpus, ...divergences]) result.templates[name][c.name] = render(src, c.vars);
}
const tdir = path.join(here, "templates");
for (const f of fs.readdirSync(tdir).filter((f) => f.endsWith(".jinja")).sort()) {
  result.templates[f] = {};
  for (const c of generic) result.templates[f][c.name] = render(read(path.join(tdir, f)), c.vars);
}

const out = path.join(here, "data/expected_hf.json");
const text = JSON.stringify(result, null, 1) + "\n";
if (process.argv.includes("--check")) {
  if (!fs.existsSync(out) || read(out) !== text) {
    console.error("tests/chat/data/expected_hf.json is stale: run node tests/chat/render_oracle.mjs");
    process.exit(1);
  }
  console.log("expected_hf.json is up to date");
} else {
  fs.writeFileSync(out, text);
  let n = 0, errs = 0;
  for (const t of Object.values(result.templates)) for (const r of Object.values(t)) { n++; if (r.error) errs++; }
  console.log(`wrote ${out}: ${n} renderings (${errs} errors)`);
}
