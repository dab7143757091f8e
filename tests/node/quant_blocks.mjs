// Valid random blocks of every ggml type a Kimi-K3 file may hold, written from
// shared/spec/quant-formats.md (§4-§8 layouts) and independent of k3's quantizers: random code
// bytes, and scale fields set to finite values chosen so that the dequantized weights have a
// standard deviation of roughly `scale` (the exact value does not matter, only that every engine
// reads the same bytes).
//
//   import { randomBlocks, QUANT_TYPES } from "./quant_blocks.mjs";
//   const bytes = randomBlocks("q4_k", nElements, seed, 0.05);
import { rng, f32ToF16Bits } from "./gguf_write.mjs";

// name -> [block elements, bytes per block, f16 fields [offset, factor]: the field is set to
// factor * scale, e8m0: offset of an E8M0 exponent byte].
// Factors: 1 / (typical |code value| x typical sub-scale), so the weights come out near `scale`.
const LAYOUT = {
    q4_0: { block: 32, bytes: 18, f16: [[0, 1 / 4.6]] },
    q4_1: { block: 32, bytes: 20, f16: [[0, 1 / 4.6], [2, -7.5 / 4.6]] },
    q5_0: { block: 32, bytes: 22, f16: [[0, 1 / 9.2]] },
    q5_1: { block: 32, bytes: 24, f16: [[0, 1 / 9.2], [2, -15.5 / 9.2]] },
    q8_0: { block: 32, bytes: 34, f16: [[0, 1 / 74]] },
    q2_k: { block: 256, bytes: 84, f16: [[80, 1 / 10], [82, 1 / 40]] },
    q3_k: { block: 256, bytes: 110, f16: [[108, 1 / 60]] },
    q4_k: { block: 256, bytes: 144, f16: [[0, 1 / 150], [2, 1 / 600]] },
    q5_k: { block: 256, bytes: 176, f16: [[0, 1 / 300], [2, 1 / 1200]] },
    q6_k: { block: 256, bytes: 210, f16: [[208, 1 / 1300]] },
    iq4_nl: { block: 32, bytes: 18, f16: [[0, 1 / 70]] },
    iq4_xs: { block: 256, bytes: 136, f16: [[0, 1 / 1100]] },
    mxfp4: { block: 32, bytes: 17, e8m0: 0 },
};

export const QUANT_TYPES = Object.freeze(Object.keys(LAYOUT));

function putF16(b, off, v) {
    const h = f32ToF16Bits(v);
    b[off] = h & 0xff;
    b[off + 1] = h >>> 8;
}

export function randomBlocks(type, nElements, seed, scale) {
    const L = LAYOUT[type];
    if (!L) throw new Error(`quant_blocks: no layout for type ${type}`);
    if (nElements % L.block !== 0) throw new Error(`quant_blocks: ${nElements} elements is not a multiple of ${type}'s block ${L.block}`);
    const r = rng(seed);
    const b = new Uint8Array((nElements / L.block) * L.bytes);
    for (let i = 0; i < b.length; i++) b[i] = Math.floor(r() * 256);
    for (let o = 0; o < b.length; o += L.bytes) {
        for (const [off, factor] of L.f16 ?? []) putF16(b, o + off, factor * scale * (0.75 + 0.5 * r()));
        // E2M1 codes reach 6: an exponent near log2(scale / 3) (bias 127) keeps the weights near `scale`
        if (L.e8m0 !== undefined) b[o + L.e8m0] = 127 + Math.round(Math.log2(scale / 3)) + Math.floor(r() * 3) - 1;
    }
    return b;
}
