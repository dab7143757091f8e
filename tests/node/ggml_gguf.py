#!/usr/bin/python3
"""GGUF files as llama.cpp's own tools write them, for k3's tests: the tensors a rule names are
quantized by ggml's ggml_quantize_chunk (node-llama-cpp's libggml-base.so, through ctypes) and the
file is written by llama.cpp's gguf-py (from the llama.cpp source that node-llama-cpp bundles as a
git bundle; Debian's python3 + numpy). Neither k3's writer nor its quantizers touch these files.

    /usr/bin/python3 tests/node/ggml_gguf.py IN.gguf OUT.gguf [--tensor-type REGEX=TYPE ...]
        [--types-from FILE.gguf] [--imatrix FILE | --imatrix-synthetic SEED]

IN holds float tensors (F32, F16 or BF16; a tiny model from make_tiny_kimi_k3.mjs, or k3 make-tiny).
The first --tensor-type rule whose REGEX matches a tensor's name (re.search, as k3 quantize and
llama-quantize) gives its type, or --types-from the type the tensor of that name has in another
GGUF (e.g. k3 quantize's output); a tensor no rule names is copied. A tensor whose row length the
type's block does not divide keeps its type and is listed as "unfit" ("name:type"). Importance
weights per matrix (each expert of a 3-D stack its own, as llama-quantize passes them): from an
imatrix GGUF (in_sum2 / counts, 1 where counts is 0, as llama-quantize and k3 quantize read it),
or drawn per tensor name from SEED (positive, deterministic); a type ggml must have them for
(ggml_quantize_requires_imatrix) without either is an error. The KVs are copied in order; OUT is
written under a temporary name and renamed when complete. Prints one JSON line:
    {"ok": true, "quantized": N, "unfit": [...], "types": {"name": "type", ...}}
"""
import argparse, ctypes, json, os, re, subprocess, sys, tempfile, zlib
from pathlib import Path

import numpy as np

NODE = Path(__file__).resolve().parent / "node_modules"
LIBGGML = NODE / "@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so"
BUNDLE = NODE / "node-llama-cpp/llama/gitRelease.bundle"


