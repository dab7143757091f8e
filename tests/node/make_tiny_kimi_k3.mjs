#!/usr/bin/env node
// Writes a tiny `kimi-k3` GGUF from gguf-contract.md §3-§6: random weights, every required key
// with its exact type, the per-layer tensor list of KDA / MLA / dense / latent-MoE layers.
// Usage: node make_tiny_kimi_k3.mjs OUT.gguf [--type f32|f16|bf16] [--experts f32|mxfp4]
//        [--kv 0,0,0,1,1] [--attn-res 2] [--seed S] [--eps E] [--wide]
//        [--tensor-type REGEX=TYPE ...]
// --wide: every row length that K3's structure lets be a multiple of 256 is one (H 256, head dim
// 128, q/kv LoRA 256, latent and expert widths 256), so every ggml type fits the tensors of
// every class except ssm_f_b (ne0 = head dim, as in K3). --tensor-type: tensors whose name
// matches REGEX get TYPE (any type of quant_blocks.mjs or f32/f16/bf16; later rules win); a
// tensor whose ne0 the type's block does not divide keeps its type and is listed under
// "unfit" in the JSON line printed.
import { writeGguf, rng, GGML, ggmlTypeId } from "./gguf_write.mjs";
import { tinyVocab, vocabMetadata } from "./tiny_vocab.mjs";
import { randomBlocks } from "./quant_blocks.mjs";

// Valid MXFP4 blocks with small scales (E8M0 exponent 120..124), so values stay finite.
function mxfp4Bytes(nElements, seed) {
    const r = rng(seed);
    const b = new Uint8Array((nElements / 32) * 17);
    for (let o = 0; o < b.length; o += 17) {
        b[o] = 120 + Math.floor(r() * 5);
        for (let j = 1; j < 17; j++) b[o + j] = Math.floor(r() * 256);
    }
    return b;
}

export const WIDE = Object.freeze({ H: 256, d: 128, rQ: 256, rKv: 256, dPe: 32, dQk: 288, dV: 128, fE: 256, dLat: 256, fD: 256 });

