#!/usr/bin/env node
// Smoke test of the reference harness: the GGUF writer (read back by node-llama-cpp's own GGUF
// parser), the tiny model generators and every llama.mjs subcommand. Exits 1 on any failure.
// Usage: node selftest.mjs [--keep]   (--keep leaves the temporary directory in place)
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { readGgufFileInfo } from "node-llama-cpp";
import { writeGguf } from "./gguf_write.mjs";
import { tinyLlamaDesc } from "./make_tiny_llama.mjs";
import { tinyKimiK3Desc } from "./make_tiny_kimi_k3.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "k3-node-selftest-"));
let failures = 0;

function check(cond, what) {
    if (cond) console.log(`  ok   ${what}`);
    else { console.log(`  FAIL ${what}`); failures++; }
}

function llama(args, { expectFail = false } = {}) {
    const r = spawnSync(process.execPath, [path.join(here, "llama.mjs"), ...args], { encoding: "utf8", maxBuffer: 1 << 28 });
    if (!expectFail && r.status !== 0) throw new Error(`llama.mjs ${args.join(" ")} failed (${r.status}): ${r.stderr.trim()}`);
    return expectFail ? r : r.stdout.trim() === "" ? null : JSON.parse(r.stdout);
}

const argmax = (xs) => xs.reduce((best, x, i) => (x > xs[best] ? i : best), 0);

function maxDiff(a, b) {
    let m = 0;
    a.rows.forEach((r, i) => r.logits.forEach((x, j) => { m = Math.max(m, Math.abs(x - b.rows[i].logits[j])); }));
    return m;
}

async function testWriter() {
    console.log("gguf_write.mjs");
    const file = path.join(dir, "types.gguf");
    writeGguf(file, {
        alignment: 64,
        metadata: [
            { key: "general.architecture", type: "string", value: "k3-writer-test" },
            { key: "t.u8", type: "uint8", value: 200 }, { key: "t.i8", type: "int8", value: -100 },
            { key: "t.u16", type: "uint16", value: 60000 }, { key: "t.i16", type: "int16", value: -30000 },
            { key: "t.u32", type: "uint32", value: 4000000000 }, { key: "t.i32", type: "int32", value: -2000000000 },
            { key: "t.f32", type: "float32", value: 0.5 }, { key: "t.bool", type: "bool", value: true },
            { key: "t.str", type: "string", value: "héllo ☃" }, { key: "t.u64", type: "uint64", value: "18446744073709551615" },
            { key: "t.i64", type: "int64", value: -5 }, { key: "t.f64", type: "float64", value: 1e300 },
            { key: "t.arr_i32", type: "array", elemType: "int32", value: [0, 0, 0, 1, 1] },
            { key: "t.arr_str", type: "array", elemType: "string", value: ["a", "", "ccc"] },
        ],
        tensors: [
            { name: "a", type: "f32", ne: [3, 2], data: { values: [1, 2, 3, 4, 5, 6] } },
            { name: "b", type: "bf16", ne: [8], data: { seed: 7 } },
            { name: "c", type: "q8_0", ne: [64, 2], data: { seed: 3 } },
            { name: "d", type: 39, ne: [32, 1, 2] },
        ]
    });
    const info = await readGgufFileInfo(file, { logWarnings: false });
    const t = info.metadata.t;
    check(info.version === 3, "version 3");
    check(t.u8 === 200 && t.i8 === -100 && t.u16 === 60000 && t.i16 === -30000, "8/16-bit scalars");
    check(t.u32 === 4000000000 && t.i32 === -2000000000 && t.f32 === 0.5 && t.bool === true, "32-bit scalars, bool");
    check(t.str === "héllo ☃", "UTF-8 string");
    check(BigInt(t.u64) === 18446744073709551615n && BigInt(t.i64) === -5n && t.f64 === 1e300, "64-bit scalars");
    check(JSON.stringify(t.arr_i32) === "[0,0,0,1,1]" && JSON.stringify(t.arr_str) === '["a","","ccc"]', "arrays");
    check(info.metadata.general.alignment === 64, "general.alignment written");
    const ti = info.tensorInfo;
    const offs = ti.map((x) => Number(x.offset));
    check(ti.length === 4 && JSON.stringify(offs) === "[0,64,128,320]", `packed offsets ${offs}`);
    check(JSON.stringify(ti.map((x) => x.ggmlType)) === "[0,30,8,39]", "tensor types");
    const bytes = fs.readFileSync(file);
    // data blob = 64 + 64 + 192 + 64 padded bytes at the end of the file
    check(bytes.length % 64 === 0, "file padded to alignment");
    const blob = bytes.length - 384;
    const f32 = new Float32Array(bytes.buffer.slice(bytes.byteOffset + blob, bytes.byteOffset + blob + 24));
    check(JSON.stringify([...f32]) === "[1,2,3,4,5,6]", "f32 tensor data at its offset");
}

