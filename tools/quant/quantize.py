#!/usr/bin/env python3
"""Writes a quantised copy of a bf16 DiffusionGemma checkpoint in one of the three on-disk formats of
the published quantised checkpoints (docs/QUANTIZATION.md), tensor by tensor as they are stored:

  nvfp4-modelopt  NVIDIA ModelOpt NVFP4: routed experts only. Per expert projection
                  <m>.weight U8 [N, K/2], <m>.weight_scale F8_E4M3 [N, K/16], <m>.weight_scale_2 F32 [],
                  <m>.input_scale F32 []; config.json quantization_config (quant_method modelopt) and
                  hf_quant_config.json with the 7 exclude patterns.
  nvfp4-ct        compressed-tensors nvfp4-pack-quantized: experts and the dense MLP. <m>.weight_packed U8
                  [N, K/2], <m>.weight_scale F8_E4M3 [N, K/16], <m>.weight_global_scale F32 [1] (the
                  reciprocal of ModelOpt's), <m>.input_global_scale F32 [].
  fp8-dynamic     compressed-tensors float-quantized FP8: experts, attention q/k/v/o and the dense MLP.
                  <m>.weight F8_E4M3 [N, K], <m>.weight_scale BF16 [N, 1]; activations dynamic per token.

The fused bf16 experts (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]) become per-expert
modules experts.E.{gate_proj, up_proj, down_proj} (gate = rows [0, I), up = rows [I, 2I)).

Scale rules (as the exporters compute them):
  ModelOpt: weight_scale_2 = amax / (6 * 448); block scale = block_amax / (6 * weight_scale_2), clamped
            to [2^-9, 448], all-zero block -> 1, cast to E4M3; q = E2M1(W / (block * weight_scale_2)).
  CT NVFP4: weight_global_scale = 6 * 448 / amax; block scale = global * block_amax / 6 (same clamps);
            q = E2M1(W / (block / global)).
  FP8:      weight_scale = row_amax / 448 (stored bf16); q = E4M3(clamp(W / scale, +-448)).
--pow2-scales rounds every global / channel scale to a power of two (ModelOpt and FP8 scales up,
the CT global down) so that the dequantised weights are exactly bf16 values: the loader tests then
compare the quantised path with the bf16 path bit for bit. The W4A4 input scales are not calibrated
(no activations are run here; an activation amax of 8 is assumed): W4A16 never reads them.

--dequant-out DIR also writes the dequantised model (fp32 dequantisation rounded to bf16, the
released checkpoint's naming and fused experts, no quantization_config): the reference model of the
quantised checkpoint (tools/quant/golden_quant.py runs transformers on it).

Usage:  python3 tools/quant/quantize.py SRC_MODEL_DIR OUT_MODEL_DIR --format nvfp4-modelopt
            [--pow2-scales] [--dequant-out DIR]
"""
import argparse
import copy
import json
import os
import re
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qformats import (Tensor, e4m3_to_f32, f32_to_bf16, f32_to_e2m1, f32_to_e4m3, pack_e2m1,  # noqa: E402
                      read_safetensors, unpack_e2m1, write_safetensors, E2M1_VALUES)

FORMATS = ("nvfp4-modelopt", "nvfp4-ct", "fp8-dynamic")
ACT_AMAX_ASSUMED = np.float32(8.0)
MODELOPT_EXCLUDE = ["lm_head", "*embed_vision*", "*mlp*", "*router*", "*self_attn*", "*self_conditioning*",
                    "*vision_tower*"]


def pow2_ceil(x):
    return np.float32(2.0 ** np.ceil(np.log2(np.float64(x))))


def pow2_floor(x):
    return np.float32(2.0 ** np.floor(np.log2(np.float64(x))))


# ---------------------------------------------------------------------------------------------
# Quantisers: W fp32 [N, K] -> tensors (suffix -> Tensor), and the exact fp32 dequantisation
# ---------------------------------------------------------------------------------------------


