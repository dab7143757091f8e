// A tiny byte-level BPE vocabulary (GPT-2 byte→unicode mapping) shared by the tiny test models.
// Token ids: 0..255 bytes in byte order, then the merged tokens, then the control tokens.

export function byteToUnicode() {
    const bs = [];
    for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
    for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
    for (let b = 0xae; b <= 0xff; b++) bs.push(b);
    const cs = [...bs];
    let n = 0;
    for (let b = 0; b < 256; b++) {
        if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
    }
    const map = new Array(256);
    for (let i = 0; i < bs.length; i++) map[bs[i]] = String.fromCodePoint(cs[i]);
    return map;
}

// merges: list of [left, right] in rank order; each merged string becomes a token.
export function tinyVocab({ merges = [["h", "e"], ["Ġ", "t"], ["Ġt", "he"], ["l", "l"], ["o", "r"]],
                            specials = ["<|bos|>", "<|endoftext|>", "<|pad|>"] } = {}) {
    const b2u = byteToUnicode();
    const tokens = [...b2u];
    const types = tokens.map(() => 1);
    for (const [l, r] of merges) { tokens.push(l + r); types.push(1); }
    const specialIds = {};
    for (const s of specials) { specialIds[s] = tokens.length; tokens.push(s); types.push(3); }
    return { tokens, types, merges: merges.map(([l, r]) => `${l} ${r}`), specialIds };
}

export function vocabMetadata(v, { pre = "gpt-2", bos = "<|bos|>", eos = "<|endoftext|>" } = {}) {
    return [
        { key: "tokenizer.ggml.model", type: "string", value: "gpt2" },
        { key: "tokenizer.ggml.pre", type: "string", value: pre },
        { key: "tokenizer.ggml.tokens", type: "array", elemType: "string", value: v.tokens },
        { key: "tokenizer.ggml.token_type", type: "array", elemType: "int32", value: v.types },
        { key: "tokenizer.ggml.merges", type: "array", elemType: "string", value: v.merges },
        { key: "tokenizer.ggml.bos_token_id", type: "uint32", value: v.specialIds[bos] },
        { key: "tokenizer.ggml.eos_token_id", type: "uint32", value: v.specialIds[eos] },
        { key: "tokenizer.ggml.add_bos_token", type: "bool", value: false },
        { key: "tokenizer.ggml.add_eos_token", type: "bool", value: false },
    ];
}
