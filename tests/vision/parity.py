"""k3's vision path against the independent reference (reference.py: PyTorch ops, Pillow, the HF
checkpoint): for a corpus of images, k3 encode-image's resized pixels must equal Pillow's byte for
byte, and its rows must be within 1e-4 relative (max |diff| / max |ref|) of the reference's, on
small well-conditioned towers written by make-tiny --vision --hf-dir: bicubic and bilinear
position tables, grids that need the table resized and one that is exactly the 64 x 64 table.
Exits non-zero on any mismatch (a missing torch or Pillow is a failure too).
    /usr/bin/python3 tests/vision/parity.py --k3 build/bin/k3"""
import argparse, json, os, struct, subprocess, sys, tempfile, zlib

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import torch  # noqa: E402

TOL = 1e-4
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


# ---- corpus ----

def smooth(rng, h, w, c):
    """A smooth random image (so a resize has structure to keep), uint8 [h, w, c]."""
    a = rng.normal(size=(h // 8 + 2, w // 8 + 2, c)) * 60 + 128
    big = np.stack([np.asarray(Image.fromarray(np.clip(a[..., i], 0, 255).astype(np.uint8)).resize((w, h), Image.BILINEAR))
                    for i in range(c)], axis=-1)
    noise = rng.integers(-20, 21, size=big.shape)
    return np.clip(big.astype(int) + noise, 0, 255).astype(np.uint8)


def png_chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def raw_png(w, h, depth, ctype, rows, plte=None, trns=None):
    """PNG bytes for layouts Pillow cannot write (16-bit colour, low bit depths, tRNS keys)."""
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0))
    if plte:
        out += png_chunk(b"PLTE", plte)
    if trns is not None:
        out += png_chunk(b"tRNS", trns)
    return out + png_chunk(b"IDAT", zlib.compress(b"".join(b"\0" + r for r in rows))) + png_chunk(b"IEND", b"")


