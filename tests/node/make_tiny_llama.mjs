#!/usr/bin/env node
// Writes a tiny `llama`-architecture GGUF with random weights and a byte-level BPE vocabulary,
// for smoke-testing the llama.cpp harness.
// Usage: node make_tiny_llama.mjs OUT.gguf [--type f32|f16|bf16] [--layers N] [--seed S]
import { writeGguf } from "./gguf_write.mjs";
import { tinyVocab, vocabMetadata } from "./tiny_vocab.mjs";

export function tinyLlamaDesc({ type = "f32", layers = 2, seed = 1, H = 64, nHead = 4, nHeadKv = 2, F = 128, ctx = 512 } = {}) {
    const v = tinyVocab();
    const V = v.tokens.length;
    const headDim = H / nHead;
    const metadata = [
        { key: "general.architecture", type: "string", value: "llama" },
        { key: "general.name", type: "string", value: "k3-tiny-llama" },
        { key: "llama.context_length", type: "uint32", value: ctx },
        { key: "llama.embedding_length", type: "uint32", value: H },
        { key: "llama.block_count", type: "uint32", value: layers },
        { key: "llama.feed_forward_length", type: "uint32", value: F },
        { key: "llama.attention.head_count", type: "uint32", value: nHead },
        { key: "llama.attention.head_count_kv", type: "uint32", value: nHeadKv },
        { key: "llama.attention.layer_norm_rms_epsilon", type: "float32", value: 1e-5 },
        { key: "llama.rope.dimension_count", type: "uint32", value: headDim },
        { key: "llama.rope.freq_base", type: "float32", value: 10000 },
        { key: "llama.vocab_size", type: "uint32", value: V },
        ...vocabMetadata(v),
    ];
    let s = seed * 1000;
    const w = (name, ne, scale = 0.1) => ({ name, type, ne, data: { seed: s++, scale } });
    const norm = (name) => ({ name, type: "f32", ne: [H], data: { fill: 1 } });
    const tensors = [w("token_embd.weight", [H, V], 1.0), norm("output_norm.weight"), w("output.weight", [H, V], 0.3)];
    const kv = headDim * nHeadKv;
    for (let i = 0; i < layers; i++) {
        tensors.push(norm(`blk.${i}.attn_norm.weight`), w(`blk.${i}.attn_q.weight`, [H, H]),
            w(`blk.${i}.attn_k.weight`, [H, kv]), w(`blk.${i}.attn_v.weight`, [H, kv]),
            w(`blk.${i}.attn_output.weight`, [H, H]), norm(`blk.${i}.ffn_norm.weight`),
            w(`blk.${i}.ffn_gate.weight`, [H, F]), w(`blk.${i}.ffn_up.weight`, [H, F]),
            w(`blk.${i}.ffn_down.weight`, [F, H]));
    }
    return { metadata, tensors };
}

if (import.meta.url === `file://${process.argv[1]}`) {
    const args = process.argv.slice(2);
    const out = args.find((a, i) => !a.startsWith("--") && (i === 0 || !args[i - 1].startsWith("--")));
    const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
    if (!out) { console.error("usage: node make_tiny_llama.mjs OUT.gguf [--type f32|f16|bf16] [--layers N] [--seed S]"); process.exit(2); }
    const n = writeGguf(out, tinyLlamaDesc({ type: opt("--type", "f32"), layers: Number(opt("--layers", 2)), seed: Number(opt("--seed", 1)) }));
    console.log(JSON.stringify({ ok: true, path: out, bytes: n }));
}