export function tinyKimiK3Desc({
    type = "f32", experts = "f32", seed = 1, kv = [0, 0, 0, 1, 1], attnRes = 2, eps = 1e-5,
    H = 64, nHead = 2, d = 16, kConv = 4, rQ = 32, rKv = 32, dPe = 8, dQk = 24, dV = 16,
    E = 4, topK = 2, fE = 32, nShared = 1, dLat = 32, fD = 128, nDense = 1, ctx = 4096, tensorTypes = []
} = {}) {
    const L = kv.length;
    const D = nHead * d;
    const v = tinyVocab();
    const V = v.tokens.length;
    const A = "kimi-k3";
    const u32 = (k, value) => ({ key: `${A}.${k}`, type: "uint32", value });
    const f32 = (k, value) => ({ key: `${A}.${k}`, type: "float32", value });
    const metadata = [
        { key: "general.architecture", type: "string", value: A },
        { key: "general.name", type: "string", value: "k3-tiny-kimi-k3" },
        { key: "general.file_type", type: "uint32", value: type === "f32" ? 0 : type === "f16" ? 1 : 32 },
        { key: "general.quantization_version", type: "uint32", value: 2 },
        u32("context_length", ctx), u32("embedding_length", H), u32("block_count", L), u32("vocab_size", V),
        u32("feed_forward_length", fD), u32("attention.head_count", nHead),
        { key: `${A}.attention.head_count_kv`, type: "array", elemType: "int32", value: kv },
        f32("attention.layer_norm_rms_epsilon", eps),
        u32("attention.key_length", rKv + dPe), u32("attention.value_length", rKv),
        u32("attention.key_length_mla", dQk), u32("attention.value_length_mla", dV),
        u32("attention.q_lora_rank", rQ), u32("attention.kv_lora_rank", rKv),
        u32("rope.dimension_count", dPe), u32("ssm.conv_kernel", kConv), u32("kda.head_dim", d),
        f32("kda.gate_lower_bound", -5.0),
        u32("expert_count", E), u32("expert_used_count", topK), u32("expert_feed_forward_length", fE),
        u32("expert_shared_count", nShared), u32("leading_dense_block_count", nDense),
        f32("expert_weights_scale", 1.0), { key: `${A}.expert_weights_norm`, type: "bool", value: true },
        u32("expert_gating_func", 2), u32("expert_latent_length", dLat), u32("expert_group_used_count", 1),
        u32("attn_res.block_size", attnRes), f32("activation.situ_beta", 4.0), f32("activation.situ_linear_beta", 25.0),
        ...vocabMetadata(v, { pre: "kimi-k2" }),
    ];

    let s = seed * 100000;
    const w = (name, ne, scale = 0.1) => ({ name, type, ne, data: { seed: s++, scale } });
    const f = (name, ne, data) => ({ name, type: "f32", ne, data: data ?? { seed: s++, scale: 0.1 } });
    const ones = (name, n) => f(name, [n], { fill: 1 });
    const expertStack = (name, ne) => experts === "mxfp4"
        ? { name, type: "mxfp4", ne, data: { bytes: mxfp4Bytes(ne[0] * ne[1] * ne[2], s++) } }
        : { name, type: experts, ne, data: { seed: s++, scale: 0.1 } };

    const T = [w("token_embd.weight", [H, V], 1.0), ones("output_norm.weight", H), w("output.weight", [H, V], 0.3)];
    if (attnRes > 0) T.push(f("output_res_score.weight", [H]));
    for (let i = 0; i < L; i++) {
        const b = `blk.${i}`;
        T.push(ones(`${b}.attn_norm.weight`, H), ones(`${b}.ffn_norm.weight`, H));
        if (attnRes > 0) T.push(f(`${b}.attn_res_score.weight`, [H]), f(`${b}.ffn_res_score.weight`, [H]));
        if (kv[i] === 0) {
            for (const x of ["q", "k", "v"]) T.push(f(`${b}.ssm_conv1d_${x}.weight`, [kConv, 1, D], { seed: s++, scale: 0.5 }));
            T.push(w(`${b}.attn_q.weight`, [H, D]), w(`${b}.attn_k.weight`, [H, D]), w(`${b}.attn_v.weight`, [H, D]),
                w(`${b}.ssm_f_a.weight`, [H, d]), w(`${b}.ssm_f_b.weight`, [d, D]), w(`${b}.ssm_beta.weight`, [H, nHead]),
                f(`${b}.ssm_a`, [nHead], { values: Array.from({ length: nHead }, (_, h) => -Math.exp(-0.5 * h)) }),
                f(`${b}.ssm_dt.bias`, [D]), w(`${b}.ssm_g.weight`, [H, D]), ones(`${b}.ssm_norm.weight`, d),
                w(`${b}.attn_output.weight`, [D, H]));
        } else {
            T.push(ones(`${b}.attn_q_a_norm.weight`, rQ), w(`${b}.attn_q_a.weight`, [H, rQ]), w(`${b}.attn_q_b.weight`, [rQ, nHead * dQk]),
                w(`${b}.attn_kv_a_mqa.weight`, [H, rKv + dPe]), ones(`${b}.attn_kv_a_norm.weight`, rKv),
                w(`${b}.attn_k_b.weight`, [dQk - dPe, rKv, nHead]), w(`${b}.attn_v_b.weight`, [rKv, dV, nHead]),
                w(`${b}.attn_gate.weight`, [H, nHead * dV]), w(`${b}.attn_output.weight`, [nHead * dV, H]));
        }
        if (i < nDense) {
            T.push(w(`${b}.ffn_gate.weight`, [H, fD]), w(`${b}.ffn_up.weight`, [H, fD]), w(`${b}.ffn_down.weight`, [fD, H]));
        } else {
            const fSh = fE * nShared;
            T.push(f(`${b}.ffn_gate_inp.weight`, [H, E]), f(`${b}.exp_probs_b.bias`, [E], { seed: s++, scale: 0.01 }),
                expertStack(`${b}.ffn_gate_exps.weight`, [dLat, fE, E]), expertStack(`${b}.ffn_up_exps.weight`, [dLat, fE, E]),
                expertStack(`${b}.ffn_down_exps.weight`, [fE, dLat, E]),
                w(`${b}.ffn_routed_down.weight`, [H, dLat]), w(`${b}.ffn_routed_up.weight`, [dLat, H]),
                ones(`${b}.ffn_routed_norm.weight`, dLat),
                w(`${b}.ffn_gate_shexp.weight`, [H, fSh]), w(`${b}.ffn_up_shexp.weight`, [H, fSh]), w(`${b}.ffn_down_shexp.weight`, [fSh, H]));
        }
    }
    const unfit = [];
    for (const t of T) {
        for (const [re, ty] of tensorTypes) {
            if (!re.test(t.name)) continue;
            const id = ggmlTypeId(ty);
            if (t.ne[0] % GGML[id][1] !== 0) { unfit.push(`${t.name}:${ty}`); continue; }
            const scale = t.data?.scale ?? 0.1;
            if (id === 0 || id === 1 || id === 30) {
                if (t.data?.bytes) t.data = { seed: s++, scale };  // from a quantized type back to floats
            } else {
                t.data = { bytes: randomBlocks(GGML[id][0], t.ne.reduce((a, b) => a * b, 1), s++, scale) };
            }
            t.type = ty;
        }
    }
    return { metadata, tensors: T, unfit };
}

if (import.meta.url === `file://${process.argv[1]}`) {
    const args = process.argv.slice(2);
    const opt = (k, dflt) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : dflt; };
    const out = args.find((a, i) => !a.startsWith("--") && (i === 0 || !args[i - 1].startsWith("--")));
    if (!out) { console.error("usage: node make_tiny_kimi_k3.mjs OUT.gguf [--type f32|f16|bf16] [--experts f32|mxfp4] [--kv 0,0,0,1,1] [--attn-res 2] [--seed S] [--eps E] [--wide] [--tensor-type REGEX=TYPE ...]"); process.exit(2); }
    const tensorTypes = [];
    args.forEach((a, i) => {
        if (a !== "--tensor-type") return;
        const [re, ty] = args[i + 1].split("=");
        tensorTypes.push([new RegExp(re), ty]);
    });
    const desc = tinyKimiK3Desc({
        type: opt("--type", "f32"), experts: opt("--experts", "f32"), seed: Number(opt("--seed", 1)),
        kv: opt("--kv", "0,0,0,1,1").split(",").map(Number), attnRes: Number(opt("--attn-res", 2)),
        eps: Number(opt("--eps", 1e-5)), tensorTypes, ...(args.includes("--wide") ? WIDE : {})
    });
    const n = writeGguf(out, desc);
    console.log(JSON.stringify({ ok: true, path: out, bytes: n, tensors: desc.tensors.length, unfit: desc.unfit }));
}
