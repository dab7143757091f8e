#!/usr/bin/env node
// An independent minimal GGUF v3 writer (written from shared/spec/gguf-contract.md §1), used by
// k3's tests as "a file written by another writer" and to build tiny llama.cpp test models.
//
// Module:  import { writeGguf, GGUF, GGML } from "./gguf_write.mjs";
//          writeGguf(path, { alignment, version, metadata: [...], tensors: [...] })
// CLI:     node gguf_write.mjs desc.json out.gguf
//
// Description (JSON or JS object):
//   alignment   optional, default 32; also written as general.alignment (UINT32) when
//               writeAlignmentKey is true or alignment != 32
//   version     optional, default 3 (tests may write other versions on purpose)
//   metadata    [{key, type, value}] in file order; type is a gguf value type name
//               ("uint8","int8","uint16","int16","uint32","int32","float32","bool","string",
//               "uint64","int64","float64") or "array"; arrays take {elemType, value:[...]}.
//               64-bit values may be numbers, bigints or decimal strings.
//   tensors     [{name, type, ne:[...], data}] in file order; type is a ggml type id or name
//               ("f32","f16","bf16","q8_0",...); data is one of
//                 {base64: "..."}            raw bytes
//                 {seed: n, scale: s}        f32/f16/bf16: uniform(-scale, scale) from a seeded PRNG,
//                                            other types: seeded random bytes
//                 {fill: x}                  f32/f16/bf16: constant value
//                 {values: [...]}            f32/f16/bf16: explicit values
//                 {zero: true} or absent     zero bytes
//               offset (optional) overrides the packed offset, for negative tests.
import fs from "node:fs";

export const GGUF = Object.freeze({
    uint8: 0, int8: 1, uint16: 2, int16: 3, uint32: 4, int32: 5, float32: 6, bool: 7,
    string: 8, array: 9, uint64: 10, int64: 11, float64: 12
});

// ggml type id -> [name, block size, bytes per block] (quant-formats.md).
export const GGML = Object.freeze({
    0: ["f32", 1, 4], 1: ["f16", 1, 2], 2: ["q4_0", 32, 18], 3: ["q4_1", 32, 20],
    6: ["q5_0", 32, 22], 7: ["q5_1", 32, 24], 8: ["q8_0", 32, 34], 9: ["q8_1", 32, 36],
    10: ["q2_k", 256, 84], 11: ["q3_k", 256, 110], 12: ["q4_k", 256, 144],
    13: ["q5_k", 256, 176], 14: ["q6_k", 256, 210], 15: ["q8_k", 256, 292],
    16: ["iq2_xxs", 256, 66], 17: ["iq2_xs", 256, 74], 18: ["iq3_xxs", 256, 98],
    19: ["iq1_s", 256, 50], 20: ["iq4_nl", 32, 18], 21: ["iq3_s", 256, 110], 22: ["iq2_s", 256, 82],
    23: ["iq4_xs", 256, 136], 24: ["i8", 1, 1], 25: ["i16", 1, 2], 26: ["i32", 1, 4],
    27: ["i64", 1, 8], 28: ["f64", 1, 8], 29: ["iq1_m", 256, 56], 30: ["bf16", 1, 2],
    34: ["tq1_0", 256, 54], 35: ["tq2_0", 256, 66], 39: ["mxfp4", 32, 17], 40: ["nvfp4", 64, 36],
    41: ["q1_0", 128, 18], 42: ["q2_0", 64, 18]
});

export function ggmlTypeId(t) {
    if (typeof t === "number") return t;
    for (const [id, [name]] of Object.entries(GGML))
        if (name === String(t).toLowerCase()) return Number(id);
    throw new Error(`unknown ggml type ${t}`);
}

export function tensorByteSize(typeId, ne) {
    const info = GGML[typeId];
    if (!info) throw new Error(`ggml type ${typeId} has no size entry`);
    const [name, block, size] = info;
    if (ne[0] % block !== 0) throw new Error(`ne0=${ne[0]} not a multiple of ${name} block ${block}`);
    let rows = 1;
    for (let i = 1; i < ne.length; i++) rows *= ne[i];
    return (ne[0] / block) * size * rows;
}