def corpus(d):
    rng = np.random.default_rng(17)
    files = {}

    def save(name, im, **kw):
        p = os.path.join(d, name)
        im.save(p, **kw)
        files[name] = p

    def raw(name, data):
        p = os.path.join(d, name)
        open(p, "wb").write(data)
        files[name] = p

    save("rgb_small.png", Image.fromarray(smooth(rng, 61, 97, 3)))              # no resize
    save("rgb_cells.png", Image.fromarray(smooth(rng, 112, 168, 3)))            # whole merge cells
    save("rgb_down.png", Image.fromarray(smooth(rng, 900, 1300, 3)))            # needs downscaling
    save("rgb_down.jpg", Image.fromarray(smooth(rng, 1000, 760, 3)), quality=87)
    save("wide.png", Image.fromarray(smooth(rng, 20, 2600, 3)))                 # extreme aspect ratios
    save("tall.jpg", Image.fromarray(smooth(rng, 2400, 31, 3)), quality=90)
    save("wide_down.png", Image.fromarray(smooth(rng, 60, 8000, 3)))          # wider than 7168 and over the limit
    save("thin.png", Image.fromarray(smooth(rng, 1, 500, 3)))
    save("one.png", Image.fromarray(smooth(rng, 1, 1, 3)))
    save("grey.png", Image.fromarray(smooth(rng, 300, 420, 1)[..., 0], "L"))
    save("grey_down.jpg", Image.fromarray(smooth(rng, 1100, 900, 1)[..., 0], "L"), quality=80)
    save("rgba.png", Image.fromarray(smooth(rng, 333, 250, 4), "RGBA"))
    save("rgba_down.png", Image.fromarray(smooth(rng, 1500, 700, 4), "RGBA"))
    la = smooth(rng, 90, 130, 2)
    save("la.png", Image.fromarray(la, "LA"))
    pal = Image.fromarray(smooth(rng, 200, 310, 3)).convert("P", palette=Image.ADAPTIVE, colors=64)
    save("palette.png", pal)
    save("palette_trns.png", pal, transparency=5)
    save("progressive.jpg", Image.fromarray(smooth(rng, 400, 333, 3)), quality=75, progressive=True)
    save("subsampled.jpg", Image.fromarray(smooth(rng, 257, 199, 3)), quality=70, subsampling=2)
    save("cmyk.jpg", Image.fromarray(smooth(rng, 120, 90, 4), "CMYK"), quality=90)
    w, h = 70, 45
    g = smooth(rng, h, w, 3).astype(np.uint16) * 257 + rng.integers(0, 256, (h, w, 3)).astype(np.uint16)
    raw("rgb16.png", raw_png(w, h, 16, 2, [g[y].astype(">u2").tobytes() for y in range(h)]))
    raw("grey16.png", raw_png(w, h, 16, 0, [(g[y, :, 0] // 200).astype(">u2").tobytes() for y in range(h)]))
    raw("grey16_trns.png", raw_png(w, h, 16, 0, [(g[y, :, 0] // 200).astype(">u2").tobytes() for y in range(h)],
                                   trns=struct.pack(">H", int(g[0, 0, 0] // 200))))
    for depth in (1, 2, 4):
        v = rng.integers(0, 1 << depth, (h, w))
        rows = [np.packbits(np.unpackbits(v[y].astype(np.uint8)[:, None], axis=1)[:, 8 - depth:].reshape(-1)).tobytes()
                for y in range(h)]
        raw(f"grey{depth}.png", raw_png(w, h, depth, 0, rows))
    rgbk = smooth(rng, h, w, 3)
    rgbk[::3, ::2] = (10, 20, 30)
    raw("rgb_trns.png", raw_png(w, h, 8, 2, [rgbk[y].tobytes() for y in range(h)], trns=struct.pack(">HHH", 10, 20, 30)))
    return files


# ---- comparisons ----

def k3_encode(k3, mmproj, path, tmp, extra=()):
    px, rows = os.path.join(tmp, "k.u8"), os.path.join(tmp, "k.f32")
    j = json.loads(run([k3, "encode-image", "--mmproj", mmproj, "--image", path, "--dump-pixels", px, "--out", rows,
                        "-t", "2", *extra]))
    return j, np.fromfile(px, np.uint8), np.fromfile(rows, "<f4").reshape(j["n_tokens"], j["n_embd"])


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def tower(k3, d, name, flags):
    hf = os.path.join(d, name + "-hf")
    gguf = os.path.join(d, name + ".gguf")
    run([k3, "make-tiny", "-q", "--out", gguf, "--hf-dir", hf, "--vision", *flags])
    return os.path.join(d, "mmproj-" + name + ".gguf"), reference.Tower(hf)


def compare(k3, mmproj, ref, path, tmp, label, pixels_only=False):
    j, kpx, krows = k3_encode(k3, mmproj, path, tmp)
    im, rpx = reference.load_pixels(path, ref.limit, ref.patch)
    same = list(im.size) == j["resized"] and kpx.tobytes() == rpx.tobytes()
    check(same, f"{label}: resized pixels {j['resized']} byte-identical to Pillow")
    if pixels_only or not same:
        return
    e = ref.encode(rpx).numpy()
    check(e.shape == krows.shape and rel(krows, e) <= TOL,
          f"{label}: rows {list(krows.shape)} grid {j['grid']} within {TOL} of the reference (rel {rel(krows, e):.2e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True)
    k3 = ap.parse_args().k3
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="k3-vision-parity-") as d, torch.no_grad():
        files = corpus(d)
        # bicubic table 16 x 16, patch limit 1024 (so the larger images are downscaled)
        mm, ref = tower(k3, d, "bicubic", ["--vision-patch-limit", "1024", "--vision-eps", "1e-5", "--seed", "3"])
        # every image's pixels; rows for those that take another path to them
        rows_for = ("rgb_small.png", "rgb_cells.png", "rgb_down.png", "rgb_down.jpg", "wide.png", "wide_down.png", "thin.png", "one.png",
                    "grey_down.jpg", "rgba_down.png", "palette_trns.png", "cmyk.jpg", "grey16_trns.png")
        for name, path in files.items():
            compare(k3, mm, ref, path, d, "bicubic " + name, pixels_only=name not in rows_for)
        # bilinear table 12 x 12, 3 blocks, the default ε
        mm, ref = tower(k3, d, "bilinear", ["--vision-interp", "bilinear", "--vision-pos", "12", "--vision-layers", "3",
                                            "--vision-patch-limit", "2048", "--seed", "4"])
        for name in ("rgb_small.png", "rgb_down.jpg", "tall.jpg", "rgba.png", "palette_trns.png"):
            compare(k3, mm, ref, files[name], d, "bilinear " + name)
        # the real 64 x 64 table: a grid equal to it (no resize of the table) and one that is not
        mm, ref = tower(k3, d, "table64", ["--vision-pos", "64", "--vision-layers", "1", "--vision-width", "32",
                                           "--vision-heads", "2", "--vision-head-dim", "16", "--vision-ff", "64",
                                           "--vision-proj-hidden", "128", "--vision-patch-limit", "65536", "--seed", "5"])
        rng = np.random.default_rng(64)
        for w, h in ((896, 896), (896, 420)):
            p = os.path.join(d, f"table64_{w}x{h}.png")
            Image.fromarray(smooth(rng, h, w, 3)).save(p)
            compare(k3, mm, ref, p, d, f"table64 {w}x{h}")
        # --image-max-tokens: at most that many rows, and still the reference's rows for k3's pixels
        mm, ref = tower(k3, d, "capped", ["--seed", "6"])
        for name in ("rgb_down.png", "wide.png"):
            j, kpx, krows = k3_encode(k3, mm, files[name], d, ["--image-max-tokens", "40"])
            e = ref.encode(kpx.reshape(j["resized"][1], j["resized"][0], 3)).numpy()
            check(j["n_tokens"] <= 40 and e.shape == krows.shape and rel(krows, e) <= TOL,
                  f"--image-max-tokens 40 {name}: {j['n_tokens']} rows, rel {rel(krows, e):.2e}")
        # a quantized mmproj (k3 quantize q8_0) runs and stays near the BF16 rows
        q8 = os.path.join(d, "mmproj-q8.gguf")
        run([k3, "quantize", mm, q8, "q8_0"])
        _, _, bf = k3_encode(k3, mm, files["rgb_down.png"], d)
        _, _, q = k3_encode(k3, q8, files["rgb_down.png"], d)
        check(q.shape == bf.shape and rel(q, bf) < 0.05, f"q8_0 mmproj: rows within 0.05 of the BF16 ones (rel {rel(q, bf):.3f})")
    if failures:
        print(f"{len(failures)} FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("vision parity: all passed")


if __name__ == "__main__":
    main()
