#!/usr/bin/env node
// llama.cpp reference harness (through node-llama-cpp's prebuilt CPU binaries) for k3's tests.
// Every subcommand prints one JSON document to stdout (or --out FILE); on failure it prints a
// one-line error to stderr and exits 1 (2 for usage errors). See README.md for the CLI.
import fs from "node:fs";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { getLlama, LlamaLogLevel, readGgufFileInfo, GgufInsights } from "node-llama-cpp";

const USAGE = `usage: node llama.mjs COMMAND --model F.gguf [options]
  load        --model F [--no-mmap]
  logits      --model F --ids 1,2,3 [--mode batch|incremental] [--threads N] [--ctx N] [--out F.json] [--bin F.f32]
              [--dump DIR [--dump-lib libk3_llama_dump.so]]
  generate    --model F --ids 1,2,3 -n 32 [--threads N] [--ctx N] [--stop-eos]
  tokenize    --model F [--special] (--in strings.json | --text S) [--out ids.json]
  detokenize  --model F [--special] (--in ids.json | --ids 1,2,3) [--out strings.json]
  bench       --model F -p 512 -n 128 [--threads N] [--reps R] [--no-warmup]
  insights    --model F
common: --threads N (default 1) --verbose (llama.cpp log to stderr) --no-mmap`;

class UsageError extends Error {}
class LoadError extends Error {}

function parseArgs(argv) {
    const flags = new Set(["--special", "--stop-eos", "--verbose", "--no-mmap", "--no-warmup"]);
    const a = { _: [] };
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i];
        if (flags.has(k)) a[k.replace(/^-+/, "")] = true;
        else if (k.startsWith("-") && k.length > 1 && isNaN(Number(k))) {
            if (i + 1 >= argv.length) throw new UsageError(`missing value for ${k}`);
            a[k.replace(/^-+/, "")] = argv[++i];
        } else a._.push(k);
    }
    return a;
}

function intArg(a, name, def) {
    if (a[name] === undefined) {
        if (def === undefined) throw new UsageError(`--${name} is required`);
        return def;
    }
    const v = Number(a[name]);
    if (!Number.isInteger(v) || v < 0) throw new UsageError(`--${name} must be a non-negative integer`);
    return v;
}

function idsArg(a) {
    if (a.ids === undefined) throw new UsageError("--ids is required");
    const ids = String(a.ids).split(",").filter((s) => s.trim() !== "").map(Number);
    if (ids.length === 0 || ids.some((x) => !Number.isInteger(x) || x < 0)) throw new UsageError("--ids must be a comma-separated list of token ids");
    return ids;
}

// llama.cpp log lines, kept so that a load failure can report llama.cpp's own error text.
const logLines = [];
let verbose = false;

async function openLlama() {
    return getLlama({
        gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
        logLevel: LlamaLogLevel.debug,
        logger: (level, message) => {
            const line = String(message).trimEnd();
            if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal || level === LlamaLogLevel.warn) logLines.push(line);
            if (verbose) process.stderr.write(`[llama.cpp ${level}] ${line}\n`);
        }
    });
}

async function loadModel(llama, a, { vocabOnly = false } = {}) {
    if (!a.model) throw new UsageError("--model is required");
    if (!fs.existsSync(a.model)) throw new Error(`model file not found: ${a.model}`);
    const mark = logLines.length;
    try {
        return await llama.loadModel({
            modelPath: a.model, gpuLayers: 0, vocabOnly, useMmap: !a["no-mmap"], checkTensors: false,
            defaultContextFlashAttention: false, ignoreMemorySafetyChecks: true
        });
    } catch (e) {
        // node-llama-cpp first loads the model in a "simulation" pass, so lines repeat; keep
        // llama.cpp's own lines, once each, and drop the wrapper's noise.
        const noise = /^(Failed simulating|Failed to load model|llama_model_load_from_file_impl: failed to load model|Failed to parse GGUF)/;
        const errs = [...new Set(logLines.slice(mark).filter((l) => l.trim() !== "" && !noise.test(l)))];
        throw new LoadError(errs.length ? errs.join(" | ") : String(e.message));
    }
}

function vocabSize(model) {
    const t = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens;
    return Array.isArray(t) ? t.length : undefined;
}