def _block_scales(block_amax, denom):
    bs = (block_amax / denom).astype(np.float32)
    bs = np.clip(bs, np.float32(2.0 ** -9), np.float32(448.0))
    bs = np.where(block_amax == 0, np.float32(1.0), bs)
    return f32_to_e4m3(bs)


def quant_nvfp4_modelopt(w, pow2):
    N, K = w.shape
    amax = np.float32(np.abs(w).max())
    ws2 = np.float32(amax / np.float32(6 * 448)) if amax > 0 else np.float32(1.0)
    if pow2:
        ws2 = pow2_ceil(ws2)
    block_amax = np.abs(w).reshape(N, K // 16, 16).max(-1).astype(np.float32)
    bs = _block_scales(block_amax, np.float32(6) * ws2)
    eff = (e4m3_to_f32(bs) * ws2).astype(np.float32)  # per-block scale, as NVFP4QTensor forms it
    q = f32_to_e2m1(w.reshape(N, K // 16, 16) / eff[..., None]).reshape(N, K)
    return {
        "weight": Tensor("U8", pack_e2m1(q)),
        "weight_scale": Tensor("F8_E4M3", bs),
        "weight_scale_2": Tensor("F32", np.array(ws2, dtype=np.float32).reshape(())),
        "input_scale": Tensor("F32", np.array(ACT_AMAX_ASSUMED / np.float32(6 * 448), dtype=np.float32).reshape(())),
    }


def quant_nvfp4_ct(w, pow2):
    N, K = w.shape
    amax = np.float32(np.abs(w).max())
    gs = np.float32(np.float32(6 * 448) / amax) if amax > 0 else np.float32(1.0)
    if pow2:
        gs = pow2_floor(gs)
    block_amax = np.abs(w).reshape(N, K // 16, 16).max(-1).astype(np.float32)
    bs = _block_scales(gs * block_amax, np.float32(6))
    eff = (e4m3_to_f32(bs) / gs).astype(np.float32)
    q = f32_to_e2m1(w.reshape(N, K // 16, 16) / eff[..., None]).reshape(N, K)
    return {
        "weight_packed": Tensor("U8", pack_e2m1(q)),
        "weight_scale": Tensor("F8_E4M3", bs),
        "weight_global_scale": Tensor("F32", np.array([gs], dtype=np.float32)),
        "input_global_scale": Tensor("F32", np.array(np.float32(6 * 448) / ACT_AMAX_ASSUMED, dtype=np.float32).reshape(())),
    }


def quant_fp8(w, pow2):
    row_amax = np.abs(w).max(-1).astype(np.float32)
    s = (row_amax / np.float32(448)).astype(np.float32)
    s = np.where(row_amax == 0, np.float32(1.0), s)
    if pow2:
        s = np.array([pow2_ceil(v) for v in s], dtype=np.float32)
    s_bits = f32_to_bf16(s)  # stored as BF16; quantise against the stored value
    s_b = (s_bits.astype(np.uint32) << 16).view(np.float32)
    q = f32_to_e4m3(np.clip(w / s_b[:, None], -448, 448))
    return {"weight": Tensor("F8_E4M3", q), "weight_scale": Tensor("BF16", s_bits.reshape(-1, 1))}


QUANTISERS = {"nvfp4-modelopt": quant_nvfp4_modelopt, "nvfp4-ct": quant_nvfp4_ct, "fp8-dynamic": quant_fp8}


def dequantize(fmt, t):
    """Exact fp32 dequantisation of one module's tensors (value * block, then * the row's scale)."""
    if fmt == "fp8-dynamic":
        return (e4m3_to_f32(t["weight"].array) * t["weight_scale"].f32().reshape(-1, 1)).astype(np.float32)
    packed = t["weight"].array if fmt == "nvfp4-modelopt" else t["weight_packed"].array
    vals = E2M1_VALUES[unpack_e2m1(packed)]
    N, K = vals.shape
    blk = e4m3_to_f32(t["weight_scale"].array)
    vb = (vals.reshape(N, K // 16, 16) * blk[..., None]).reshape(N, K).astype(np.float32)
    if fmt == "nvfp4-modelopt":
        g = np.float32(t["weight_scale_2"].array.reshape(()))
    else:
        g = np.float32(np.float32(1.0) / np.float32(t["weight_global_scale"].array.reshape(-1)[0]))
    return (vb * g).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Which modules each format quantises, and its config
# ---------------------------------------------------------------------------------------------

LAYER_RE = re.compile(r"^model\.decoder\.layers\.(\d+)\.(.*)$")


def quantised_module(fmt, name):
    """For a bf16 tensor name, the module kind this format quantises ('experts', 'attn', 'mlp') or None."""
    m = LAYER_RE.match(name)
    if not m:
        return None
    rest = m.group(2)
    if rest in ("experts.gate_up_proj", "experts.down_proj"):
        return "experts"
    if re.fullmatch(r"self_attn\.[qkvo]_proj\.weight", rest):
        return "attn" if fmt == "fp8-dynamic" else None
    if re.fullmatch(r"mlp\.(gate|up|down)_proj\.weight", rest):
        return "mlp" if fmt in ("fp8-dynamic", "nvfp4-ct") else None
    return None


def linear_modules(tensors):
    """Module names of every 2-D '.weight' / '.linear.weight' the checkpoint has (ignore-list material)."""
    return sorted(n[: -len(".weight")] for n, t in tensors.items() if n.endswith(".weight") and t.array.ndim == 2)


def explicit_ignore(fmt, tensors, n_layers):
    """compressed-tensors' style: every linear left in bf16, by name (routers of both stacks, the
    vision tower, embed_vision, self-conditioning, lm_head; for NVFP4 also attention)."""
    out = []
    for i in range(n_layers):
        out.append(f"model.encoder.language_model.layers.{i}.router.proj")
        out.append(f"model.decoder.layers.{i}.router.proj")
    for m in linear_modules(tensors):
        if m.startswith("model.encoder.vision_tower.") or m.startswith("model.encoder.embed_vision."):
            out.append(m)
    out += [f"model.decoder.self_conditioning.{p}_proj" for p in ("gate", "up", "down")]
    if fmt == "nvfp4-ct":
        for m in linear_modules(tensors):
            if ".self_attn." in m and m.startswith("model.decoder.layers."):
                out.append(m)
    out.append("lm_head")
    return out


def quant_config(fmt, tensors, n_layers):
    if fmt == "nvfp4-modelopt":
        producer = {"name": "modelopt", "version": "dgemma-tools-quantize"}
        qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "producer": producer, "ignore": MODELOPT_EXCLUDE,
              "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False},
              "config_groups": {"group_0": {
                  "weights": {"num_bits": 4, "type": "float", "group_size": 16, "dynamic": False},
                  "input_activations": {"num_bits": 4, "type": "float", "group_size": 16, "dynamic": False},
                  "targets": ["Linear"]}}}
        hf = {"producer": producer, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                                                     "group_size": 16, "exclude_modules": MODELOPT_EXCLUDE}}
        return qc, hf
    if fmt == "fp8-dynamic":
        group = {"targets": ["Linear"], "format": "float-quantized",
                 "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
                             "dynamic": False, "group_size": None, "block_structure": None,
                             "observer": "memoryless_minmax", "scale_dtype": None},
                 "input_activations": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
                                       "dynamic": True, "observer": None},
                 "output_activations": None}
        fmt_name = "float-quantized"
    else:
        group = {"targets": ["Linear"], "format": "nvfp4-pack-quantized",
                 "weights": {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group",
                             "group_size": 16, "dynamic": False, "observer": "static_minmax"},
                 "input_activations": {"num_bits": 4, "type": "float", "symmetric": True,
                                       "strategy": "tensor_group", "group_size": 16, "dynamic": "local",
                                       "observer": "static_minmax"},
                 "output_activations": None}
        fmt_name = "nvfp4-pack-quantized"
    qc = {"quant_method": "compressed-tensors", "format": fmt_name, "quantization_status": "compressed",
          "version": "dgemma-tools-quantize", "kv_cache_scheme": None, "sparsity_config": {},
          "transform_config": {}, "config_groups": {"group_0": group},
          "ignore": explicit_ignore(fmt, tensors, n_layers)}
    return qc, None


# ---------------------------------------------------------------------------------------------


def quantise_checkpoint(src_dir, fmt, pow2):
    tensors, _ = read_safetensors(os.path.join(src_dir, "model.safetensors"))
    with open(os.path.join(src_dir, "config.json")) as f:
        config = json.load(f)
    out = {}
    deq = {}  # the dequantised model (bf16 names of the source)
    for name, t in tensors.items():
        kind = quantised_module(fmt, name)
        if kind is None:
            out[name] = t
            deq[name] = t
            continue
        w = t.f32()
        if kind == "experts":
            base = name.rsplit(".", 1)[0]  # model.decoder.layers.L.experts
            E = w.shape[0]
            parts = []
            for e in range(E):
                if name.endswith("gate_up_proj"):
                    I = w.shape[1] // 2
                    mods = [("gate_proj", w[e, :I]), ("up_proj", w[e, I:])]
                else:
                    mods = [("down_proj", w[e])]
                rows = []
                for proj, we in mods:
                    q = QUANTISERS[fmt](np.ascontiguousarray(we), pow2)
                    for suffix, qt in q.items():
                        out[f"{base}.{e}.{proj}.{suffix}"] = qt
                    rows.append(dequantize(fmt, q))
                parts.append(np.concatenate(rows, 0))
            deq[name] = Tensor("BF16", f32_to_bf16(np.stack(parts)))
        else:
            module = name[: -len(".weight")]
            q = QUANTISERS[fmt](w, pow2)
            for suffix, qt in q.items():
                out[f"{module}.{suffix}"] = qt
            deq[name] = Tensor("BF16", f32_to_bf16(dequantize(fmt, q)))
    n_layers = config["text_config"]["num_hidden_layers"]
    qc, hf = quant_config(fmt, tensors, n_layers)
    qconfig = copy.deepcopy(config)
    qconfig["quantization_config"] = qc
    return out, qconfig, hf, deq, config


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--format", required=True, choices=FORMATS)
    ap.add_argument("--pow2-scales", action="store_true")
    ap.add_argument("--dequant-out")
    a = ap.parse_args()
    out, qconfig, hf, deq, config = quantise_checkpoint(a.src, a.format, a.pow2_scales)
    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "model.safetensors"), out)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(qconfig, f, indent=2)
    if hf is not None:
        with open(os.path.join(a.out, "hf_quant_config.json"), "w") as f:
            json.dump(hf, f, indent=2)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(a.src, extra)):
            shutil.copy(os.path.join(a.src, extra), os.path.join(a.out, extra))
    if a.dequant_out:
        os.makedirs(a.dequant_out, exist_ok=True)
        write_safetensors(os.path.join(a.dequant_out, "model.safetensors"), deq)
        with open(os.path.join(a.dequant_out, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        if os.path.exists(os.path.join(a.src, "generation_config.json")):
            shutil.copy(os.path.join(a.src, "generation_config.json"), os.path.join(a.dequant_out, "generation_config.json"))
    counts = {}
    for t in out.values():
        counts[t.dtype] = counts.get(t.dtype, 0) + 1
    print(f"{a.out}: {a.format}{' (pow2 scales)' if a.pow2_scales else ''}: {len(out)} tensors {counts}")


if __name__ == "__main__":
    main()
