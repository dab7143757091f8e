#!/usr/bin/env node
// Loads several GGUF files in one llama.cpp process (node-llama-cpp 3.22.1 prebuilt CPU binaries,
// the same settings as tests/node/llama.mjs) and greedily continues one prompt with each, so the
// quantizer tests pay node's start-up once.
// usage: node llama_batch.mjs --ids 1,2,3 -n 16 A.gguf B.gguf ...
// prints {"A.gguf": {"ok": true, "ids": [...]}, "B.gguf": {"ok": false, "error": "..."}, ...}
// node-llama-cpp is installed under tests/node (npm ci there); import it from that tree.
const { getLlama, LlamaLogLevel } = await import(
    new URL("../node/node_modules/node-llama-cpp/dist/index.js", import.meta.url).href);

const args = process.argv.slice(2);
let ids = null, n = 16;
const files = [];
for (let i = 0; i < args.length; i++) {
    if (args[i] === "--ids") ids = args[++i].split(",").map(Number);
    else if (args[i] === "-n") n = Number(args[++i]);
    else files.push(args[i]);
}
if (!ids || files.length === 0) {
    process.stderr.write("usage: node llama_batch.mjs --ids 1,2,3 -n 16 A.gguf ...\n");
    process.exit(2);
}

const errors = [];
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    logLevel: LlamaLogLevel.error,
    logger: (level, message) => { errors.push(String(message).trimEnd()); }
});
const GREEDY = { temperature: 0, seed: 0 };
const out = {};
for (const f of files) {
    errors.length = 0;
    let model = null, ctx = null;
    try {
        model = await llama.loadModel({
            modelPath: f, gpuLayers: 0, useMmap: true, checkTensors: false,
            defaultContextFlashAttention: false, ignoreMemorySafetyChecks: true
        });
        ctx = await model.createContext({
            contextSize: Math.max(256, ids.length + n), batchSize: ids.length, sequences: 1, threads: 1,
            flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
            ignoreMemorySafetyChecks: true, failedCreationRemedy: false
        });
        const seq = ctx.getSequence();
        const next = { generateNext: { token: true, options: GREEDY } };
        const got = [];
        let res = await seq.controlledEvaluate(ids.map((t, i) => (i === ids.length - 1 ? [t, next] : t)));
        let tok = res[ids.length - 1]?.next?.token;
        while (got.length < n) {
            got.push(tok);
            if (got.length === n) break;
            res = await seq.controlledEvaluate([[tok, next]]);
            tok = res[0]?.next?.token;
        }
        out[f] = { ok: true, ids: got };
    } catch (e) {
        out[f] = { ok: false, error: `${e.message} | ${[...new Set(errors)].join(" | ")}` };
    } finally {
        if (ctx) await ctx.dispose();
        if (model) await model.dispose();
    }
}
process.stdout.write(JSON.stringify(out) + "\n");