// A context with the parity settings: CPU, flash attention off, F32 K/V cache, one sequence.
async function createContext(model, { size, batch, threads }) {
    const ctx = await model.createContext({
        contextSize: Math.max(size, 32), batchSize: Math.max(batch, 1), sequences: 1, threads,
        flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
        ignoreMemorySafetyChecks: true, failedCreationRemedy: false
    });
    return ctx;
}

function contextSettings(ctx, threads) {
    return {
        flash_attention: ctx.flashAttention, kv_type_k: kvTypeName(ctx.kvCacheKeyType),
        kv_type_v: kvTypeName(ctx.kvCacheValueType), threads, context_size: ctx.contextSize,
        batch_size: ctx.batchSize
    };
}

function kvTypeName(t) {
    return t === undefined ? "default (f16)" : ggmlTypeName(t).toLowerCase();
}

const GREEDY = { temperature: 0, seed: 0 };

function logitsRow(map, V) {
    const row = new Float32Array(V);
    row.fill(NaN);
    for (const [tok, v] of map) row[tok] = v;
    return row;
}

// Shortest decimal that reads back (strtof) to the same float32.
function f32str(x) {
    if (!Number.isFinite(x)) return Number.isNaN(x) ? "null" : (x > 0 ? "1e39" : "-1e39");
    return String(Number(x.toPrecision(9)));
}

async function evalLogits(seq, ids, mode) {
    const item = (t) => [t, { generateNext: { logits: true, options: GREEDY } }];
    if (mode === "batch") {
        const res = await seq.controlledEvaluate(ids.map(item));
        return ids.map((_, i) => res[i]?.next?.logits);
    }
    const rows = [];
    for (const t of ids) rows.push((await seq.controlledEvaluate([item(t)]))[0]?.next?.logits);
    return rows;
}

// Streams the result to --out or stdout without building one huge string.
function openSink(a) {
    if (a.out) {
        const fd = fs.openSync(a.out, "w");
        return { write: (s) => fs.writeSync(fd, s), close: () => fs.closeSync(fd) };
    }
    // process.stdout writes are synchronous for files and pipes on Linux; fs.writeSync(1) may
    // fail with EAGAIN on a non-blocking pipe.
    return { write: (s) => process.stdout.write(s), close: () => {} };
}

function emit(a, obj) {
    const sink = openSink(a);
    sink.write(JSON.stringify(obj) + "\n");
    sink.close();
}