// Growable little-endian byte buffer.
class Out {
    constructor() { this.buf = Buffer.alloc(1 << 16); this.n = 0; }
    reserve(k) {
        if (this.n + k <= this.buf.length) return;
        let cap = this.buf.length * 2;
        while (cap < this.n + k) cap *= 2;
        const nb = Buffer.alloc(cap);
        this.buf.copy(nb, 0, 0, this.n);
        this.buf = nb;
    }
    u8(v) { this.reserve(1); this.buf.writeUInt8(v, this.n); this.n += 1; }
    i8(v) { this.reserve(1); this.buf.writeInt8(v, this.n); this.n += 1; }
    u16(v) { this.reserve(2); this.buf.writeUInt16LE(v, this.n); this.n += 2; }
    i16(v) { this.reserve(2); this.buf.writeInt16LE(v, this.n); this.n += 2; }
    u32(v) { this.reserve(4); this.buf.writeUInt32LE(v >>> 0, this.n); this.n += 4; }
    i32(v) { this.reserve(4); this.buf.writeInt32LE(v, this.n); this.n += 4; }
    f32(v) { this.reserve(4); this.buf.writeFloatLE(v, this.n); this.n += 4; }
    f64(v) { this.reserve(8); this.buf.writeDoubleLE(v, this.n); this.n += 8; }
    u64(v) { this.reserve(8); this.buf.writeBigUInt64LE(BigInt(v), this.n); this.n += 8; }
    i64(v) { this.reserve(8); this.buf.writeBigInt64LE(BigInt(v), this.n); this.n += 8; }
    bytes(b) { this.reserve(b.length); Buffer.from(b.buffer, b.byteOffset, b.length).copy(this.buf, this.n); this.n += b.length; }
    str(s) { const b = Buffer.from(s, "utf8"); this.u64(b.length); this.bytes(b); }
    pad(align) { while (this.n % align !== 0) this.u8(0); }
    result() { return this.buf.subarray(0, this.n); }
}

function typeId(t) {
    if (typeof t === "number") return t;
    const id = GGUF[String(t).toLowerCase()];
    if (id === undefined) throw new Error(`unknown gguf value type ${t}`);
    return id;
}

function writeScalar(out, t, v) {
    switch (t) {
        case GGUF.uint8: return out.u8(v);
        case GGUF.int8: return out.i8(v);
        case GGUF.uint16: return out.u16(v);
        case GGUF.int16: return out.i16(v);
        case GGUF.uint32: return out.u32(v);
        case GGUF.int32: return out.i32(v);
        case GGUF.float32: return out.f32(v);
        case GGUF.bool: return out.u8(v ? 1 : 0);
        case GGUF.string: return out.str(String(v));
        case GGUF.uint64: return out.u64(v);
        case GGUF.int64: return out.i64(v);
        case GGUF.float64: return out.f64(v);
        default: throw new Error(`cannot write scalar of gguf type ${t}`);
    }
}