function testModel(name, file, { parityTol }) {
    console.log(name);
    const load = llama(["load", "--model", file]);
    check(load.ok === true && load.n_vocab > 256, `load: arch ${load.arch}, n_vocab ${load.n_vocab}`);

    const ids = [1, 2, 3, 104, 101, 108, 108, 111, 32, 116];
    const batchOut = path.join(dir, `${name}-b.json`), incOut = path.join(dir, `${name}-i.json`);
    llama(["logits", "--model", file, "--ids", ids.join(","), "--out", batchOut]);
    llama(["logits", "--model", file, "--ids", ids.join(","), "--mode", "incremental", "--out", incOut]);
    const b = JSON.parse(fs.readFileSync(batchOut, "utf8")), inc = JSON.parse(fs.readFileSync(incOut, "utf8"));
    check(b.rows.length === ids.length && b.rows.every((r) => r.logits.length === load.n_vocab && r.logits.every(Number.isFinite)), "logits: every position, finite");
    const d = maxDiff(b, inc);
    check(d <= parityTol, `batch vs incremental max |diff| ${d.toExponential(2)} <= ${parityTol}`);
    check(b.settings.flash_attention === false && b.settings.kv_type_k === "f32" && b.settings.kv_type_v === "f32", "settings: FA off, f32 KV");

    const gen = llama(["generate", "--model", file, "--ids", ids.join(","), "-n", "6"]).ids;
    check(gen.length === 6 && gen[0] === argmax(b.rows.at(-1).logits), `generate: ${gen.length} tokens, first = argmax of last logits`);
    const all = [...ids, ...gen.slice(0, -1)];
    const g = llama(["logits", "--model", file, "--ids", all.join(",")]);
    check(gen.every((t, k) => t === argmax(g.rows[ids.length - 1 + k].logits)), "generate is greedy over the whole continuation");
    return load;
}

function testTokenizer(file) {
    console.log("tokenize / detokenize");
    const strs = ["hello the world", "<|bos|>hi\n", "", "naïve ☃ tab\tend"];
    const inF = path.join(dir, "strings.json"), idsF = path.join(dir, "ids.json");
    fs.writeFileSync(inF, JSON.stringify(strs));
    const plain = llama(["tokenize", "--model", file, "--in", inF]);
    llama(["tokenize", "--model", file, "--special", "--in", inF, "--out", idsF]);
    const special = JSON.parse(fs.readFileSync(idsF, "utf8"));
    check(JSON.stringify(plain[0]) === "[256,259,111,258,32,119,260,108,100]", `merges applied: ${JSON.stringify(plain[0])}`);
    check(special[1][0] === 261 && !plain[1].includes(261), "--special parses control tokens");
    check(plain[2].length === 0, "empty string -> no tokens");
    const back = llama(["detokenize", "--model", file, "--special", "--in", idsF]);
    check(JSON.stringify(back) === JSON.stringify(strs), "detokenize --special round-trips");
    const one = llama(["detokenize", "--model", file, "--ids", "104,105"]);
    check(one[0] === "hi", "detokenize --ids");
}

function testBenchInsights(file) {
    console.log("bench / insights / errors");
    const r = llama(["bench", "--model", file, "-p", "32", "-n", "8", "--reps", "2"]);
    check(r.pp_tokens_per_s > 0 && r.tg_tokens_per_s > 0 && r.pp_samples.length === 2, `bench: pp ${r.pp_tokens_per_s.toFixed(0)} t/s, tg ${r.tg_tokens_per_s.toFixed(0)} t/s`);
    const ins = llama(["insights", "--model", file]);
    check(ins.tensor_count === 21 && ins.tensor_types.F32 === 21 && ins.arch === "llama", "insights: 21 F32 tensors");
    const bad = path.join(dir, "bad.gguf");
    const desc = tinyLlamaDesc();
    desc.tensors.pop();
    writeGguf(bad, desc);
    const f = llama(["load", "--model", bad], { expectFail: true });
    check(f.status === 1 && /missing tensor 'blk\.1\.ffn_down\.weight'/.test(f.stderr) && JSON.parse(f.stdout).ok === false, `load failure reported: ${f.stderr.trim().slice(0, 120)}`);
    const u = llama(["logits", "--model", file], { expectFail: true });
    check(u.status === 2 && /--ids is required/.test(u.stderr), "usage error exits 2");
}

try {
    await testWriter();
    const tiny = path.join(dir, "tiny-llama.gguf");
    writeGguf(tiny, tinyLlamaDesc());
    testModel("tiny llama (f32)", tiny, { parityTol: 1e-4 });
    testTokenizer(tiny);
    testBenchInsights(tiny);
    const kimi = path.join(dir, "tiny-kimi-k3.gguf");
    writeGguf(kimi, tinyKimiK3Desc());
    testModel("tiny kimi-k3 (f32, KDA+MLA+AttnRes+latent MoE)", kimi, { parityTol: 1e-4 });
    const kimiMx = path.join(dir, "tiny-kimi-k3-mxfp4.gguf");
    writeGguf(kimiMx, tinyKimiK3Desc({ type: "bf16", experts: "mxfp4" }));
    testModel("tiny kimi-k3 (bf16 + mxfp4 experts)", kimiMx, { parityTol: 1e-4 });
} catch (e) {
    console.log(`  FAIL ${e.message}`);
    failures++;
}
if (!process.argv.includes("--keep")) fs.rmSync(dir, { recursive: true, force: true });
else console.log(`kept ${dir}`);
console.log(failures === 0 ? "selftest: PASS" : `selftest: FAIL (${failures})`);
process.exit(failures === 0 ? 0 : 1);