const commands = {
    async load(llama, a) {
        const model = await loadModel(llama, a);
        return { ok: true, n_vocab: vocabSize(model), arch: model.fileInfo.metadata.general.architecture,
            n_params: model.fileInsights.totalParameters, train_ctx: model.trainContextSize,
            description: model.typeDescription };
    },

    async logits(llama, a) {
        const ids = idsArg(a);
        const mode = a.mode ?? "batch";
        if (mode !== "batch" && mode !== "incremental") throw new UsageError("--mode must be batch or incremental");
        const threads = intArg(a, "threads", 1);
        const ctxSize = intArg(a, "ctx", Math.max(ids.length, 256));
        if (ctxSize < ids.length) throw new UsageError(`--ctx ${ctxSize} is smaller than the ${ids.length} ids (no context shift allowed)`);
        const model = await loadModel(llama, a);
        const ctx = await createContext(model, { size: ctxSize, batch: ids.length, threads });
        const seq = ctx.getSequence();
        const t0 = performance.now();
        const maps = await evalLogits(seq, ids, mode);
        const evalMs = performance.now() - t0;
        const V = vocabSize(model) ?? maps[0]?.size;
        maps.forEach((m, i) => { if (!m || m.size !== V) throw new Error(`position ${i}: got ${m?.size ?? 0} logits, expected ${V}`); });
        const rows = maps.map((m) => logitsRow(m, V));
        if (a.bin) fs.writeFileSync(a.bin, Buffer.concat(rows.map((r) => Buffer.from(r.buffer))));
        const sink = openSink(a);
        sink.write(`{"n_vocab":${V},"mode":"${mode}","eval_ms":${evalMs.toFixed(3)},"settings":${JSON.stringify(contextSettings(ctx, threads))},"rows":[`);
        rows.forEach((r, i) => {
            const parts = new Array(V);
            for (let j = 0; j < V; j++) parts[j] = f32str(r[j]);
            sink.write(`${i ? "," : ""}\n{"pos":${i},"token":${ids[i]},"logits":[${parts.join(",")}]}`);
        });
        sink.write("]}\n");
        sink.close();
        return undefined;
    },

    async generate(llama, a) {
        const ids = idsArg(a);
        const n = intArg(a, "n", 32);
        const threads = intArg(a, "threads", 1);
        const ctxSize = intArg(a, "ctx", Math.max(ids.length + n, 256));
        if (ctxSize < ids.length + n) throw new UsageError(`--ctx ${ctxSize} is smaller than ids + n = ${ids.length + n} (no context shift allowed)`);
        const model = await loadModel(llama, a);
        const ctx = await createContext(model, { size: ctxSize, batch: ids.length, threads });
        const seq = ctx.getSequence();
        const next = { generateNext: { token: true, options: GREEDY } };
        const out = [];
        let res = await seq.controlledEvaluate(ids.map((t, i) => (i === ids.length - 1 ? [t, next] : t)));
        let tok = res[ids.length - 1]?.next?.token;
        while (out.length < n) {
            if (tok == null) throw new Error("sampling returned no token");
            out.push(tok);
            if (a["stop-eos"] && model.isEogToken(tok)) break;
            if (out.length === n) break;
            res = await seq.controlledEvaluate([[tok, next]]);
            tok = res[0]?.next?.token;
        }
        return { ids: out, settings: contextSettings(ctx, threads) };
    },

    async tokenize(llama, a) {
        const texts = a.in !== undefined ? JSON.parse(fs.readFileSync(a.in, "utf8")) : a.text !== undefined ? [a.text] : null;
        if (!Array.isArray(texts) || texts.some((t) => typeof t !== "string")) throw new UsageError("--in must be a JSON array of strings (or give --text)");
        const model = await loadModel(llama, a, { vocabOnly: true });
        const special = Boolean(a.special);
        return texts.map((t) => model.tokenize(t, special));
    },

    async detokenize(llama, a) {
        const lists = a.in !== undefined ? JSON.parse(fs.readFileSync(a.in, "utf8")) : a.ids !== undefined ? [idsArg(a)] : null;
        if (!Array.isArray(lists) || lists.some((l) => !Array.isArray(l))) throw new UsageError("--in must be a JSON array of arrays of token ids (or give --ids)");
        const model = await loadModel(llama, a, { vocabOnly: true });
        const special = Boolean(a.special);
        return lists.map((l) => model.detokenize(l, special));
    },

    async bench(llama, a) {
        const p = intArg(a, "p", 512), n = intArg(a, "n", 128), reps = Math.max(1, intArg(a, "reps", 5));
        const threads = intArg(a, "threads", 1);
        const model = await loadModel(llama, a);
        const V = vocabSize(model);
        const ctx = await createContext(model, { size: Math.max(p, n) + 1, batch: Math.max(p, 1), threads });
        const seq = ctx.getSequence();
        let s = 12345;
        const rnd = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return s % V; };
        const last = { generateNext: { token: true, options: GREEDY } };
        const runPP = async (k) => {
            const toks = Array.from({ length: k }, rnd);
            const t0 = performance.now();
            await seq.controlledEvaluate(toks.map((t, i) => (i === k - 1 ? [t, last] : t)));
            return (performance.now() - t0) / 1000;
        };
        const runTG = async (k) => {
            const t0 = performance.now();
            for (let i = 0; i < k; i++) await seq.controlledEvaluate([[rnd(), last]]);
            return (performance.now() - t0) / 1000;
        };
        if (!a["no-warmup"]) {
            if (p > 0) { await runPP(p); await seq.clearHistory(); }
            if (n > 0) { await runTG(1); await seq.clearHistory(); }
        }
        const pp = [], tg = [];
        for (let r = 0; r < reps; r++) {
            if (p > 0) { pp.push(p / await runPP(p)); await seq.clearHistory(); }
            if (n > 0) { tg.push(n / await runTG(n)); await seq.clearHistory(); }
        }
        const stat = (xs) => {
            if (xs.length === 0) return [null, null];
            const m = xs.reduce((x, y) => x + y, 0) / xs.length;
            const sd = xs.length > 1 ? Math.sqrt(xs.reduce((x, y) => x + (y - m) ** 2, 0) / (xs.length - 1)) : 0;
            return [m, sd];
        };
        const [ppm, pps] = stat(pp), [tgm, tgs] = stat(tg);
        return { pp_tokens_per_s: ppm, pp_stddev: pps, tg_tokens_per_s: tgm, tg_stddev: tgs, p, n, reps,
            pp_samples: pp, tg_samples: tg, settings: contextSettings(ctx, threads) };
    },

    async insights(llama, a) {
        if (!a.model) throw new UsageError("--model is required");
        const info = await readGgufFileInfo(a.model, { logWarnings: false });
        const ins = await GgufInsights.from(info, llama);
        const types = {};
        for (const t of info.tensorInfo ?? []) {
            const name = ggmlTypeName(t.ggmlType);
            types[name] = (types[name] ?? 0) + 1;
        }
        const meta = info.metadata ?? {};
        const arch = meta.general?.architecture;
        return {
            version: info.version, tensor_count: info.tensorCount !== undefined ? Number(info.tensorCount) : info.tensorInfo?.length,
            arch, tensor_types: types, model_size: ins.modelSize, total_parameters: ins.totalParameters,
            total_layers: ins.totalLayers, train_context_size: ins.trainContextSize,
            embedding_size: ins.embeddingVectorSize, is_recurrent: ins.isRecurrent, is_hybrid: ins.isHybrid,
            supported_by_llama_cpp: ins.isSupportedByLlamaCpp, flash_attention_supported: ins.flashAttentionSupported,
            dominant_tensor_type: ins.dominantTensorType === undefined ? null : ggmlTypeName(ins.dominantTensorType),
            arch_metadata: arch ? meta[arch] : undefined, warnings: ins.getWarnings(a.model),
            tensors: (info.tensorInfo ?? []).map((t) => ({ name: t.name, type: ggmlTypeName(t.ggmlType), ne: t.dimensions.map(Number), offset: Number(t.offset) }))
        };
    }
};

