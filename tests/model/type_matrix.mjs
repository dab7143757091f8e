#!/usr/bin/env node
// Writes kimi-k3 files with the independent writer (tests/node/make_tiny_kimi_k3.mjs, --wide
// shapes, 3 layers: KDA + dense FFN, KDA + MoE, MLA + MoE) and runs llama.cpp (node-llama-cpp 3.22.1) on each, for test_type_matrix.cpp.
// A case with "writer": "ggml" is written as llama.cpp's tools write files instead: the same model in
// F32 (FILE.src.gguf), its tensors quantized by ggml and written by gguf-py (tests/node/ggml_gguf.py,
// first matching rule wins, a synthetic importance matrix for every quantized tensor).
//
// usage: node type_matrix.mjs PLAN.json RESULTS.jsonl
// PLAN: {"ids": [...], "eps": 0.5, "cases": [{"name", "file", "tensorTypes": [[regex, type], ...], "writer"?}]}
// For every case, in order, RESULTS gets a line {"start": name} before llama.cpp runs, and
// {"name", "ok", "unfit": [...], "error"} after; with ok, the logits of every position go to
// FILE.batch.logits (the prompt in one batch) and FILE.incremental.logits (one token per
// decode), raw f32, rows x n_vocab. A case that makes llama.cpp abort leaves its "start" line
// without an end: the caller reruns the plan from the next case.
import fs from "node:fs";
import { execFileSync } from "node:child_process";
import { writeGguf } from "../node/gguf_write.mjs";
import { tinyKimiK3Desc, WIDE } from "../node/make_tiny_kimi_k3.mjs";

const { getLlama, LlamaLogLevel } = await import(
    new URL("../node/node_modules/node-llama-cpp/dist/index.js", import.meta.url).href);

const [planPath, outPath] = process.argv.slice(2);
if (!planPath || !outPath) {
    process.stderr.write("usage: node type_matrix.mjs PLAN.json RESULTS.jsonl\n");
    process.exit(2);
}
const plan = JSON.parse(fs.readFileSync(planPath, "utf8"));
const out = fs.openSync(outPath, "a");
const line = (obj) => fs.writeSync(out, JSON.stringify(obj) + "\n");

const errors = [];
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    logLevel: LlamaLogLevel.error, logger: (level, message) => { errors.push(String(message).trimEnd()); }
});
const item = (t) => [t, { generateNext: { logits: true, options: { temperature: 0, seed: 0 } } }];

for (const c of plan.cases) {
    const ggml = c.writer === "ggml";
    const desc = tinyKimiK3Desc({
        ...WIDE, kv: [0, 0, 1], eps: plan.eps, seed: 3, tensorTypes: ggml ? [] : c.tensorTypes.map(([re, ty]) => [new RegExp(re), ty])
    });
    if (ggml) {
        writeGguf(`${c.file}.src.gguf`, desc);
        const script = new URL("../node/ggml_gguf.py", import.meta.url).pathname;
        const rules = c.tensorTypes.flatMap(([re, ty]) => ["--tensor-type", `${re}=${ty}`]);
        const res = execFileSync("/usr/bin/python3", [script, `${c.file}.src.gguf`, c.file, ...rules, "--imatrix-synthetic", "1"]);
        desc.unfit = JSON.parse(res.toString()).unfit;
    } else {
        writeGguf(c.file, desc);
    }
    line({ start: c.name });
    errors.length = 0;
    let model = null, ctx = null;
    try {
        model = await llama.loadModel({
            modelPath: c.file, gpuLayers: 0, useMmap: true, checkTensors: false,
            defaultContextFlashAttention: false, ignoreMemorySafetyChecks: true
        });
        const V = desc.metadata.find((m) => m.key === "tokenizer.ggml.tokens").value.length;
        const row = (m, i) => {
            if (!m || m.size !== V) throw new Error(`position ${i}: got ${m?.size ?? 0} logits, expected ${V}`);
            const r = new Float32Array(V);
            for (const [tok, v] of m) r[tok] = v;
            return Buffer.from(r.buffer);
        };
        for (const mode of ["batch", "incremental"]) {
            ctx = await model.createContext({
                contextSize: 256, batchSize: plan.ids.length, sequences: 1, threads: 1, flashAttention: false,
                experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
                ignoreMemorySafetyChecks: true, failedCreationRemedy: false
            });
            const seq = ctx.getSequence();
            const rows = [];
            if (mode === "batch") {
                const res = await seq.controlledEvaluate(plan.ids.map(item));
                plan.ids.forEach((_, i) => rows.push(row(res[i]?.next?.logits, i)));
            } else {
                for (const [i, t] of plan.ids.entries()) rows.push(row((await seq.controlledEvaluate([item(t)]))[0]?.next?.logits, i));
            }
            fs.writeFileSync(`${c.file}.${mode}.logits`, Buffer.concat(rows));
            await ctx.dispose();
            ctx = null;
        }
        line({ name: c.name, ok: true, unfit: desc.unfit });
    } catch (e) {
        line({ name: c.name, ok: false, unfit: desc.unfit, error: `${e.message} | ${[...new Set(errors)].join(" | ")}` });
    } finally {
        if (ctx) await ctx.dispose();
        if (model) await model.dispose();
    }
}
fs.closeSync(out);
