"""mmproj conversion, checked by a reader written here from shared/spec/vision.md §2–§3 (its own
GGUF and safetensors parsers, its own name table and Q/K permutation): every mmproj tensor is the
checkpoint's bytes after the permutation, the metadata is §3's, the text parts hold no vision
tensor; converting twice gives identical files, so do kill -9 at points inside the mmproj and a
rerun; the manifest and `k3 verify` cover the mmproj; --no-mmproj, --vocab-only, config defaults,
a config that disagrees with the shapes, and a missing tensor.
    /usr/bin/python3 tests/vision/convert.py --k3 build/bin/k3"""
import argparse, filecmp, json, os, shutil, struct, subprocess, sys, tempfile

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd, env=None, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if ok and r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r


# ---- readers ----

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
GGML_SIZE = {0: 4, 1: 2, 30: 2}  # F32, F16, BF16


def read_gguf(path):
    b = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from(fmt, b, off)
        off += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("<Q")
        s = b[off:off + n].decode()
        off += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(GGUF_SCALARS[t])

    assert b[:4] == b"GGUF", path
    off = 4
    take("<I")
    nt, nkv = take("<Q"), take("<Q")
    kv = {}
    for _ in range(nkv):
        k = string()
        t = take("<I")
        kv[k] = (t, value(t))
    tensors = []
    for _ in range(nt):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        tensors.append((name, ne, take("<I"), take("<Q")))
    align = kv.get("general.alignment", (4, 32))[1]
    data = (off + align - 1) // align * align
    out = {}
    for name, ne, ty, o in tensors:
        n = 1
        for d in ne:
            n *= d
        out[name] = (ne, ty, b[data + o:data + o + n * GGML_SIZE[ty]])
    return kv, out


def read_safetensors_dir(hf):
    index = json.load(open(os.path.join(hf, "model.safetensors.index.json")))["weight_map"]
    out = {}
    for shard in sorted(set(index.values())):
        b = open(os.path.join(hf, shard), "rb").read()
        n = struct.unpack_from("<Q", b)[0]
        header = json.loads(b[8:8 + n])
        for name, t in header.items():
            if name != "__metadata__":
                s, e = t["data_offsets"]
                out[name] = (t["shape"], t["dtype"], b[8 + n + s:8 + n + e], shard)
    return out


def expected_names(L):
    """(GGUF name, HF name, permuted) from the table of vision.md §2."""
    names = [("v.patch_embd.weight", "vision_tower.patch_embed.proj.weight", False),
             ("v.position_embd.weight", "vision_tower.patch_embed.pos_emb.weight", False)]
    for i in range(L):
        h = f"vision_tower.encoder.blocks.{i}."
        names += [(f"v.blk.{i}.ln1.weight", h + "norm0.weight", False), (f"v.blk.{i}.attn_qkv.weight", h + "wqkv.weight", True),
                  (f"v.blk.{i}.attn_out.weight", h + "wo.weight", False), (f"v.blk.{i}.ln2.weight", h + "norm1.weight", False),
                  (f"v.blk.{i}.ffn_up.weight", h + "mlp.fc0.weight", False), (f"v.blk.{i}.ffn_down.weight", h + "mlp.fc1.weight", False)]
    return names + [("v.post_ln.weight", "vision_tower.encoder.final_layernorm.weight", False),
                    ("mm.1.weight", "mm_projector.proj.0.weight", False), ("mm.2.weight", "mm_projector.proj.2.weight", False),
                    ("mm.post_norm.weight", "mm_projector.post_norm.weight", False)]