// Deterministic PRNG (mulberry32) so tests can regenerate identical bytes.
export function rng(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6D2B79F5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

export function f32ToF16Bits(x) {
    const f = new Float32Array([x]); const u = new Uint32Array(f.buffer)[0];
    const sign = (u >>> 16) & 0x8000; let exp = ((u >>> 23) & 0xff) - 127 + 15; let man = u & 0x7fffff;
    if (((u >>> 23) & 0xff) === 0xff) return sign | 0x7c00 | (man ? 0x200 : 0);
    if (exp >= 31) return sign | 0x7c00;
    if (exp <= 0) {
        if (exp < -10) return sign;
        man |= 0x800000; const shift = 14 - exp;
        let h = man >>> shift; const rem = man & ((1 << shift) - 1); const half = 1 << (shift - 1);
        if (rem > half || (rem === half && (h & 1))) h++;
        return sign | h;
    }
    let h = sign | (exp << 10) | (man >>> 13); const rem = man & 0x1fff;
    if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
    return h;
}

function f32ToBf16Bits(x) {
    const u = new Uint32Array(new Float32Array([x]).buffer)[0];
    if ((u & 0x7fffffff) > 0x7f800000) return (u >>> 16) | 0x40;
    return (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
}

function encodeFloats(typeId, n, valueAt) {
    if (typeId === 0) { const a = new Float32Array(n); for (let i = 0; i < n; i++) a[i] = valueAt(i); return new Uint8Array(a.buffer); }
    const a = new Uint16Array(n);
    const conv = typeId === 1 ? f32ToF16Bits : f32ToBf16Bits;
    for (let i = 0; i < n; i++) a[i] = conv(valueAt(i));
    return new Uint8Array(a.buffer);
}

export function tensorData(t, typeId, ne) {
    const size = tensorByteSize(typeId, ne);
    const d = t.data ?? { zero: true };
    const isFloat = typeId === 0 || typeId === 1 || typeId === 30;
    const count = ne.reduce((a, b) => a * b, 1);
    let bytes;
    if (d.base64 !== undefined) bytes = new Uint8Array(Buffer.from(d.base64, "base64"));
    else if (d.bytes !== undefined) bytes = d.bytes instanceof Uint8Array ? d.bytes : new Uint8Array(d.bytes);
    else if (d.values !== undefined) {
        if (!isFloat) throw new Error(`${t.name}: values only for f32/f16/bf16`);
        bytes = encodeFloats(typeId, count, (i) => d.values[i]);
    } else if (d.fill !== undefined) {
        if (!isFloat) throw new Error(`${t.name}: fill only for f32/f16/bf16`);
        bytes = encodeFloats(typeId, count, () => d.fill);
    } else if (d.seed !== undefined) {
        const r = rng(d.seed);
        if (isFloat) { const s = d.scale ?? 1; bytes = encodeFloats(typeId, count, () => (2 * r() - 1) * s); }
        else { bytes = new Uint8Array(size); for (let i = 0; i < size; i++) bytes[i] = Math.floor(r() * 256); }
    } else bytes = new Uint8Array(size);
    if (bytes.length !== size && !t.allowSizeMismatch)
        throw new Error(`${t.name}: ${bytes.length} data bytes, expected ${size}`);
    return bytes;
}

// Serialize a description to a Buffer (header, infos, padding, data).
export function buildGguf(desc) {
    const alignment = desc.alignment ?? 32;
    const metadata = [...(desc.metadata ?? [])];
    if ((desc.writeAlignmentKey || alignment !== 32) && !metadata.some((m) => m.key === "general.alignment"))
        metadata.push({ key: "general.alignment", type: "uint32", value: alignment });
    const tensors = (desc.tensors ?? []).map((t) => {
        const type = ggmlTypeId(t.type);
        const ne = t.ne.map(Number);
        return { ...t, type, ne, bytes: tensorData(t, type, ne) };
    });

    const out = new Out();
    out.bytes(Buffer.from("GGUF", "latin1"));
    out.u32(desc.version ?? 3);
    out.i64(tensors.length);
    out.i64(metadata.length);
    for (const m of metadata) {
        out.str(m.key);
        const t = typeId(m.type);
        out.i32(t);
        if (t === GGUF.array) {
            const et = typeId(m.elemType);
            out.i32(et);
            out.u64(m.value.length);
            for (const v of m.value) writeScalar(out, et, v);
        } else writeScalar(out, t, m.value);
    }
    let offset = 0;
    for (const t of tensors) {
        out.str(t.name);
        out.u32(t.ne.length);
        for (const n of t.ne) out.i64(n);
        out.i32(t.type);
        out.u64(t.offset ?? offset);
        offset += Math.ceil(t.bytes.length / alignment) * alignment;
    }
    out.pad(alignment);
    for (const t of tensors) {
        out.bytes(t.bytes);
        out.pad(alignment);
    }
    return out.result();
}

export function writeGguf(path, desc) {
    const buf = buildGguf(desc);
    fs.writeFileSync(path, buf);
    return buf.length;
}

if (import.meta.url === `file://${process.argv[1]}`) {
    try {
        const [descPath, outPath] = process.argv.slice(2);
        if (!descPath || !outPath) throw new Error("usage: node gguf_write.mjs desc.json out.gguf");
        const n = writeGguf(outPath, JSON.parse(fs.readFileSync(descPath, "utf8")));
        process.stdout.write(JSON.stringify({ ok: true, path: outPath, bytes: n }) + "\n");
    } catch (e) {
        process.stderr.write(`gguf_write: ${e.message}\n`);
        process.exit(1);
    }
}
