"""Synthetic DSpark draft checkpoints and an independent reference of the draft's forward pass,
written from shared/spec/dspark.md with numpy alone (float64 from the BF16 weights). It reads the
Hugging Face form (config.json + model.safetensors: kv_b_proj unsplit, keys and values formed
per head as §6 step 4 writes them), never the GGUF, so k3's split, absorbed form is checked, not
assumed. The target's taps come from `k3 logits --dump` (l_out, the stream leaving each layer;
checked against llama.cpp by the model parity tests) and its output matrix from its GGUF (F32).

  dspark_ref.py write DIR --hidden H --vocab V --target-layers L --taps 1,4,7 [--layers 2 ...]
  dspark_ref.py forward --hf DIR --target T.gguf --dump D --ids 1,2,3 -n K   (prints JSON)
"""
import argparse, json, math, os, struct, sys

import numpy as np


# ---- safetensors, BF16 ----

def to_bf16(x):
    """float32 -> bfloat16 bits, round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    """tensors: [(name, shape, make)] with make() -> uint16 bf16 bits, made and written one at a time."""
    header, off = {}, 0
    for name, shape, _ in tensors:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, make in tensors:
            f.write(make().tobytes())
    os.replace(path + ".tmp", path)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        if t["dtype"] == "BF16":
            v = (np.frombuffer(data[b:e], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            v = np.frombuffer(data[b:e], dtype=np.float32)
        out[name] = v.astype(np.float64).reshape(t["shape"])
    return out


# ---- GGUF (the target's F32 output matrix and embedding) ----

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf_f32(path, names):
    b = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, b, off)
        off += struct.calcsize(fmt)
        return v[0]

    def skip_value(t):
        nonlocal off
        if t == 8:
            n = take("<Q")  # (off += take(...) would read off before take moves it)
            off += n
        elif t == 9:
            et, n = take("<I"), take("<Q")
            for _ in range(n):
                skip_value(et)
        else:
            off += struct.calcsize(SCALARS[t])

    assert b[:4] == b"GGUF", path
    off = 8
    nt, nkv = take("<Q"), take("<Q")
    align = 32
    for _ in range(nkv):
        n = take("<Q")
        k = b[off:off + n].decode()
        off += n
        t = take("<I")
        if k == "general.alignment":
            align = take("<I")
        else:
            skip_value(t)
    infos = {}
    for _ in range(nt):
        n = take("<Q")
        name = b[off:off + n].decode()
        off += n
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        infos[name] = (ne, take("<I"), take("<Q"))
    data = (off + align - 1) // align * align
    out = {}
    for name in names:
        ne, ty, o = infos[name]
        assert ty == 0, f"{name}: the reference reads F32 targets only"
        cnt = int(np.prod(ne))
        out[name] = np.frombuffer(b, dtype=np.float32, count=cnt, offset=data + o).astype(np.float64).reshape(ne[::-1])
    return out


# ---- a synthetic checkpoint (dspark.md §1-§2) ----

def write(args):
    H, V, L, nh = args.hidden, args.vocab, args.layers, args.heads
    rq, rkv, dn, dr, dv, F, R = args.q_lora, args.kv_lora, args.nope, args.rope, args.v, args.ff, args.markov_rank
    taps = [int(x) for x in args.taps.split(",")]
    tensors = []

    # each tensor's values come from its own stream (seed, index), generated when it is written
    def mat(name, rows, cols, scale=None):
        s, k = scale if scale is not None else 1.0 / math.sqrt(cols), len(tensors)

        def make():
            r = np.random.default_rng([args.seed, k])
            a = np.empty(rows * cols, dtype=np.uint16)
            step = 1 << 24  # in pieces, so real sizes fit in memory
            for i in range(0, rows * cols, step):
                m = min(step, rows * cols - i)
                a[i:i + m] = to_bf16(r.standard_normal(m, dtype=np.float32) * np.float32(s))
            return a
        tensors.append((name, (rows, cols), make))

    def gain(name, n):
        k = len(tensors)
        tensors.append((name, (n,), lambda: to_bf16(1.0 + 0.1 * np.random.default_rng([args.seed, k]).standard_normal(n, dtype=np.float32))))

    if not args.no_embd:
        mat("embed_tokens.weight", V, H, 1.0)
    mat("context_proj.weight", H, len(taps) * H)
    gain("context_norm.weight", H)
    gain("final_norm.weight", H)
    mat("markov_head.markov_w1.weight", V, R, 1.0)
    mat("markov_head.markov_w2.weight", V, R, args.markov_scale / math.sqrt(R))
    mat("confidence_head.proj.weight", 1, H + R)
    tensors.append(("confidence_head.proj.bias", (1,), lambda: to_bf16(np.zeros(1, dtype=np.float32))))
    for l in range(L):
        p = f"layers.{l}."
        gain(p + "input_layernorm.weight", H)
        gain(p + "post_attention_layernorm.weight", H)
        mat(p + "self_attn.q_a_proj.weight", rq, H)
        gain(p + "self_attn.q_a_layernorm.weight", rq)
        mat(p + "self_attn.q_b_proj.weight", nh * (dn + dr), rq)
        mat(p + "self_attn.kv_a_proj_with_mqa.weight", rkv + dr, H)
        gain(p + "self_attn.kv_a_layernorm.weight", rkv)
        mat(p + "self_attn.kv_b_proj.weight", nh * (dn + dv), rkv)
        mat(p + "self_attn.o_proj.weight", H, nh * dv)
        mat(p + "mlp.gate_proj.weight", F, H)
        mat(p + "mlp.up_proj.weight", F, H)
        mat(p + "mlp.down_proj.weight", H, F)
    os.makedirs(args.dir, exist_ok=True)
    write_safetensors(os.path.join(args.dir, "model.safetensors"), tensors)
    rope = {"rope_type": "yarn", "factor": args.factor, "original_max_position_embeddings": args.orig_ctx,
            "rope_theta": args.theta, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
    cfg = {"architectures": ["K3DSparkModel"], "model_type": "k3_dspark", "hidden_size": H, "intermediate_size": F,
           "num_hidden_layers": L, "num_attention_heads": nh, "num_key_value_heads": nh, "q_lora_rank": rq,
           "kv_lora_rank": rkv, "qk_nope_head_dim": dn, "qk_rope_head_dim": dr, "v_head_dim": dv,
           "mla_use_nope": False, "mla_use_output_gate": False, "vocab_size": V, "draft_vocab_size": V,
           "rms_norm_eps": args.eps, "max_position_embeddings": args.ctx, "rope_theta": args.theta,
           "num_target_layers": len(taps), "target_hidden_size": H, "target_num_hidden_layers": args.target_layers,
           "target_layer_ids": taps, "mask_token_id": args.mask_id if args.mask_id >= 0 else V - 3,
           "bos_token_id": V - 256, "eos_token_id": V - 254, "pad_token_id": V - 1, "markov_rank": R,
           "markov_head_type": "vanilla", "enable_confidence_head": True, "confidence_head_with_markov": True,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    if not args.no_yarn:
        cfg["rope_parameters"] = rope
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


# ---- the forward pass (dspark.md §4-§8) ----

def rmsnorm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


class Draft:
    def __init__(self, hf_dir):
        self.cfg = c = json.load(open(os.path.join(hf_dir, "config.json")))
        self.w = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
        self.eps = c["rms_norm_eps"]
        self.nh, self.dn, self.dr, self.dv = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.rkv = c["kv_lora_rank"]
        D, theta = self.dr, c["rope_theta"]
        rp = c.get("rope_parameters") or c.get("rope_scaling")
        f = theta ** (2.0 * np.arange(D // 2) / D)
        if rp and rp.get("rope_type", rp.get("type")) == "yarn":
            s, M = rp["factor"], rp["original_max_position_embeddings"]
            corr = lambda r: D * math.log(M / (2 * math.pi * r)) / (2 * math.log(theta))
            lo, hi = max(math.floor(corr(rp["beta_fast"])), 0), min(math.ceil(corr(rp["beta_slow"])), D - 1)
            if lo == hi:
                hi += 0.001
            ramp = np.clip((np.arange(D // 2) - lo) / (hi - lo), 0, 1)
            self.omega = ramp / (s * f) + (1 - ramp) / f
            ym = lambda m: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
            self.mu = ym(rp["mscale"]) / ym(rp["mscale_all_dim"])
            self.kappa = (self.dn + self.dr) ** -0.5 * ym(rp["mscale_all_dim"]) ** 2
        else:
            self.omega, self.mu, self.kappa = 1.0 / f, 1.0, (self.dn + self.dr) ** -0.5

    def rope(self, v, pos):
        """v [..., D] at position pos: adjacent pairs rotated."""
        phi = pos * self.omega
        c, s = np.cos(phi) * self.mu, np.sin(phi) * self.mu
        a, b = v[..., 0::2], v[..., 1::2]
        out = np.empty_like(v)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
        return out

    def context(self, taps):
        """taps [p, n_t*H] -> per layer (c_hat [p, r], k_hat [p, dr])."""
        w = self.w
        c = rmsnorm(taps @ w["context_proj.weight"].T, w["context_norm.weight"], self.eps)
        rows = []
        for l in range(self.cfg["num_hidden_layers"]):
            kv = c @ w[f"layers.{l}.self_attn.kv_a_proj_with_mqa.weight"].T
            ch = rmsnorm(kv[:, :self.rkv], w[f"layers.{l}.self_attn.kv_a_layernorm.weight"], self.eps)
            kh = np.stack([self.rope(kv[s, self.rkv:], s) for s in range(len(kv))]) if len(kv) else kv[:, self.rkv:]
            rows.append((ch, kh))
        return rows

    def block(self, rows, anchor, p, n_q, embed, out_w):
        w, nh, dn, dr, dv, r = self.w, self.nh, self.dn, self.dr, self.dv, self.rkv
        ids = [anchor] + [self.cfg["mask_token_id"]] * (n_q - 1)
        x = embed[ids].copy()
        for l, (cc, kc) in enumerate(rows):
            pre = f"layers.{l}."
            y = rmsnorm(x, w[pre + "input_layernorm.weight"], self.eps)
            qa = rmsnorm(y @ w[pre + "self_attn.q_a_proj.weight"].T, w[pre + "self_attn.q_a_layernorm.weight"], self.eps)
            q = (qa @ w[pre + "self_attn.q_b_proj.weight"].T).reshape(n_q, nh, dn + dr)
            qn = q[..., :dn]
            qr = np.stack([self.rope(q[t, :, dn:], p + t) for t in range(n_q)])
            kv = y @ w[pre + "self_attn.kv_a_proj_with_mqa.weight"].T
            cb = rmsnorm(kv[:, :r], w[pre + "self_attn.kv_a_layernorm.weight"], self.eps)
            kb = np.stack([self.rope(kv[t, r:], p + t) for t in range(n_q)])
            C, K = np.concatenate([cc, cb]), np.concatenate([kc, kb])  # N keys: context, then block
            Wb = w[pre + "self_attn.kv_b_proj.weight"].reshape(nh, dn + dv, r)
            o = np.zeros((n_q, nh, dv))
            for h in range(nh):
                k, v = C @ Wb[h, :dn].T, C @ Wb[h, dn:].T  # [N, dn], [N, dv]
                sc = self.kappa * (qn[:, h] @ k.T + qr[:, h] @ K.T)  # [n_q, N], no mask
                P = np.exp(sc - sc.max(-1, keepdims=True))
                P /= P.sum(-1, keepdims=True)
                o[:, h] = P @ v
            x = x + o.reshape(n_q, nh * dv) @ w[pre + "self_attn.o_proj.weight"].T
            z = rmsnorm(x, w[pre + "post_attention_layernorm.weight"], self.eps)
            g, u = z @ w[pre + "mlp.gate_proj.weight"].T, z @ w[pre + "mlp.up_proj.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[pre + "mlp.down_proj.weight"].T
        hid = rmsnorm(x, w["final_norm.weight"], self.eps)
        base = hid @ out_w.T
        toks, margins, prev = [], [], anchor
        for t in range(n_q):
            lt = base[t] + w["markov_head.markov_w2.weight"] @ w["markov_head.markov_w1.weight"][prev]
            order = np.argsort(-lt, kind="stable")
            toks.append(int(order[0]))
            margins.append(float(lt[order[0]] - lt[order[1]]))
            prev = toks[-1]
        return toks, hid, base, margins


def forward(args):
    d = Draft(args.hf)
    ids = [int(x) for x in args.ids.split(",")]
    p = len(ids) - 1
    index = json.load(open(os.path.join(args.dump, "index.json")))
    files = {(e["name"], e["layer"]): e for e in index["tensors"]}
    taps = []
    for L in d.cfg["target_layer_ids"]:
        if p == 0:
            taps.append(np.zeros((0, d.cfg["hidden_size"])))
            continue
        e = files[("l_out", L)]
        a = np.fromfile(os.path.join(args.dump, e["file"]), dtype=np.float32).astype(np.float64).reshape(-1, e["n"])
        taps.append(a[:p])
    t = read_gguf_f32(args.target, ["output.weight", "token_embd.weight"])
    embed = d.w["embed_tokens.weight"] if "embed_tokens.weight" in d.w else t["token_embd.weight"]
    toks, hid, base, margins = d.block(d.context(np.concatenate(taps, axis=1)), ids[-1], p, args.n, embed, t["output.weight"])
    top = [[{"id": int(i), "logit": float(row[i])} for i in np.argsort(-row, kind="stable")[:5]] for row in base]
    json.dump({"tokens": toks, "hidden": hid.tolist(), "base_top": top, "margins": margins}, sys.stdout)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    for name, default in [("hidden", 64), ("vocab", 768), ("layers", 2), ("heads", 4), ("q-lora", 32), ("kv-lora", 32),
                          ("nope", 16), ("rope", 8), ("v", 16), ("ff", 96), ("markov-rank", 8), ("target-layers", 9),
                          ("seed", 1), ("orig-ctx", 64), ("ctx", 4096), ("mask-id", -1)]:
        w.add_argument("--" + name, type=int, default=default)
    w.add_argument("--taps", default="1,4,7")
    w.add_argument("--eps", type=float, default=1e-5)
    w.add_argument("--theta", type=float, default=50000.0)
    w.add_argument("--factor", type=float, default=32.0)
    w.add_argument("--markov-scale", type=float, default=1.0)
    w.add_argument("--no-yarn", action="store_true")
    w.add_argument("--no-embd", action="store_true", help="leave embed_tokens out (not a valid release; for benches)")
    f = sub.add_parser("forward")
    f.add_argument("--hf", required=True)
    f.add_argument("--target", required=True)
    f.add_argument("--dump", required=True)
    f.add_argument("--ids", required=True)
    f.add_argument("-n", type=int, required=True)
    a = ap.parse_args()
    write(a) if a.cmd == "write" else forward(a)


if __name__ == "__main__":
    main()