def gguf_py():
    """llama.cpp's gguf-py package, extracted once from the bundle into a cache directory keyed by
    the bundle's size and time (a temporary copy renamed into place: concurrent tests are safe)."""
    st = BUNDLE.stat()
    cache = Path(os.environ.get("K3_GGUF_PY_CACHE", tempfile.gettempdir())) / f"k3-gguf-py-{st.st_size}-{int(st.st_mtime)}"
    if not (cache / "gguf").is_dir():
        cache.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
            repo = Path(tmp) / "repo"
            subprocess.run(["git", "clone", "-q", "--no-checkout", str(BUNDLE), str(repo)], check=True)
            out = Path(tmp) / "out"
            out.mkdir()
            archive = subprocess.run(["git", "-C", str(repo), "archive", "HEAD", "gguf-py/gguf"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
            try:
                os.rename(out / "gguf-py", cache)
            except OSError:
                if not (cache / "gguf").is_dir():
                    raise
    sys.path.insert(0, str(cache))
    import gguf
    return gguf


class Ggml:
    def __init__(self):
        lib = ctypes.CDLL(str(LIBGGML))
        lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                            ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
        lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
        lib.ggml_row_size.restype = ctypes.c_size_t
        lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.lib = lib

    def requires_imatrix(self, t):
        return bool(self.lib.ggml_quantize_requires_imatrix(int(t)))

    def quantize(self, t, x, weights):
        """x: float32 [rows, n]; weights: float32 [n] or None. The rows' bytes, [rows, row bytes]."""
        rows, n = x.shape
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros((rows, self.lib.ggml_row_size(int(t), n)), dtype=np.uint8)
        w = None if weights is None else np.ascontiguousarray(weights, dtype=np.float32)
        got = self.lib.ggml_quantize_chunk(int(t), x.ctypes.data, out.ctypes.data, 0, rows, n,
                                           None if w is None else w.ctypes.data)
        assert got == out.nbytes, (got, out.nbytes)
        return out


def as_f32(gguf, t):
    """A float tensor's values as float32 in numpy order [ne3, ne2, ne1, ne0]."""
    Q = gguf.GGMLQuantizationType
    if t.tensor_type == Q.F32:
        return np.asarray(t.data, dtype=np.float32)
    if t.tensor_type == Q.F16:
        return np.asarray(t.data, dtype=np.float16).astype(np.float32)
    if t.tensor_type == Q.BF16:
        bits = np.asarray(t.data).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(tuple(reversed([int(d) for d in t.shape])))
    raise SystemExit(f"ggml_gguf.py: tensor '{t.name}' is {t.tensor_type.name}: only F32, F16 and BF16 sources can be quantized")


def imatrix_from_file(gguf, path):
    """{weight name: float32 [n_mat, ne0]} as llama-quantize derives importance from an imatrix GGUF."""
    r = gguf.GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    out = {}
    for name in t:
        if not name.endswith(".in_sum2"):
            continue
        base = name[: -len(".in_sum2")]
        sums = np.asarray(t[name].data, dtype=np.float32)
        counts = np.asarray(t[base + ".counts"].data, dtype=np.float32).reshape(-1)
        sums = sums.reshape(counts.size, -1)
        vals = np.ones_like(sums)
        for m, c in enumerate(counts):
            if c > 0:
                vals[m] = sums[m] / c
        out[base] = vals
    return out


def synthetic_weights(name, n_mat, ne0, seed):
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return np.exp(rng.normal(0.0, 1.0, size=(n_mat, ne0))).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--tensor-type", action="append", default=[], metavar="REGEX=TYPE")
    ap.add_argument("--types-from", metavar="FILE")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--imatrix", metavar="FILE")
    g.add_argument("--imatrix-synthetic", type=int, metavar="SEED")
    a = ap.parse_args()

    gguf = gguf_py()
    Q = gguf.GGMLQuantizationType
    rules = []
    for text in a.tensor_type:
        pat, _, ty = text.rpartition("=")
        try:
            rules.append((re.compile(pat), Q[ty.upper()]))
        except (re.error, KeyError) as e:
            raise SystemExit(f"ggml_gguf.py: bad rule '{text}': {e}")
    if a.types_from:
        rules += [(re.compile("^" + re.escape(t.name) + "$"), t.tensor_type) for t in gguf.GGUFReader(a.types_from).tensors]
    ggml = Ggml()
    reader = gguf.GGUFReader(a.input)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    imatrix = imatrix_from_file(gguf, a.imatrix) if a.imatrix else None

    out_dir = os.path.dirname(os.path.abspath(a.output))
    fd, tmp = tempfile.mkstemp(prefix=".ggml_gguf.", suffix=".tmp", dir=out_dir)
    os.close(fd)
    try:
        report = write(gguf, ggml, reader, arch, rules, imatrix, a.imatrix_synthetic, tmp)
        os.replace(tmp, a.output)
        print(json.dumps({"ok": True, **report}))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write(gguf, ggml, reader, arch, rules, imatrix, seed, tmp):
    writer = gguf.GGUFWriter(tmp, arch)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        vtype = f.types[0]
        writer.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)

    quantized, unfit, types = 0, [], {}
    for t in reader.tensors:
        want = next((ty for pat, ty in rules if pat.search(t.name)), None)
        ne = [int(d) for d in t.shape]
        if want is not None and ne[0] % gguf.GGML_QUANT_SIZES[want][0] != 0:
            unfit.append(f"{t.name}:{want.name.lower()}")
            want = None
        if want is None or want == t.tensor_type:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            types[t.name] = t.tensor_type.name.lower()
            continue
        x = as_f32(gguf, t).reshape(-1, ne[1] if len(ne) > 1 else 1, ne[0])  # [matrices, rows, ne0]
        if imatrix is not None and t.name in imatrix:
            weights = imatrix[t.name]
            if weights.shape != (x.shape[0], ne[0]):
                raise SystemExit(f"ggml_gguf.py: imatrix entry '{t.name}' is {weights.shape}, the tensor needs {(x.shape[0], ne[0])}")
        elif seed is not None:
            weights = synthetic_weights(t.name, x.shape[0], ne[0], seed)
        else:
            weights = None
        if weights is None and ggml.requires_imatrix(want):
            raise SystemExit(f"ggml_gguf.py: tensor '{t.name}': {want.name} needs an importance matrix (--imatrix or --imatrix-synthetic)")
        q = np.concatenate([ggml.quantize(want, x[m], None if weights is None else weights[m]) for m in range(x.shape[0])])
        writer.add_tensor(t.name, q.reshape(list(reversed(ne[1:])) + [q.shape[1]]), raw_dtype=want)
        types[t.name] = want.name.lower()
        quantized += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {"quantized": quantized, "unfit": unfit, "types": types}


if __name__ == "__main__":
    main()
