"""An independent MoonViT + patch-merger reference, written from shared/spec/vision.md with
PyTorch's own ops (F.conv2d, F.interpolate, matmul/softmax attention, F.gelu) and Pillow for the
image steps. It reads the Hugging Face checkpoint (config.json vision_config + safetensors), never
the GGUF, and applies the checkpoint's interleaved 2-D RoPE as the official code does (complex
pairs), so k3's split-layout rotation of the converted rows is checked, not assumed.

Library use (tests/vision/parity.py):
    ref = Tower(hf_dir);  px = load_pixels(path, ref.limit);  e = ref.encode(px)
Command line:
    reference.py --hf-dir D --image I [--pixels P.u8] [--out E.f32] [--max-tokens T]"""
import argparse, json, math, os, struct, sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

MAX_SIDE = 7168


# ---- image -> pixels (vision.md §4) ----

def chessboard_composite(rgba):
    """RGBA uint8 [h, w, 4] over 8 x 8 squares of 255 / 180 (top-left 255)."""
    h, w = rgba.shape[:2]
    y, x = np.mgrid[0:h, 0:w]
    bg = np.where(((x // 8 + y // 8) % 2) == 0, 255, 180).astype(np.int64)
    a = rgba[..., 3].astype(np.int64)[..., None]
    v = rgba[..., :3].astype(np.int64)
    return ((a * v + (255 - a) * bg[..., None] + 127) // 255).astype(np.uint8)


def decode(path):
    im = Image.open(path)
    alpha = im.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in im.info
    if alpha:
        return Image.fromarray(chessboard_composite(np.asarray(im.convert("RGBA"))), "RGB")
    return im.convert("RGB")


def target_size(w, h, limit, patch=14):
    s = min(1.0, math.sqrt(limit / (max(1, w // patch) * max(1, h // patch))), MAX_SIDE / w, MAX_SIDE / h)
    return max(1, int(math.floor(w * s))), max(1, int(math.floor(h * s)))


def load_pixels(path, limit, patch=14):
    im = decode(path)
    size = target_size(im.width, im.height, limit, patch)
    if size != im.size:
        im = im.resize(size, Image.BICUBIC)
    return im, np.asarray(im, dtype=np.uint8)


# ---- the checkpoint ----

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


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
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=DTYPES[t["dtype"]]).reshape(t["shape"]).float()
    return out


class Tower:
    def __init__(self, hf_dir):
        cfg = json.load(open(os.path.join(hf_dir, "config.json")))
        vc = cfg["vision_config"]
        index = json.load(open(os.path.join(hf_dir, "model.safetensors.index.json")))["weight_map"]
        self.w = {}
        for shard in sorted(set(f for n, f in index.items() if n.startswith(("vision_tower.", "mm_projector.")))):
            self.w.update({k: v for k, v in read_safetensors(os.path.join(hf_dir, shard)).items()
                           if k.startswith(("vision_tower.", "mm_projector."))})
        self.heads = vc["vt_num_attention_heads"]
        self.layers = vc["vt_num_hidden_layers"]
        self.patch = vc["patch_size"]
        self.eps = vc.get("vt_rms_norm_eps", 2.0 ** -7)
        self.proj_eps = vc.get("projector_rms_norm_eps", 1e-5)
        self.interp = vc.get("pos_emb_interpolation", "bicubic")
        self.limit = vc.get("in_patch_limit", 65536)
        self.theta = 10000.0

    @staticmethod
    def rmsnorm(x, g, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    def rope_cis(self, h, w, head_dim):
        """freqs_cis [h*w, head_dim/2] complex, interleaved (column, row) per frequency, as Kimi-VL's
        Rope2DPosEmb builds it."""
        dim_range = torch.arange(0, head_dim, 4)[: head_dim // 4].float()
        freqs = 1.0 / (self.theta ** (dim_range / head_dim))
        pos = torch.arange(h * w)
        x_pos, y_pos = (pos % w).float(), (pos // w).float()
        x_cis = torch.polar(torch.ones(h * w, head_dim // 4), torch.outer(x_pos, freqs))
        y_cis = torch.polar(torch.ones(h * w, head_dim // 4), torch.outer(y_pos, freqs))
        return torch.cat([x_cis.unsqueeze(-1), y_cis.unsqueeze(-1)], dim=-1).reshape(h * w, head_dim // 2)

    @staticmethod
    def apply_rope(x, cis):  # x [N, heads, D]
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * cis[:, None, :]).flatten(-2)

    def encode(self, pixels):
        """pixels: uint8 [h', w', 3] after the resize -> rows [n_tokens, text width] (float32)."""
        w = self.w
        p = self.patch
        rh, rw = pixels.shape[:2]
        H, W = 28 * math.ceil(rh / 28), 28 * math.ceil(rw / 28)
        img = torch.zeros(3, H, W)
        t = torch.from_numpy(pixels.copy()).permute(2, 0, 1).float()
        img[:, :rh, :rw] = (t / 255.0 - 0.5) / 0.5
        img[:, rh:, :] = (0.0 - 0.5) / 0.5
        img[:, :, rw:] = (0.0 - 0.5) / 0.5
        x = F.conv2d(img[None], w["vision_tower.patch_embed.proj.weight"], stride=p)[0]  # [C, h, w]
        C, gh, gw = x.shape
        x = x.permute(1, 2, 0).reshape(gh * gw, C)
        table = w["vision_tower.patch_embed.pos_emb.weight"]  # [H0, W0, C]
        if (gh, gw) == tuple(table.shape[:2]):
            pos = table.reshape(-1, C)
        else:
            pos = F.interpolate(table.permute(2, 0, 1)[None], size=(gh, gw), mode=self.interp,
                                align_corners=False)[0].permute(1, 2, 0).reshape(-1, C)
        x = x + pos
        N = gh * gw
        for i in range(self.layers):
            b = f"vision_tower.encoder.blocks.{i}."
            a = self.rmsnorm(x, w[b + "norm0.weight"], self.eps)
            qkv = a @ w[b + "wqkv.weight"].T
            D = qkv.shape[1] // 3 // self.heads
            q, k, v = qkv.reshape(N, 3, self.heads, D).unbind(1)
            cis = self.rope_cis(gh, gw, D)
            q, k = self.apply_rope(q, cis), self.apply_rope(k, cis)
            s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
            o = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v).reshape(N, self.heads * D)
            x = x + o @ w[b + "wo.weight"].T
            u = self.rmsnorm(x, w[b + "norm1.weight"], self.eps) @ w[b + "mlp.fc0.weight"].T
            x = x + F.gelu(u, approximate="tanh") @ w[b + "mlp.fc1.weight"].T
        x = self.rmsnorm(x, w["vision_tower.encoder.final_layernorm.weight"], self.eps)
        m = x.reshape(gh // 2, 2, gw // 2, 2, C).permute(0, 2, 1, 3, 4).reshape(N // 4, 4 * C)
        e = F.gelu(m @ w["mm_projector.proj.0.weight"].T) @ w["mm_projector.proj.2.weight"].T
        return self.rmsnorm(e, w["mm_projector.post_norm.weight"], self.proj_eps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-dir", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--pixels")
    ap.add_argument("--out")
    a = ap.parse_args()
    tower = Tower(a.hf_dir)
    im, px = load_pixels(a.image, tower.limit, tower.patch)
    if a.pixels:
        px.tofile(a.pixels)
    e = tower.encode(px)
    if a.out:
        e.numpy().astype("<f4").tofile(a.out)
    print(json.dumps({"resized": list(im.size), "n_tokens": e.shape[0], "n_embd": e.shape[1]}))


if __name__ == "__main__":
    with torch.no_grad():
        main()
