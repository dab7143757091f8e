"""Images through the command line: encode-image's rows the same bits for any thread count and
close across ISAs; k3 run --mmproj --image (rows counted in the prompt, the
placeholder rule, the same greedy tokens twice), k3 chat's /image, and the errors for a missing
--mmproj, a placeholder count that does not match, an mmproj of another width and a bad image.
    /usr/bin/python3 tests/vision/cli.py --k3 build/bin/k3"""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np
from PIL import Image

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd, ok=True, stdin=None):
    r = subprocess.run(cmd, capture_output=True, text=True, input=stdin)
    if ok and r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True)
    k3 = ap.parse_args().k3
    with tempfile.TemporaryDirectory(prefix="k3-vision-cli-") as d:
        model, mm = os.path.join(d, "tiny.gguf"), os.path.join(d, "mmproj-tiny.gguf")
        run([k3, "make-tiny", "-q", "--out", model, "--vision"])
        img = os.path.join(d, "cat.png")
        Image.new("RGB", (150, 90), (200, 30, 90)).save(img)
        rows = json.loads(run([k3, "encode-image", "--mmproj", mm, "--image", img]).stdout)["n_tokens"]
        # the same bits for any thread count, and close across the ISAs' kernels
        big = os.path.join(d, "big.png")
        Image.effect_noise((500, 420), 60).convert("RGB").save(big)
        hashes, outs = set(), {}
        for isa, t in (("avx512", "1"), ("avx512", "3"), ("avx2", "2"), ("scalar", "2")):
            out = os.path.join(d, f"rows-{isa}-{t}.f32")
            env = dict(os.environ, K3_ISA=isa)
            j = json.loads(subprocess.run([k3, "encode-image", "--mmproj", mm, "--image", big, "-t", t, "--out", out],
                                          capture_output=True, text=True, env=env, check=True).stdout)
            if isa == "avx512":
                hashes.add(j["hash"])
            outs[isa] = open(out, "rb").read()
        check(len(hashes) == 1, "the rows' hash does not depend on the thread count")
        ref = np.frombuffer(outs["scalar"], "<f4")
        worst = max(float(np.abs(np.frombuffer(outs[i], "<f4") - ref).max() / np.abs(ref).max()) for i in ("avx512", "avx2"))
        check(worst < 1e-5, f"AVX-512 / AVX2 rows within 1e-5 of the scalar kernels' (rel {worst:.1e})")
        base = [k3, "run", "-m", model, "-n", "6", "--temp", "0", "--json"]
        prompt_text = "<|media_begin|>image 150x90<|media_content|><|media_pad|><|media_end|>Say it."
        ids_text = json.loads(run(base + ["-p", prompt_text]).stdout.splitlines()[-1])["prompt_ids"]
        a = json.loads(run(base + ["--mmproj", mm, "--image", img, "-p", "Say it."]).stdout.splitlines()[-1])
        check(a["image_rows"] == rows and len(a["prompt_ids"]) == len(ids_text) - 1 + rows,
              f"k3 run --image: {rows} image rows in a prompt of {len(a['prompt_ids'])} positions")
        b = json.loads(run(base + ["--mmproj", mm, "--image", img, "-p", "Say it."]).stdout.splitlines()[-1])
        check(a["ids"] == b["ids"], "the same greedy tokens twice")
        two = json.loads(run(base + ["--mmproj", mm, "--image", img, "--image", img, "-p",
                                     "A <|kimi_image_placeholder|> and B <|kimi_image_placeholder|>."]).stdout.splitlines()[-1])
        check(two["image_rows"] == 2 * rows, "two placeholders take two images in order")
        r = run(base + ["--mmproj", mm, "--image", img, "-p", "only <|kimi_image_placeholder|> <|kimi_image_placeholder|>"], ok=False)
        check(r.returncode != 0 and "2 <|kimi_image_placeholder|> placeholders for 1 images" in r.stderr, "placeholder count mismatch: " + r.stderr.strip())
        r = run(base + ["--image", img, "-p", "x"], ok=False)
        check(r.returncode != 0 and "--image needs --mmproj" in r.stderr, "--image without --mmproj: " + r.stderr.strip())
        bad = os.path.join(d, "bad.png")
        open(bad, "wb").write(open(img, "rb").read()[:40])
        r = run(base + ["--mmproj", mm, "--image", bad, "-p", "x"], ok=False)
        check(r.returncode != 0 and f"image '{bad}'" in r.stderr, "a truncated image is named: " + r.stderr.strip())
        wide = os.path.join(d, "wide.gguf")
        run([k3, "make-tiny", "-q", "--out", wide, "--hidden", "128"])
        r = run([k3, "run", "-m", wide, "--mmproj", mm, "--image", img, "-n", "1"], ok=False)
        check(r.returncode != 0 and "belongs to another model" in r.stderr, "an mmproj of another width: " + r.stderr.strip())
        chat = run([k3, "chat", "-m", model, "--mmproj", mm, "-n", "4", "--temp", "0", "--seed", "1"],
                   stdin=f"/image {img}\nWhat is it?\n/image {bad}\n/exit\n")
        check(f"(image {img}: 150x90, {rows} rows; attached to your next message)" in chat.stdout and "[4 tokens" in chat.stdout
              and f"image '{bad}'" in chat.stdout, "k3 chat /image attaches, answers, and names a bad image")
    if failures:
        print(f"{len(failures)} FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("vision cli: all passed")


if __name__ == "__main__":
    main()