let GgmlTypeNames = null;
function ggmlTypeName(id) { return GgmlTypeNames?.[id] ?? String(id); }

// logits --dump: llama.cpp's named intermediates, written by the llama_dump.cpp shim, which must be
// preloaded when the process starts: this process runs itself again under LD_PRELOAD.
function rerunWithDump(a) {
    const lib = path.resolve(a["dump-lib"] ?? process.env.K3_LLAMA_DUMP_LIB ??
        new URL("../../build/lib/libk3_llama_dump.so", import.meta.url).pathname);
    if (!fs.existsSync(lib)) throw new UsageError(`--dump needs the shim ${lib} (built with the tests; or --dump-lib)`);
    fs.rmSync(a.dump, { recursive: true, force: true });
    fs.mkdirSync(a.dump, { recursive: true });
    const env = { ...process.env, LD_PRELOAD: lib, K3_LLAMA_DUMP: path.resolve(a.dump) };
    return spawnSync(process.execPath, process.argv.slice(1), { stdio: "inherit", env }).status ?? 1;
}

async function main() {
    const argv = process.argv.slice(2);
    const cmd = argv[0];
    if (!cmd || cmd === "--help" || cmd === "-h") { process.stdout.write(USAGE + "\n"); return 0; }
    if (!commands[cmd]) throw new UsageError(`unknown command ${cmd}`);
    const a = parseArgs(argv.slice(1));
    if (a.dump && cmd !== "logits") throw new UsageError("--dump is a logits option");
    if (a.dump && !process.env.K3_LLAMA_DUMP) return rerunWithDump(a);
    verbose = Boolean(a.verbose);
    const { GgmlType } = await import("node-llama-cpp");
    GgmlTypeNames = GgmlType;
    const llama = await openLlama();
    const result = await commands[cmd](llama, a);
    if (result !== undefined) emit(a, result);
    return 0;
}

main().then((rc) => process.exit(rc), (e) => {
    const msg = String(e?.message ?? e).replace(/\s*\n\s*/g, " | ");
    if (e instanceof LoadError) {
        process.stdout.write(JSON.stringify({ ok: false, error: msg }) + "\n");
        process.stderr.write(`llama.mjs: failed to load model: ${msg}\n`);
    } else process.stderr.write(`llama.mjs: ${msg}\n`);
    if (e instanceof UsageError) process.stderr.write(USAGE + "\n");
    process.exit(e instanceof UsageError ? 2 : 1);
});
