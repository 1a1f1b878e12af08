#!/usr/bin/env python3
"""Golden outputs of the quantised fixtures (tests/fixtures/quant/*), from the reference (HF
transformers `diffusion_gemma`) run on the *dequantised* weights — the reference model of a quantised
checkpoint. Run on the GPU machine, from the repo root:

    python3 tools/quant/golden_quant.py            # every fixture under tests/fixtures/quant
    python3 tools/quant/golden_quant.py --only tiny_a_fp8_dynamic

For each fixture <F> (with <F>/model the quantised checkpoint) it
  1. dequantises every quantised module exactly as tools/quant/quantize.py defines it (fp32:
     value * block scale, then * the row's global / channel scale) and writes <F>/golden/dequant_model
     (bf16, the released checkpoint's naming, fused experts): the model transformers loads;
  2. loads it with DiffusionGemmaForBlockDiffusion (bf16, eager attention and experts) and writes,
     with tiny_a's prompt and canvas, the same forward goldens as tools/golden/make_fixtures.py:
     encoder K/V per layer, decoder logits without / with self-conditioning, argmax, and the
     intermediates of layer 2, plus manifest.json;
  3. computes every quantised linear and expert projection as the checkpoint prescribes, not with
     the bf16-rounded weights of step 1 (rounding a non-power-of-two scale's products to bf16 moves
     each weight by up to 2^-9 and the compounded difference exceeds the bf16 bounds of the test):
     torch.nn.functional.linear is intercepted by weight identity and
       NVFP4 (W4A16):       y = bf16(x . W^T in fp32), W the exact fp32 dequantised weights;
       FP8-dynamic (W8A8):  s_t = max(amax_t / 448, 1/(448*512)), x_q = e4m3(clamp(x / s_t, +-448)),
                            y = bf16((x_q . q^T in fp32) * s_t * channel_scale), q the stored E4M3 weights.
     The script fails loudly if a quantised weight is never seen (e.g. if the experts stop calling
     F.linear).
The dequant_model directory is an input of the golden only; delete it before committing (the test
reads <F>/golden/*.npy and manifest.json). Expected run time: well under a minute per fixture.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "golden"))
from qformats import Tensor, e4m3_to_f32, f32_to_bf16, read_safetensors, write_safetensors  # noqa: E402
from quantize import dequantize  # noqa: E402


def detect_format(qc):
    if qc.get("quant_method") == "modelopt":
        return "nvfp4-modelopt"
    if qc.get("format") == "nvfp4-pack-quantized":
        return "nvfp4-ct"
    if qc.get("format") == "float-quantized":
        return "fp8-dynamic"
    raise SystemExit(f"unknown quantization_config {qc}")


def dequantised_checkpoint(model_dir):
    """(bf16 tensors in the released naming, config without quantization_config, format,
    {bf16 name: exact maths [a list per expert for fused experts]}): for FP8 (codes, channel scales),
    for NVFP4 the exact fp32 dequantised weight [N, K]."""
    tensors, _ = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    fmt = detect_format(config.pop("quantization_config"))
    suffixes = (".weight", ".weight_packed", ".weight_scale", ".weight_scale_2", ".weight_global_scale",
                ".input_scale", ".input_global_scale")
    modules = {}
    plain = {}
    for name, t in tensors.items():
        for s in suffixes:
            if name.endswith(s):
                base = name[: -len(s)]
                if (base + ".weight_scale") in tensors:
                    modules.setdefault(base, {})[s[1:]] = t
                    break
        else:
            plain[name] = t
    out = dict(plain)
    exact = {}
    experts = {}
    for base, parts in modules.items():
        w = dequantize(fmt, parts)
        maths = (parts["weight"].array, parts["weight_scale"].f32().reshape(-1)) if fmt == "fp8-dynamic" else w
        if ".experts." in base:
            stack, e, proj = base.rsplit(".", 2)
            experts.setdefault(stack, {})[(int(e), proj)] = (w, maths)
        else:
            out[base + ".weight"] = Tensor("BF16", f32_to_bf16(w))
            exact[base + ".weight"] = maths
    for stack, d in experts.items():
        E = 1 + max(e for e, _ in d)
        gu = np.stack([np.concatenate([d[(e, "gate_proj")][0], d[(e, "up_proj")][0]]) for e in range(E)])
        dn = np.stack([d[(e, "down_proj")][0] for e in range(E)])
        out[stack + ".gate_up_proj"] = Tensor("BF16", f32_to_bf16(gu))
        out[stack + ".down_proj"] = Tensor("BF16", f32_to_bf16(dn))
        if fmt == "fp8-dynamic":  # gate rows, then up rows, as the fused tensor
            exact[stack + ".gate_up_proj"] = [
                (np.concatenate([d[(e, "gate_proj")][1][0], d[(e, "up_proj")][1][0]]),
                 np.concatenate([d[(e, "gate_proj")][1][1], d[(e, "up_proj")][1][1]])) for e in range(E)]
        else:
            exact[stack + ".gate_up_proj"] = [np.concatenate([d[(e, "gate_proj")][1], d[(e, "up_proj")][1]])
                                              for e in range(E)]
        exact[stack + ".down_proj"] = [d[(e, "down_proj")][1] for e in range(E)]
    return out, config, fmt, exact


class QuantLinear:
    """Intercepts torch.nn.functional.linear for the quantised weights (matched by storage address:
    nn.Linear passes its parameter, the eager experts pass self.gate_up_proj[e] views) and computes
    them as the checkpoint prescribes (module docstring, step 3)."""

    def __init__(self, torch, model, exact, fp8):
        self.torch = torch
        self.fp8 = fp8
        self.by_ptr = {}
        self.seen = {}
        params = dict(model.named_parameters(remove_duplicate=False))
        for name, maths in exact.items():
            p = params.get(name)
            if p is None:
                raise SystemExit(f"golden_quant: no parameter {name} in the reference model")
            per = maths if isinstance(maths, list) else [maths]
            stride = p[0].numel() * p.element_size() if isinstance(maths, list) else 0
            for e, m in enumerate(per):
                if fp8:
                    q, s = m
                    w32 = torch.from_numpy(e4m3_to_f32(q).reshape(q.shape)).to(p.device)
                    sf = torch.from_numpy(np.ascontiguousarray(s, dtype=np.float32)).to(p.device)
                else:
                    w32 = torch.from_numpy(np.ascontiguousarray(m, dtype=np.float32)).to(p.device)
                    sf = None
                key = p.data_ptr() + e * stride
                self.by_ptr[key] = (f"{name}[{e}]" if isinstance(maths, list) else name, w32, sf)
        self.orig = torch.nn.functional.linear

    def __enter__(self):
        torch = self.torch
        F = torch.nn.functional

        def linear(x, w, b=None):
            hit = self.by_ptr.get(w.data_ptr())
            if hit is None or w.dim() != 2 or tuple(w.shape) != tuple(hit[1].shape):
                return self.orig(x, w, b)
            name, w32, sf = hit
            self.seen[name] = self.seen.get(name, 0) + 1
            x32 = x.float()
            if self.fp8:
                s = (x32.abs().amax(-1, keepdim=True) / 448.0).clamp(min=1.0 / (448.0 * 512.0))
                xq = (x32 / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()
                y = (torch.matmul(xq, w32.t()) * s) * sf
            else:
                y = torch.matmul(x32, w32.t())
            if b is not None:
                y = y + b.float()
            return y.to(x.dtype)

        F.linear = linear
        torch.nn.modules.linear.F.linear = linear
        return self

    def __exit__(self, *exc):
        self.torch.nn.functional.linear = self.orig
        self.torch.nn.modules.linear.F.linear = self.orig

    def check(self):
        """Every quantised dense weight was computed by the interceptor, and each expert stack at least
        once (an expert no token routed to is never called)."""
        names = set(n for n, _, _ in self.by_ptr.values())
        dense = sorted(n for n in names if "[" not in n and n not in self.seen)
        stacks = set(n.split("[")[0] for n in names if "[" in n)
        unseen = sorted(st for st in stacks if not any(n.startswith(st + "[") for n in self.seen))
        if dense or unseen:
            raise SystemExit(f"golden_quant: the quantised-linear emulation never saw {(dense + unseen)[:4]} — the "
                             "reference no longer calls F.linear there; adapt QuantLinear")


def make_golden(fx_dir, tiny_golden):
    import torch
    import transformers
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion
    from transformers import DynamicCache
    import make_fixtures as mf

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    golden_dir = os.path.join(fx_dir, "golden")
    if os.path.exists(golden_dir):
        shutil.rmtree(golden_dir)
    deq_dir = os.path.join(golden_dir, "dequant_model")
    os.makedirs(deq_dir)
    tensors, config, fmt, exact = dequantised_checkpoint(os.path.join(fx_dir, "model"))
    write_safetensors(os.path.join(deq_dir, "model.safetensors"), tensors)
    with open(os.path.join(deq_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    model = DiffusionGemmaForBlockDiffusion.from_pretrained(deq_dir, dtype=torch.bfloat16,
                                                            attn_implementation="eager").to(device).eval()
    mf.force_eager(model)

    saver = mf.Saver(golden_dir)
    prompt_np = np.load(os.path.join(tiny_golden, "prompt_ids.npy")).astype(np.int64)
    canvas_np = np.load(os.path.join(tiny_golden, "canvas_ids.npy")).astype(np.int64)
    saver.arr("prompt_ids", prompt_np, np.int32)
    saver.arr("canvas_ids", canvas_np, np.int32)
    prompt = torch.from_numpy(prompt_np).unsqueeze(0).to(device)
    canvas = torch.from_numpy(canvas_np).unsqueeze(0).to(device)
    P, C = prompt.shape[1], canvas.shape[1]
    li = 2
    emu = QuantLinear(torch, model, exact, fmt == "fp8-dynamic")
    emu.__enter__()
    try:
        with torch.no_grad():
            cache = DynamicCache(config=model.config.get_text_config(decoder=True))
            pos = torch.arange(P, dtype=torch.int32, device=device).unsqueeze(0)
            model.model.encoder(input_ids=prompt, past_key_values=cache, position_ids=pos)
            for i, layer in enumerate(cache.layers):
                saver.arr(f"kv.layer{i}.k", mf.np32(layer.keys[0]))
                saver.arr(f"kv.layer{i}.v", mf.np32(layer.values[0]))
            dpos = torch.arange(P, P + C, dtype=torch.int32, device=device).unsqueeze(0)
            store, handles = mf.capture_layer_intermediates(model.model.decoder.layers[li], f"layer{li}")
            out0 = model(past_key_values=cache, decoder_input_ids=canvas, decoder_position_ids=dpos)
            for h in handles:
                h.remove()
            logits0 = out0.logits[0]
            sc = (logits0 / 0.8).to(torch.bfloat16)
            out1 = model(past_key_values=cache, decoder_input_ids=canvas, decoder_position_ids=dpos,
                         self_conditioning_logits=sc.unsqueeze(0))
            logits1 = out1.logits[0]
        emu.check()
    finally:
        emu.__exit__()
    keep = C
    saver.arr("decoder.logits_no_sc", mf.np32(logits0[:keep]))
    saver.arr("decoder.logits_sc", mf.np32(logits1[:keep]))
    saver.arr("decoder.sc_input", mf.np32(sc[:keep]))
    saver.arr("decoder.argmax_no_sc", logits0.argmax(-1).cpu().numpy(), np.int32)
    saver.arr("decoder.argmax_sc", logits1.argmax(-1).cpu().numpy(), np.int32)
    inter = []
    for k, v in store.items():
        a = v[0] if v.dim() >= 2 and v.shape[0] == 1 else v
        saver.arr(f"inter.{k}", a.cpu().numpy() if k.endswith("router_index") else mf.np32(a),
                  np.int32 if k.endswith("router_index") else None)
        inter.append(k)
    saver.finish({
        "fixture": os.path.basename(fx_dir), "quant_format": fmt,
        "reference": "transformers on the dequantised weights (bf16); quantised linears with the exact "
                     + ("E4M3 weights and the per-token FP8 activation quantisation (W8A8-dynamic)"
                        if fmt == "fp8-dynamic" else "fp32 dequantised weights (W4A16)"),
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "dtype": "bfloat16", "attn_implementation": "eager", "experts_implementation": "eager",
        "prompt_len": P, "canvas_length": C, "vocab_size": int(logits0.shape[-1]), "logits_rows_kept": keep,
        "layer_for_intermediates": li, "intermediates": sorted(inter), "runs": [],
    })
    shutil.rmtree(deq_dir)
    print(f"{fx_dir}: {fmt}: wrote {golden_dir}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(ROOT, "tests", "fixtures", "quant"))
    ap.add_argument("--tiny-golden", default=os.path.join(ROOT, "tests", "fixtures", "tiny_a", "golden"))
    ap.add_argument("--only")
    ap.add_argument("--dequant-only", action="store_true",
                    help="write <F>/golden/dequant_model only (no torch; checks the dequantisation here)")
    a = ap.parse_args()
    for name in sorted(os.listdir(a.root)):
        fx = os.path.join(a.root, name)
        if a.only and name != a.only or not os.path.isdir(os.path.join(fx, "model")):
            continue
        if a.dequant_only:
            out = os.path.join(fx, "golden", "dequant_model")
            os.makedirs(out, exist_ok=True)
            tensors, config, fmt, _ = dequantised_checkpoint(os.path.join(fx, "model"))
            write_safetensors(os.path.join(out, "model.safetensors"), tensors)
            with open(os.path.join(out, "config.json"), "w") as f:
                json.dump(config, f, indent=2)
            print(f"{fx}: {fmt}: wrote {out}")
        else:
            make_golden(fx, a.tiny_golden)


if __name__ == "__main__":
    main()