def permuted(raw, rows, heads, D):
    """new_row[h·D + s·D/2 + 2i + c] = old_row[h·D + 4i + 2s + c] in the Q and K parts; V kept."""
    rb = len(raw) // rows
    old = [raw[r * rb:(r + 1) * rb] for r in range(rows)]
    new = list(old)
    Q = heads * D
    for part in (0, Q):
        for h in range(heads):
            for s in range(2):
                for i in range(D // 4):
                    for c in range(2):
                        new[part + h * D + s * D // 2 + 2 * i + c] = old[part + h * D + 4 * i + 2 * s + c]
    return b"".join(new)


def check_mmproj(hf, mmproj, text_parts, label, defaults=False):
    vc = json.load(open(os.path.join(hf, "config.json")))["vision_config"]
    src = read_safetensors_dir(hf)
    kv, ts = read_gguf(mmproj)
    L, heads = vc["vt_num_hidden_layers"], vc["vt_num_attention_heads"]
    names = expected_names(L)
    check(sorted(ts) == sorted(n for n, _, _ in names) and len(ts) == 6 * L + 6, f"{label}: {len(ts)} tensors = 6·{L} + 6, named as §2")
    bad = []
    for g, h, perm in names:
        shape, dtype, raw, _ = src[h]
        ne, ty, data = ts[g]
        want = permuted(raw, shape[0], heads, shape[0] // 3 // heads) if perm else raw
        if ne != shape[::-1] or ty != {"BF16": 30, "F16": 1, "F32": 0}[dtype] or data != want:
            bad.append(g)
    check(not bad, f"{label}: every tensor byte-identical to the checkpoint's after the Q/K permutation {bad[:3]}")
    C = vc["vt_hidden_size"]
    want = {"general.architecture": "clip", "general.type": "mmproj", "clip.has_vision_encoder": True,
            "clip.projector_type": "kimik3", "clip.vision.image_size": vc["init_pos_emb_height"] * 14,
            "clip.vision.patch_size": 14, "clip.vision.embedding_length": C,
            "clip.vision.feed_forward_length": vc["vt_intermediate_size"], "clip.vision.block_count": L,
            "clip.vision.attention.head_count": heads,
            "clip.vision.attention.head_dim": src["vision_tower.encoder.blocks.0.wqkv.weight"][0][0] // 3 // heads,
            "clip.vision.projection_dim": vc["text_hidden_size"], "clip.vision.projector.scale_factor": 2,
            "clip.vision.image_mean": [0.5] * 3, "clip.vision.image_std": [0.5] * 3,
            "clip.vision.image_min_pixels": 8 * 196,
            "clip.vision.image_max_pixels": (65536 if defaults else vc["in_patch_limit"]) * 196,
            "k3.vision.rope_theta": 10000.0,
            "k3.vision.pos_emb_interpolation": "bicubic" if defaults else vc["pos_emb_interpolation"],
            "k3.vision.in_patch_limit": 65536 if defaults else vc["in_patch_limit"]}
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    eps_v = 0.0078125 if defaults else f32(vc["vt_rms_norm_eps"])
    eps_p = f32(1e-5) if defaults else f32(vc["projector_rms_norm_eps"])
    wrong = [k for k, v in want.items() if k not in kv or kv[k][1] != v]
    wrong += [k for k, v in (("clip.vision.attention.layer_norm_epsilon", eps_v), ("k3.vision.projector_norm_epsilon", eps_p))
              if k not in kv or kv[k][0] != 6 or kv[k][1] != v]
    check(not wrong, f"{label}: metadata per §3 (ε_v {eps_v}, ε_p {eps_p}) {wrong}")
    leaked = [n for p in text_parts for n in read_gguf(p)[1] if n.startswith(("v.", "mm."))]
    check(not leaked, f"{label}: the text parts hold no vision tensor {leaked[:3]}")


def outputs(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".gguf") or f == "MANIFEST.json")


def same_dirs(a, b):
    fa, fb = outputs(a), outputs(b)
    return fa == fb and all(filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False) for f in fa)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True)
    k3 = ap.parse_args().k3
    with tempfile.TemporaryDirectory(prefix="k3-vision-convert-") as d:
        hf = os.path.join(d, "Kimi-K3")
        run([k3, "make-tiny", "-q", "--out", os.path.join(d, "ref.gguf"), "--hf-dir", hf, "--vision",
             "--vision-layers", "3", "--vision-interp", "bilinear", "--vision-patch-limit", "2000", "--vision-eps", "1e-6"])
        conv = lambda out, *extra, env=None, ok=True: run([k3, "convert", "--src", hf, "--out-dir", os.path.join(d, out), "-q", *extra], env=env, ok=ok)
        conv("a")
        a = os.path.join(d, "a")
        mm = os.path.join(a, "mmproj-Kimi-K3-BF16.gguf")
        parts = [os.path.join(a, f) for f in outputs(a) if f.startswith("Kimi-K3-0")]
        check(os.path.exists(mm), "convert writes mmproj-Kimi-K3-BF16.gguf")
        check_mmproj(hf, mm, parts, "mmproj")
        man = json.load(open(os.path.join(a, "MANIFEST.json")))["tensors"]
        check(all(n in man for n in read_gguf(mm)[1]), "the manifest records every mmproj tensor")

        conv("b")
        check(same_dirs(a, os.path.join(d, "a")) and same_dirs(a, os.path.join(d, "b")), "converting twice gives identical files")
        n_text = sum(len(read_gguf(p)[1]) for p in parts)
        for point in (f"tensor:{n_text + 4}", f"written:{len(parts) + 1}", f"renamed:{len(parts) + 1}"):
            out = "crash_" + point.replace(":", "_")
            r = conv(out, "-j", "1", env=dict(os.environ, K3_CONVERT_CRASH=point), ok=False)
            check(r.returncode == -9, f"kill -9 at {point} (inside the mmproj) kills the converter")
            conv(out)
            check(same_dirs(a, os.path.join(d, out)), f"after kill -9 at {point}, a rerun gives identical files")

        r = run([k3, "verify", "-m", os.path.join(a, "MANIFEST.json"), mm])
        check("18 tensors checked, 18 ok" in r.stdout or "24 tensors checked, 24 ok" in r.stdout, "verify of the mmproj alone: " + r.stdout.strip())
        r = run([k3, "verify", "-m", os.path.join(a, "MANIFEST.json"), *parts])
        check("0 problems" in r.stdout, "verify of the text set alone: " + r.stdout.strip())
        r = run([k3, "verify", "-m", os.path.join(a, "MANIFEST.json"), *parts, mm])
        check("0 problems" in r.stdout, "verify of both: " + r.stdout.strip())
        tampered = os.path.join(d, "tampered.gguf")
        shutil.copy(mm, tampered)
        with open(tampered, "r+b") as f:
            f.seek(-3, 2)
            byte = f.read(1)
            f.seek(-3, 2)
            f.write(bytes([byte[0] ^ 0x40]))
        r = run([k3, "verify", "-m", os.path.join(a, "MANIFEST.json"), tampered], ok=False)
        check(r.returncode == 1 and "mm.post_norm.weight" in r.stdout, "verify names a changed mmproj tensor")

        conv("nomm", "--no-mmproj")
        nomm = os.path.join(d, "nomm")
        check(not any(f.startswith("mmproj") for f in os.listdir(nomm)) and
              all(filecmp.cmp(p, os.path.join(nomm, os.path.basename(p)), shallow=False) for p in parts),
              "--no-mmproj: no mmproj, the same text parts")

        conv("vocab", "--vocab-only")
        kv, ts = read_gguf(os.path.join(d, "vocab", "Kimi-K3-vocab.gguf"))
        kv1 = read_gguf(parts[0])[0]
        keys = [k for k in kv1 if k.startswith(("kimi-k3.", "tokenizer."))]
        check(not ts and all(kv.get(k) == kv1[k] for k in keys) and len(keys) > 30,
              f"--vocab-only: no tensors, all {len(keys)} kimi-k3.* and tokenizer keys of the model")

        cfg_path = os.path.join(hf, "config.json")
        cfg = json.load(open(cfg_path))
        orig = json.dumps(cfg)
        for k in ("vt_rms_norm_eps", "projector_rms_norm_eps", "pos_emb_interpolation", "in_patch_limit"):
            del cfg["vision_config"][k]
        json.dump(cfg, open(cfg_path, "w"))
        conv("defaults")
        check_mmproj(hf, os.path.join(d, "defaults", "mmproj-Kimi-K3-BF16.gguf"), [], "config without the optional keys", defaults=True)

        cfg = json.loads(orig)
        cfg["vision_config"]["vt_hidden_size"] += 8
        json.dump(cfg, open(cfg_path, "w"))
        r = conv("disagree", "--dry-run")
        check("vision_config.vt_hidden_size" in r.stderr and "using the shapes" in r.stderr,
              "a vision_config that disagrees with the shapes is reported by field")
        json.dump(json.loads(orig), open(cfg_path, "w"))

        index_path = os.path.join(hf, "model.safetensors.index.json")
        index = json.load(open(index_path))
        del index["weight_map"]["mm_projector.proj.2.weight"]
        json.dump(index, open(index_path, "w"))
        r = conv("missing", ok=False)
        check(r.returncode != 0 and "mm_projector.proj.2.weight" in r.stderr, "a missing vision tensor is an error naming it")
    if failures:
        print(f"{len(failures)} FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("vision conversion: all passed")


if __name__ == "__main__":
    main()
