#!/usr/bin/env python3
"""Image fixtures for dgemma, produced by the reference (transformers 5.17's Gemma 4 image processor with
its torchvision backend, PIL decoding with the reference server's RGBA handling, and a tiny random
DiffusionGemma with a vision tower) on the GPU machine, on its CPU.

Set A, decode and preprocess (exact): test images made here (PNG / JPEG / WebP / GIF; RGB, RGBA with
varying alpha, L, LA, palette with tRNS, 16-bit; aspect ratios from 1x1 to 3x900), each decoded as the
server does (PIL Image.open, RGBA composited over white, every other mode convert("RGB")) and
preprocessed at max_soft_tokens 70 / 280 / 1120: the target size, the soft-token count, the uint8 resized
image (the processor's own resize, checked against its pixel_values) and, for small cases, pixel_values
and positions. The PIL-backend and float-path differences are recorded as diagnostics.

Set B, a tiny random DiffusionGemma (text: 6 layers, window 16; vision: 2 layers of 32, 4 heads of 12,
patch 16, pooling 3, standardize) with image token ids inside its 512-token vocabulary: per image the
tower's intermediates in float32 and bfloat16, then for a prompt holding three images the encoder's
masks (generate() semantics), merged input embeddings, K/V and last hidden state under generate and
causal-only semantics, the decoder's logits on a fixed canvas without and with self-conditioning, and
generate() runs with the project's counter-based noise injected (make_fixtures.py's NoiseInjector).

Usage (GPU machine, from the repo root; CPU only, a few minutes):
  python3 tools/golden/make_image_fixtures.py --out /tmp/image_fixtures --tar $OUT/image_fixtures.tar
then, in the repository:  tar -xf image_fixtures.tar -C tests/fixtures   (creates tests/fixtures/image/)

Every section runs even when an earlier one failed; failures are listed in manifest.json under
"errors" and make the script exit with status 1 after writing the tar.

Without torch / transformers (`--images-only`), only the test images are written (numpy + Pillow).
"""
import argparse
import hashlib
import io
import json
import os
import shutil
import struct
import sys
import tarfile
import traceback
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
BUDGETS = (70, 280, 1120)
SAVE_RESIZED_MAX_PIXELS = 200_000  # larger resized images are checked through their SHA-256 only
SAVE_DECODED_MAX_PIXELS = 400_000
PIXEL_VALUE_CASES = ("noise_rgb_301x199", "rgba_alpha_257x183", "wide_3x900", "aligned_336x432")
WHITE = (255, 255, 255)


# ------------------------------------------------------------------------------------------------------
# Test images
# ------------------------------------------------------------------------------------------------------
def noise(rng, h, w, c):
    return rng.integers(0, 256, size=(h, w, c), dtype=np.uint8)


