#!/usr/bin/env node
// llama.cpp's tokenizer throughput (node-llama-cpp, vocab-only model) on a text file: one warm-up
// run, then REPS timed runs of model.tokenize(text); prints one JSON line like `tok_tool bench`.
// Usage: node bench_llama.mjs VOCAB.gguf TEXT [--reps N] [--special]
import fs from "node:fs";

const args = process.argv.slice(2);
const [model, textPath] = args;
const reps = args.includes("--reps") ? Number(args[args.indexOf("--reps") + 1]) : 5;
const special = args.includes("--special");
const { getLlama, LlamaLogLevel } = await import(new URL("../node/node_modules/node-llama-cpp/dist/index.js", import.meta.url));
const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.disabled, build: "never" });
const t0 = performance.now();
const m = await llama.loadModel({ modelPath: model, gpuLayers: 0, vocabOnly: true });
const loadS = (performance.now() - t0) / 1000;
const buf = fs.readFileSync(textPath);
const text = buf.toString("utf8");
const n = m.tokenize(text, special).length;
const times = [];
for (let r = 0; r < reps; r++) {
    const t = performance.now();
    const k = m.tokenize(text, special).length;
    times.push((performance.now() - t) / 1000);
    if (k !== n) throw new Error("token count changed between runs");
}
times.sort((a, b) => a - b);
const med = times[Math.floor(times.length / 2)];
console.log(JSON.stringify({ engine: "llama.cpp", bytes: buf.length, tokens: n, load_s: +loadS.toFixed(3), best_s: +times[0].toFixed(4), median_s: +med.toFixed(4), mb_per_s: +(buf.length / 1e6 / med).toFixed(2) }));
await m.dispose();
await llama.dispose();
