#!/usr/bin/env node
// Compares two intermediate dumps (`k3 logits --dump A`, `llama.mjs logits --dump B`, or two k3
// dumps) op by op, in the order of the forward pass, and names the first op that parts.
// usage: node dump_diff.mjs A B [--json]
// Per op and layer: the max |a - b| of each position (row), and the first position where they
// differ; the first op that parts is the earliest in forward order that differs at any position. Ops are matched by name; where the two engines name one value differently the table
// below maps k3's name to llama.cpp's. Ops that only one side writes are skipped; a tensor whose
// two sides differ in size is listed as such. Exit status: 0.
import fs from "node:fs";

// k3 name -> llama.cpp name of the same value, null where llama.cpp names another value so
// (tests/node/llama_dump.cpp writes llama.cpp's own names); used when B is a llama.cpp dump.
const LLAMA_NAME = { ffn_moe_weights: "ffn_moe_weights_norm", ffn_moe_combined: "ffn_moe_out", kda_core: "kda_scan_out",
    ffn_moe_out: null };
// k3's order of a layer's ops (model/trace.h); others after them by name.
const ORDER = ["inp_embd", "attn_res_mix", "attn_norm", "kda_q_conv", "kda_k_conv", "kda_v_conv", "kda_gate", "kda_core",
    "kda_gated", "kda_out", "mla_q", "mla_kv_row", "mla_attn", "mla_out", "ffn_inp", "ffn_res_mix", "ffn_norm", "ffn_out",
    "ffn_moe_weights", "ffn_moe_combined", "ffn_moe_routed", "ffn_shexp", "ffn_moe_out", "l_out", "result_norm", "result_output"];

const [dirA, dirB] = process.argv.slice(2).filter((s) => !s.startsWith("--"));
const asJson = process.argv.includes("--json");
if (!dirA || !dirB) {
    process.stderr.write("usage: node dump_diff.mjs A B [--json]\n");
    process.exit(2);
}
const index = (dir) => JSON.parse(fs.readFileSync(`${dir}/index.json`, "utf8")).tensors;
const load = (dir, t) => {
    const b = fs.readFileSync(`${dir}/${t.file}`);
    return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
};
const rank = (t) => [t.layer < 0 ? (t.name === "inp_embd" ? -1 : 1e9) : t.layer,
    ORDER.includes(t.name) ? ORDER.indexOf(t.name) : ORDER.length];

const b = new Map(index(dirB).map((t) => [`${t.name}.${t.layer}`, t]));
const bIsLlama = ![...b.values()].some((t) => t.name === "ffn_moe_combined" || t.name === "attn_res_mix");
const nameInB = (name) => (bIsLlama && name in LLAMA_NAME ? LLAMA_NAME[name] : name);
const ops = index(dirA).sort((x, y) => { const [p, q] = [rank(x), rank(y)]; return p[0] - q[0] || p[1] - q[1] || (x.name < y.name ? -1 : 1); });
const rows = [];
let first = null;
for (const ta of ops) {
    const tb = b.get(`${nameInB(ta.name)}.${ta.layer}`);
    if (!tb) continue;
    const x = load(dirA, ta), y = load(dirB, tb);
    const row = { name: ta.name, layer: ta.layer };
    if (x.length !== y.length) {
        rows.push({ ...row, sizes: [x.length, y.length] });
        continue;
    }
    // Positions are k3's rows; the other side may split a token's row (per head), the data is the same.
    const n = x.length / ta.rows;
    row.max = Array.from({ length: ta.rows }, (_, r) => {
        let m = 0;
        for (let i = r * n; i < (r + 1) * n; i++) m = Math.max(m, Math.abs(x[i] - y[i]));
        return m;
    });
    row.first = row.max.findIndex((v) => v > 0);
    if (row.first >= 0 && !first) first = row;
    rows.push(row);
}
if (asJson) {
    process.stdout.write(JSON.stringify({ ops: rows, first_parting: first && { name: first.name, layer: first.layer, position: first.first } }) + "\n");
} else {
    for (const r of rows) {
        const where = `${r.name.padEnd(18)} L${String(r.layer).padEnd(3)}`;
        if (r.sizes) process.stdout.write(`${where} sizes differ: ${r.sizes[0]} vs ${r.sizes[1]}\n`);
        else process.stdout.write(`${where} first ${String(r.first).padStart(3)}  ${r.max.map((v) => v.toExponential(0)).join(" ")}\n`);
    }
    process.stdout.write(first ? `first op that parts: ${first.name} (layer ${first.layer}) at position ${first.first}\n` : "no op parts\n");
}