def smooth(rng, h, w, c=3):
    """Linear gradients, a checkerboard, thin lines and a few stray pixels: content that compresses."""
    y, x = np.mgrid[0:h, 0:w]
    base = [x * 255.0 / max(w - 1, 1), y * 255.0 / max(h - 1, 1), ((x + 2 * y) * 255.0 / (w + 2 * h)) % 256]
    img = np.stack([base[k % 3] for k in range(c)], -1)
    img[((x // 24 + y // 24) % 2 == 0)] *= 0.75
    img[x % 97 == 0] = 250
    img[y % 61 == 0] = 5
    img[(x + 3 * y) % 211 == 0] = rng.integers(0, 256)
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def png_bytes_raw(arr, color_type, bit_depth):
    """A PNG written by hand (Pillow cannot write 16-bit RGB): filter 0 rows, big-endian samples."""
    h, w = arr.shape[:2]
    if bit_depth == 16:
        raw = arr.astype(">u2").tobytes()
    else:
        raw = arr.astype(np.uint8).tobytes()
    row = len(raw) // h
    data = b"".join(b"\x00" + raw[i * row:(i + 1) * row] for i in range(h))

    def chunk(kind, payload):
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(data, 9)) + chunk(b"IEND", b"")


def pil_bytes(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def make_images(seed=20260917):
    """[(name, extension, bytes)] — every case's encoded file, deterministic."""
    rng = np.random.default_rng(seed)
    out = []

    def add(name, ext, data):
        out.append((name, ext, data))

    rgb = Image.fromarray  # modes follow the arrays' shapes: (H, W) L, (H, W, 2) LA, 3 RGB, 4 RGBA
    add("noise_rgb_301x199", "png", pil_bytes(rgb(noise(rng, 301, 199, 3)), "PNG"))
    add("smooth_rgb_1500x1000", "png", pil_bytes(rgb(smooth(rng, 1500, 1000)), "PNG", optimize=True))
    add("aligned_768x768", "png", pil_bytes(rgb(smooth(rng, 768, 768)), "PNG", optimize=True))
    a = smooth(rng, 336, 432)
    a[100:160, 200:300] = noise(rng, 60, 100, 3)
    add("aligned_336x432", "png", pil_bytes(rgb(a), "PNG"))
    add("one_1x1", "png", pil_bytes(rgb(noise(rng, 1, 1, 3)), "PNG"))
    add("tiny_5x7", "png", pil_bytes(rgb(noise(rng, 5, 7, 3)), "PNG"))
    add("wide_3x900", "png", pil_bytes(rgb(noise(rng, 3, 900, 3)), "PNG"))
    add("tall_900x3", "png", pil_bytes(rgb(noise(rng, 900, 3, 3)), "PNG"))
    add("strip_48x2000", "png", pil_bytes(rgb(smooth(rng, 48, 2000)), "PNG"))
    # RGBA: random colours, alpha a gradient with fully transparent and fully opaque bands.
    rgba = noise(rng, 257, 183, 4)
    alpha = np.tile(np.linspace(0, 255, 183).round().astype(np.uint8), (257, 1))
    alpha[:20] = 0
    alpha[-20:] = 255
    rgba[..., 3] = alpha
    add("rgba_alpha_257x183", "png", pil_bytes(Image.fromarray(rgba), "PNG"))
    add("gray_120x160", "png", pil_bytes(Image.fromarray(smooth(rng, 120, 160, 1)[..., 0]), "PNG"))
    la = noise(rng, 90, 70, 2)
    add("la_90x70", "png", pil_bytes(Image.fromarray(la), "PNG"))
    pal = rgb(smooth(rng, 64, 48)).quantize(colors=16)
    add("palette_trns_64x48", "png", pil_bytes(pal, "PNG", transparency=3))
    add("rgb16_40x30", "png", png_bytes_raw(rng.integers(0, 65536, size=(40, 30, 3)), 2, 16))
    add("gray16_30x20", "png", png_bytes_raw(rng.integers(0, 65536, size=(30, 20)) >> rng.integers(0, 16, size=(30, 20)), 0, 16))
    add("rgba16_20x20", "png", png_bytes_raw(rng.integers(0, 65536, size=(20, 20, 4)), 6, 16))
    photo = smooth(rng, 480, 640)
    photo[200:280, 300:420] = noise(rng, 80, 120, 3)
    add("jpeg_420_480x640", "jpg", pil_bytes(rgb(photo), "JPEG", quality=90, subsampling=2))
    add("jpeg_444_200x300", "jpg", pil_bytes(rgb(smooth(rng, 200, 300)), "JPEG", quality=92, subsampling=0))
    add("jpeg_progressive_360x240", "jpg", pil_bytes(rgb(smooth(rng, 360, 240)), "JPEG", quality=85, progressive=True))
    add("jpeg_gray_150x100", "jpg", pil_bytes(Image.fromarray(smooth(rng, 150, 100, 1)[..., 0]), "JPEG", quality=90))
    add("webp_lossy_300x200", "webp", pil_bytes(rgb(smooth(rng, 300, 200)), "WEBP", quality=80))
    add("webp_lossless_150x100", "webp", pil_bytes(rgb(noise(rng, 150, 100, 3)), "WEBP", lossless=True))
    wa = noise(rng, 90, 120, 4)
    wa[..., 3] = np.tile(np.linspace(0, 255, 120).round().astype(np.uint8), (90, 1))
    add("webp_lossless_alpha_120x90", "webp", pil_bytes(Image.fromarray(wa), "WEBP", lossless=True))
    add("webp_lossy_alpha_64x64", "webp", pil_bytes(Image.fromarray(noise(rng, 64, 64, 4)), "WEBP", quality=70))
    gif = rgb(smooth(rng, 100, 80)).quantize(colors=64)
    add("gif_100x80", "gif", pil_bytes(gif, "GIF", transparency=5))
    return out


# ------------------------------------------------------------------------------------------------------
# Decoding as the reference server does
# ------------------------------------------------------------------------------------------------------
def server_decode(data, background=WHITE):
    """PIL decode + the reference server's mode conversion: RGBA composited over `background` through
    its alpha (Image.paste with the alpha as mask), every other mode convert("RGB")."""
    img = Image.open(io.BytesIO(data))
    img.load()
    mode = img.mode
    if mode == "RGB":
        rgb = img
    elif mode == "RGBA":
        rgb = Image.new("RGB", img.size, background)
        rgb.paste(img, mask=img.split()[3])
    else:
        rgb = img.convert("RGB")
    return mode, rgb


def sha256(arr):
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def save_png(path, arr):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.ascontiguousarray(arr)).save(path, "PNG", optimize=True)


def patchify(chw_uint8, patch):
    """(C, H, W) -> [N, patch*patch*C] in the processor's order (patch rows, columns, channels)."""
    c, h, w = chw_uint8.shape
    p = chw_uint8.reshape(c, h // patch, patch, w // patch, patch).transpose(1, 3, 2, 4, 0)
    return p.reshape((h // patch) * (w // patch), -1)


class Errors:
    def __init__(self):
        self.items = {}

    def run(self, what, fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except Exception:  # noqa: BLE001 - every failure is recorded and reported at the end
            self.items[what] = traceback.format_exc()
            print(f"FAILED: {what}\n{self.items[what]}", file=sys.stderr)
            return None


# ------------------------------------------------------------------------------------------------------
# Set A: decode and preprocess
# ------------------------------------------------------------------------------------------------------
def processor_classes():
    from transformers.models.gemma4 import image_processing_gemma4 as tv_mod
    tv_cls = tv_mod.Gemma4ImageProcessor
    pil_cls = None
    try:
        from transformers.models.gemma4 import image_processing_pil_gemma4 as pil_mod
        for name in dir(pil_mod):
            obj = getattr(pil_mod, name)
            if isinstance(obj, type) and name.startswith("Gemma4ImageProcessor") and obj is not tv_cls:
                pil_cls = obj
    except ImportError:
        pass
    return tv_cls, pil_cls


def preprocess_case(root, name, ext, data, errors):
    import torch
    import torch.nn.functional as F
    from torchvision.transforms.v2 import functional as tvF

    tv_cls, pil_cls = processor_classes()
    mode, rgb = server_decode(data)
    arr = np.asarray(rgb)
    case = {"name": name, "file": f"inputs/{name}.{ext}", "pil_mode": mode,
            "format": {"png": "PNG", "jpg": "JPEG", "webp": "WebP", "gif": "GIF"}[ext],
            "lossless": ext in ("png", "gif") or "lossless" in name,
            "decoded": {"height": arr.shape[0], "width": arr.shape[1], "sha256": sha256(arr)}}
    # The pixels themselves where a difference needs them (lossy formats, converted modes); RGB PNG files
    # are their own expectation (the SHA-256 checks them).
    if (ext != "png" or mode != "RGB") and arr.shape[0] * arr.shape[1] <= SAVE_DECODED_MAX_PIXELS:
        case["decoded"]["png"] = f"decoded/{name}.png"
        save_png(os.path.join(root, case["decoded"]["png"]), arr)
    if mode == "RGBA":
        drop = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        case["drop_alpha"] = {"sha256": sha256(drop), "png": f"decoded/{name}.drop_alpha.png"}
        save_png(os.path.join(root, case["drop_alpha"]["png"]), drop)
    chw = tvF.pil_to_tensor(rgb)  # uint8 (3, H, W), what the torchvision backend converts a PIL image to
    case["budgets"] = []
    for s in BUDGETS:
        proc = tv_cls(max_soft_tokens=s)
        assert any(c.__name__ == "TorchvisionBackend" for c in type(proc).__mro__), type(proc).__mro__
        out = proc(images=[rgb], return_tensors="pt")
        pv = out["pixel_values"][0]
        pos = out["image_position_ids"][0]
        n_soft = int(out["num_soft_tokens_per_image"][0])
        resized = proc.aspect_ratio_preserving_resize(image=chw, patch_size=16, max_patches=s * 9,
                                                      pooling_kernel_size=3,
                                                      resample=tvF.InterpolationMode.BICUBIC)
        resized = resized.contiguous()
        h2, w2 = int(resized.shape[-2]), int(resized.shape[-1])
        n = (h2 // 16) * (w2 // 16)
        assert n_soft * 9 == n, (name, s, n_soft, n)
        # The saved resize is the processor's own: its pixel_values are this image's patches x float32(1/255).
        patches = patchify(resized.numpy(), 16)
        want_pv = torch.from_numpy(patches).to(torch.float32) * (1.0 / 255.0)
        b = {"max_soft_tokens": s, "height": h2, "width": w2, "soft_tokens": n_soft,
             "resized": (h2, w2) != tuple(arr.shape[:2]),
             "pixel_values_match_resize": bool(torch.equal(pv[:n], want_pv)),
             "padding_as_expected": bool((pv[n:] == 0).all()) and bool((pos[n:] == -1).all())}
        if not (b["pixel_values_match_resize"] and b["padding_as_expected"]):
            errors.items[f"cross-check {name} S={s}"] = "the processor's pixel_values are not the saved resize / 255"
        rarr = resized.permute(1, 2, 0).numpy()
        b["sha256"] = sha256(rarr)
        if b["resized"] and h2 * w2 <= SAVE_RESIZED_MAX_PIXELS:
            b["png"] = f"resized/{name}.s{s}.png"
            save_png(os.path.join(root, b["png"]), rarr)
        if name in PIXEL_VALUE_CASES and s == 70:
            b["pixel_values"] = f"pixels/{name}.s{s}.pixel_values.npy"
            b["positions"] = f"pixels/{name}.s{s}.positions.npy"
            os.makedirs(os.path.join(root, "pixels"), exist_ok=True)
            np.save(os.path.join(root, b["pixel_values"]), pv[:n].numpy().astype(np.float32))
            np.save(os.path.join(root, b["positions"]), pos[:n].numpy().astype(np.int32))
        if b["resized"]:
            direct = F.interpolate(chw[None], size=(h2, w2), mode="bicubic", antialias=True, align_corners=False)[0]
            b["interpolate_equal"] = bool(torch.equal(direct, resized))
            flt = F.interpolate(chw[None].float(), size=(h2, w2), mode="bicubic", antialias=True,
                                align_corners=False)[0].round().clamp(0, 255).to(torch.uint8)
            b["float_path_max_diff"] = int((flt.int() - resized.int()).abs().max())
            if pil_cls is not None:
                def pil_diff():
                    pout = pil_cls(max_soft_tokens=s)(images=[rgb], return_tensors="np")
                    ppv = np.asarray(pout["pixel_values"])[0][:n]
                    return int(np.abs(np.round(ppv * 255) - patches.astype(np.float64)).max())
                b["pil_backend_max_diff"] = errors.run(f"pil backend {name} S={s}", pil_diff)
        case["budgets"].append(b)
    return case


def make_preprocess_set(root, images, errors):
    cases = []
    for name, ext, data in images:
        c = errors.run(f"preprocess {name}", preprocess_case, root, name, ext, data, errors)
        if c is not None:
            cases.append(c)
    return cases


# ------------------------------------------------------------------------------------------------------
# Set B: the tiny model
# ------------------------------------------------------------------------------------------------------
IMAGE_TOKEN, BOI, EOI = 300, 301, 302
MODEL_IMAGES = ("noise_rgb_301x199", "wide_3x900", "rgba_alpha_257x183")  # at 70 soft tokens
VISION_CASE_IMAGES = MODEL_IMAGES + ("aligned_336x432",)
TEXT = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
            sliding_window=16, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
            max_position_embeddings=4096,
            layer_types=["sliding_attention"] * 5 + ["full_attention"])
VISION = dict(model_type="gemma4_vision", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=4, head_dim=12, patch_size=16, pooling_kernel_size=3,
              position_embedding_size=1024, standardize=True, use_clipped_linears=False, rms_norm_eps=1e-6,
              default_output_length=70)
CANVAS = 16
EOS_IDS = [1, 106, 50]
RUNS = [
    dict(name="default", max_denoising_steps=12, t_min=0.4, t_max=0.8, entropy_bound=0.1,
         stability_threshold=1, confidence_threshold=0.005, canvases=3),
    dict(name="converge", max_denoising_steps=16, t_min=0.05, t_max=0.1, entropy_bound=100.0,
         stability_threshold=1, confidence_threshold=1.0, canvases=2),
]


def model_config():
    text = dict(TEXT)
    text.update(model_type="diffusion_gemma_text", hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                 "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                    "rope_theta": 1000000.0}},
                attention_bias=False, attention_dropout=0.0, final_logit_softcapping=30.0,
                use_bidirectional_attention="vision")
    return dict(architectures=["DiffusionGemmaForBlockDiffusion"], model_type="diffusion_gemma",
                canvas_length=CANVAS, tie_word_embeddings=True, boi_token_id=BOI, eoi_token_id=EOI,
                image_token_id=IMAGE_TOKEN, eos_token_id=[1, 106], dtype="bfloat16", text_config=text,
                vision_config=dict(VISION))


def write_model(model_dir, gen):
    import torch
    sys.path.insert(0, HERE)
    import make_fixtures as mf
    from transformers.models.diffusion_gemma.configuration_diffusion_gemma import DiffusionGemmaConfig
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion
    from safetensors.torch import save_file

    top = model_config()
    model = DiffusionGemmaForBlockDiffusion(DiffusionGemmaConfig(**json.loads(json.dumps(top))))
    mf.init_weights(model, gen, {"eos_boost": 1.6, "text": TEXT})
    with torch.no_grad():  # the buffers and tables the initialiser leaves trivial
        vt = model.model.encoder.vision_tower
        vt.std_bias.copy_(0.3 * torch.randn(vt.std_bias.shape, generator=gen))
        vt.std_scale.copy_(0.5 + torch.rand(vt.std_scale.shape, generator=gen))
        vt.patch_embedder.position_embedding_table.mul_(0.5)
    model = model.to(torch.bfloat16).eval()
    os.makedirs(model_dir, exist_ok=True)
    save_file(mf.checkpoint_tensors(model), os.path.join(model_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(top, f, indent=2)
    with open(os.path.join(model_dir, "generation_config.json"), "w") as f:
        json.dump({"max_new_tokens": 256, "max_denoising_steps": 48,
                   "sampler_config": {"entropy_bound": 0.1, "_cls_name": "EntropyBoundSamplerConfig"},
                   "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005,
                   "eos_token_id": EOS_IDS, "pad_token_id": 0, "bos_token_id": 2}, f, indent=2)
    with open(os.path.join(model_dir, "processor_config.json"), "w") as f:
        json.dump({"image_processor": {"image_processor_type": "Gemma4ImageProcessor", "do_convert_rgb": True,
                                       "do_resize": True, "resample": 3, "do_rescale": True,
                                       "rescale_factor": 1 / 255, "do_normalize": False,
                                       "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0],
                                       "patch_size": 16, "pooling_kernel_size": 3, "max_soft_tokens": 70},
                   "processor_class": "Gemma4Processor"}, f, indent=2)


def load_model(model_dir, dtype):
    sys.path.insert(0, HERE)
    import make_fixtures as mf
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion
    m = DiffusionGemmaForBlockDiffusion.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager").eval()
    mf.force_eager(m)
    return m


def np32(t):
    return t.detach().to("cpu", dtype=__import__("torch").float32).numpy()


def vision_goldens(saver, model, dtype_name, images):
    """Per image: the tower's intermediates, unpadded rows only."""
    import torch
    enc = model.model.encoder
    vt = enc.vision_tower
    meta = []
    for name, pv, pos, n_soft in images:
        n = int((pos[0] >= 0).all(-1).sum())
        store = {}
        hooks = [vt.patch_embedder.register_forward_hook(lambda m, a, o: store.__setitem__("patch_embed", o))]
        for i, layer in enumerate(vt.encoder.layers):
            hooks.append(layer.register_forward_hook(
                lambda m, a, o, i=i: store.__setitem__(f"layer{i}", o[0] if isinstance(o, tuple) else o)))
        hooks.append(vt.pooler.register_forward_hook(lambda m, a, o: store.__setitem__("pooler", o)))
        with torch.no_grad():
            feats = enc.get_image_features(pv, pos, return_dict=True)
        for h in hooks:
            h.remove()
        p = f"vision.{dtype_name}.{name}"
        saver.arr(f"{p}.patch_embed", np32(store["patch_embed"][0][:n]))
        for i in range(len(vt.encoder.layers)):
            saver.arr(f"{p}.layer{i}", np32(store[f"layer{i}"][0][:n]))
        pooled, mask = store["pooler"]
        saver.arr(f"{p}.pooler_out", np32(pooled[0][mask[0]]))
        saver.arr(f"{p}.standardized", np32(feats.last_hidden_state.reshape(-1, VISION["hidden_size"])))
        saver.arr(f"{p}.soft_tokens", np32(feats.pooler_output.reshape(-1, TEXT["hidden_size"])))
        meta.append({"name": name, "patches": n, "soft_tokens": n_soft,
                     "pooler_out_dtype": str(pooled.dtype), "standardized_dtype": str(feats.last_hidden_state.dtype)})
    return meta


def build_prompt(gen_np, counts):
    """[bos, text, boi, image x n1, eoi, text, boi, image x n2, eoi, boi, image x n3, eoi, text]: the last
    two images separated only by eoi / boi."""
    def text(k):
        toks = []
        while len(toks) < k:
            t = int(gen_np.integers(3, TEXT["vocab_size"]))
            if t not in (IMAGE_TOKEN, BOI, EOI, 106, 50):
                toks.append(t)
        return toks
    ids = [2] + text(9)
    ids += [BOI] + [IMAGE_TOKEN] * counts[0] + [EOI] + text(5)
    ids += [BOI] + [IMAGE_TOKEN] * counts[1] + [EOI]
    ids += [BOI] + [IMAGE_TOKEN] * counts[2] + [EOI] + text(6)
    return ids


def encoder_goldens(saver, model, prompt, pv, pos, mm, semantics):
    import torch
    from transformers import DynamicCache
    enc = model.model.encoder
    text_cfg = model.config.get_text_config()
    L = prompt.shape[1]
    position_ids = torch.arange(L)[None]
    attn2d = torch.ones(1, L, dtype=torch.long)
    captured = {}
    hook = enc.language_model.register_forward_pre_hook(
        lambda m, a, kw: captured.__setitem__("embeds", kw["inputs_embeds"].detach().clone()), with_kwargs=True)
    cache = DynamicCache(config=text_cfg)
    with torch.no_grad():
        if semantics == "generate":
            dummy = torch.zeros(1, L, text_cfg.hidden_size, dtype=model.dtype)
            masks = enc.create_masks_for_generate(model.config, dummy, attn2d, DynamicCache(config=text_cfg),
                                                  position_ids, mm)
            for kind, m in masks.items():
                if m is None:
                    continue
                m = m[0, 0]
                allowed = m if m.dtype == torch.bool else (m == 0)
                saver.arr(f"mask.{kind}", allowed.numpy().astype(np.uint8))
            out = enc(input_ids=prompt, pixel_values=pv, image_position_ids=pos, attention_mask=masks,
                      past_key_values=cache, position_ids=position_ids, mm_token_type_ids=mm)
        else:  # a plain 2-D mask: the encoder builds the generate masks, discards them, and runs causally
            out = enc(input_ids=prompt, pixel_values=pv, image_position_ids=pos, attention_mask=attn2d,
                      past_key_values=cache, position_ids=position_ids, mm_token_type_ids=mm)
    hook.remove()
    p = f"encoder.{semantics}"
    saver.arr(f"{p}.inputs_embeds", np32(captured["embeds"][0]))
    saver.arr(f"{p}.last_hidden", np32(out.last_hidden_state[0]))
    for i, layer in enumerate(cache.layers):
        saver.arr(f"{p}.kv.layer{i}.k", np32(layer.keys[0]))
        saver.arr(f"{p}.kv.layer{i}.v", np32(layer.values[0]))
    return cache


def decoder_goldens(saver, model, cache, prompt_len, semantics):
    import torch
    V = TEXT["vocab_size"]
    canvas = (torch.arange(CANVAS) * 7 % V)[None]
    dpos = torch.arange(prompt_len, prompt_len + CANVAS)[None]
    with torch.no_grad():
        l0 = model(past_key_values=cache, decoder_input_ids=canvas, decoder_position_ids=dpos).logits[0]
        sc = (l0 / 0.8).to(torch.bfloat16)
        l1 = model(past_key_values=cache, decoder_input_ids=canvas, decoder_position_ids=dpos,
                   self_conditioning_logits=sc[None]).logits[0]
    p = f"decoder.{semantics}"
    saver.arr("canvas_ids", canvas[0].numpy().astype(np.int32))
    saver.arr(f"{p}.logits_no_sc", np32(l0))
    saver.arr(f"{p}.logits_sc", np32(l1))
    saver.arr(f"{p}.sc_input", np32(sc))


def generate_runs(saver, model, prompt, pv, pos, mm):
    import torch
    sys.path.insert(0, HERE)
    import make_fixtures as mf
    from transformers.models.diffusion_gemma import generation_diffusion_gemma as gen_mod
    V = TEXT["vocab_size"]
    metas = []
    for k, run in enumerate(RUNS):
        seed = 4000 + 7919 * k
        kwargs = dict(max_new_tokens=run["canvases"] * CANVAS, max_denoising_steps=run["max_denoising_steps"],
                      t_min=run["t_min"], t_max=run["t_max"],
                      sampler_config=gen_mod.EntropyBoundSamplerConfig(entropy_bound=float(run["entropy_bound"])),
                      stability_threshold=run["stability_threshold"],
                      confidence_threshold=float(run["confidence_threshold"]),
                      eos_token_id=EOS_IDS, pad_token_id=0, pixel_values=pv, image_position_ids=pos,
                      mm_token_type_ids=mm)
        with torch.no_grad(), mf.NoiseInjector(model, seed, V, CANVAS, run["max_denoising_steps"]) as inj:
            out = model.generate(prompt.clone(), **kwargs)
        seq = out.sequences if hasattr(out, "sequences") else out
        tokens = seq[0, prompt.shape[1]:].cpu().numpy()
        eos_canvas = None
        for c in range(len(inj.trace)):
            if any(int(t) in EOS_IDS for t in tokens[c * CANVAS:(c + 1) * CANVAS]):
                eos_canvas = c
                break
        res = {"seed": seed, "trace": inj.trace, "tokens": tokens, "eos_canvas": eos_canvas, "init_canvas": None}
        metas.append(mf.save_run(saver, run, res, CANVAS))
    return metas


def make_model_set(root, images, errors):
    import torch
    sys.path.insert(0, HERE)
    import make_fixtures as mf
    torch.manual_seed(0)
    model_dir = os.path.join(root, "model")
    gen = torch.Generator().manual_seed(4321)
    if errors.run("write tiny model", write_model, model_dir, gen) is None and "write tiny model" in errors.items:
        return {}
    saver = mf.Saver(os.path.join(root, "golden"))
    data = {name: d for name, _, d in images}
    from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor
    proc = Gemma4ImageProcessor(max_soft_tokens=70)
    per_image = []
    for name in VISION_CASE_IMAGES:
        _, rgb = server_decode(data[name])
        out = proc(images=[rgb], return_tensors="pt")
        per_image.append((name, out["pixel_values"], out["image_position_ids"], int(out["num_soft_tokens_per_image"][0])))
    meta = {"model_dir": "model", "image_token_id": IMAGE_TOKEN, "boi_token_id": BOI, "eoi_token_id": EOI,
            "max_soft_tokens": 70, "canvas_length": CANVAS, "eos_token_ids": EOS_IDS, "vision": {}}
    for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        m = errors.run(f"load model {dtype_name}", load_model, model_dir, dtype)
        if m is not None:
            meta["vision"][dtype_name] = errors.run(f"vision goldens {dtype_name}", vision_goldens, saver, m,
                                                    dtype_name, per_image)
    model = errors.run("load model bfloat16 (prompt)", load_model, model_dir, torch.bfloat16)
    if model is not None:
        rgbs = [server_decode(data[n])[1] for n in MODEL_IMAGES]
        batch = proc(images=rgbs, return_tensors="pt")
        counts = [int(c) for c in batch["num_soft_tokens_per_image"]]
        ids = build_prompt(np.random.default_rng(99), counts)
        prompt = torch.tensor([ids])
        mm = (prompt == IMAGE_TOKEN).long()
        pv, pos = batch["pixel_values"], batch["image_position_ids"]  # float32, as the processor returns them
        saver.arr("prompt_ids", np.array(ids, np.int32))
        saver.arr("mm_token_type_ids", mm[0].numpy().astype(np.int32))
        meta.update(prompt_images=list(MODEL_IMAGES), prompt_soft_tokens=counts, prompt_len=len(ids))
        for semantics in ("generate", "causal"):
            cache = errors.run(f"encoder {semantics}", encoder_goldens, saver, model, prompt, pv, pos, mm, semantics)
            if cache is not None:
                errors.run(f"decoder {semantics}", decoder_goldens, saver, model, cache, len(ids), semantics)
        meta["runs"] = errors.run("generate runs", generate_runs, saver, model, prompt, pv, pos, mm)
    saver.finish({})
    meta["arrays"] = saver.manifest["arrays"]
    os.remove(os.path.join(root, "golden", "manifest.json"))  # everything is described in the top manifest
    return meta


# ------------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/image_fixtures", help="staging directory (its image/ is rewritten)")
    ap.add_argument("--tar", default=None, help="write image/ as this tar file")
    ap.add_argument("--images-only", action="store_true", help="only the encoded test images (no torch)")
    args = ap.parse_args()

    root = os.path.join(args.out, "image")
    if os.path.exists(root):
        shutil.rmtree(root)
    os.makedirs(os.path.join(root, "inputs"))
    images = make_images()
    for name, ext, data in images:
        with open(os.path.join(root, "inputs", f"{name}.{ext}"), "wb") as f:
            f.write(data)
    manifest = {"inputs": [f"inputs/{n}.{e}" for n, e, _ in images]}
    errors = Errors()
    if not args.images_only:
        import torch
        import torchvision
        import transformers
        import PIL
        torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
        manifest["generator"] = {"transformers": transformers.__version__, "torch": torch.__version__,
                                 "torchvision": torchvision.__version__, "pillow": PIL.__version__,
                                 "numpy": np.__version__, "device": "cpu",
                                 "cpu_capability": torch.backends.cpu.get_cpu_capability()}
        manifest["preprocess"] = make_preprocess_set(root, images, errors)
        manifest["model"] = errors.run("model set", make_model_set, root, images, errors) or {}
    manifest["errors"] = errors.items
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    if args.tar:
        os.makedirs(os.path.dirname(os.path.abspath(args.tar)), exist_ok=True)
        with tarfile.open(args.tar, "w") as t:
            t.add(root, arcname="image")
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    print(f"wrote {root} ({total / 1e6:.1f} MB){' and ' + args.tar if args.tar else ''}; "
          f"{len(errors.items)} section(s) failed")
    return 1 if errors.items else 0


if __name__ == "__main__":
    sys.exit(main())
