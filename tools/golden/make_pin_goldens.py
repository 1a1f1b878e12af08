#!/usr/bin/env python3
"""Golden data for pinned spans (docs/MODEL.md §6.6), made by the reference implementation (HF
transformers `diffusion_gemma`) from the existing fixture model directories (tests/fixtures/NAME/model,
made by make_fixtures.py); nothing there is rewritten. Writes tests/fixtures/NAME/golden_pins/.

The reference has no pins, but two of its operations are exactly what a pinned canvas does:
  A. the decoder forward of a canvas that holds the pinned tokens (decoder_input_ids), and the forward
     of a later step whose self-conditioning rows of the pinned positions are one-hot: logits of 0 at
     the pinned token and -inf elsewhere give softmax rows of exactly 1 and 0 (what dgemma feeds). The
     signal of the other rows (and of the comparison forward logits1_softmax_sc) is the bf16 logits of
     the unpinned initial canvas / 0.8, whose pinned rows favour other tokens.
  B. generate() from that initial canvas (decoder_input_ids) with the project's counter-based noise
     injected (make_fixtures.NoiseInjector): its step 0 is dgemma's step 0 of the pinned request (the
     same forward, no self-conditioning yet) — entropies, argmax and sample at every position.
The acceptance of that step under dgemma's pinned rule (free positions only) is computed here too, by
an independent implementation of the documented rule, on the reference's entropies.

Usage (GPU machine, from the repo root; a few seconds per fixture):
  python3 tools/golden/make_pin_goldens.py --fixtures tests/fixtures
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dgemma_rng as rng  # noqa: E402
import make_fixtures as mf  # noqa: E402  (NoiseInjector, force_eager, Saver, np32)

from transformers import DynamicCache  # noqa: E402
from transformers.models.diffusion_gemma import generation_diffusion_gemma as gen_mod  # noqa: E402
from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# Pinned spans per fixture (answer positions; the last span of each crosses into the second canvas).
CASES = {
    "tiny_a": dict(seed=4242, pins=[(4, [11, 12, 13]), (13, [21, 22, 23, 24, 25])], max_tokens=24,
                   max_denoising_steps=8, t_min=0.4, t_max=0.8, entropy_bound=0.1, stability_threshold=1,
                   confidence_threshold=0.005),
    "tiny_b": dict(seed=777, pins=[(5, list(range(101, 109))), (20, [300, 301]), (250, list(range(7, 15)))],
                   max_tokens=300, max_denoising_steps=6, t_min=0.4, t_max=0.8, entropy_bound=0.5,
                   stability_threshold=1, confidence_threshold=0.005),
}
EOS_IDS = mf.EOS_IDS


def canvas_mask(pins, C):
    """Pin mask and tokens of canvas 0."""
    mask = np.zeros(C, np.uint8)
    toks = np.zeros(C, np.int64)
    for off, ids in pins:
        for i, t in enumerate(ids):
            if off + i < C:
                mask[off + i] = 1
                toks[off + i] = t
    return mask, toks


def pinned_accept(entropy, mask, bound):
    """dgemma's rule (decide_rules.h), written independently: pinned positions accepted; the free ones
    sorted ascending (stable), fp32 prefix sum, accepted iff the sum strictly before is <= bound."""
    h = np.asarray(entropy, np.float32)
    free = np.nonzero(mask == 0)[0]
    acc = np.ones(len(h), np.uint8)
    order = free[np.argsort(h[free], kind="stable")]
    cum = np.float32(0)
    b = np.float32(bound)
    for p in order:
        before = np.float32(np.float32(cum + h[p]) - h[p])
        cum = np.float32(cum + h[p])
        acc[p] = 1 if before <= b else 0
    return acc


def make(name, case, fixtures):
    fx = os.path.join(fixtures, name)
    model = DiffusionGemmaForBlockDiffusion.from_pretrained(os.path.join(fx, "model"), dtype=torch.bfloat16,
                                                            attn_implementation="eager").to(DEVICE).eval()
    mf.force_eager(model)
    with open(os.path.join(fx, "golden", "manifest.json")) as f:
        base = json.load(f)
    C, V = base["canvas_length"], base["vocab_size"]
    prompt_np = np.load(os.path.join(fx, "golden", "prompt_ids.npy")).astype(np.int64)
    prompt = torch.tensor(prompt_np, device=DEVICE).unsqueeze(0)
    P = prompt.shape[1]
    pins = case["pins"]
    mask, toks = canvas_mask(pins, C)
    init = rng.uniform_tokens(rng.stream_key(case["seed"], 0, 0, rng.PURPOSE_INIT_CANVAS), C, V)
    canvas0 = np.where(mask == 1, toks, init)
    out = mf.Saver(os.path.join(fx, "golden_pins"))
    out.arr("canvas0", canvas0, np.int32)
    out.arr("pin_mask", mask, np.uint8)
    keep = C if C <= 64 else 32

    # --- A. decoder forwards ----------------------------------------------------------------------
    with torch.no_grad():
        cache = DynamicCache(config=model.config.get_text_config(decoder=True))
        model.model.encoder(input_ids=prompt, past_key_values=cache,
                            position_ids=torch.arange(P, dtype=torch.int32, device=DEVICE).unsqueeze(0))
        dpos = torch.arange(P, P + C, dtype=torch.int32, device=DEVICE).unsqueeze(0)
        c0 = torch.tensor(canvas0, device=DEVICE).unsqueeze(0)
        logits0 = model(past_key_values=cache, decoder_input_ids=c0, decoder_position_ids=dpos).logits[0]
        argmax0 = logits0.argmax(-1)
        # Step 1's canvas: a fixed one (the step-0 argmax at free positions, the pins at pinned ones).
        canvas1 = np.where(mask == 1, toks, argmax0.cpu().numpy())
        c1 = torch.tensor(canvas1, device=DEVICE).unsqueeze(0)
        # The self-conditioning signal: the logits of the *unpinned* initial canvas (its random tokens
        # everywhere), not logits0. The fixture models predict their input token with p ~ 1, so logits0
        # already peaks at the pinned token in every pinned row: its softmax rows are one-hot up to
        # bf16 rounding and the one-hot replacement changed the reference's logits by NMSE 1.6e-4 —
        # below the bf16 noise floor of a free-running self-conditioned forward (~1e-4 for one ulp of
        # one input element), so the test could not tell the two apart. From the unpinned canvas the
        # pinned rows peak at other tokens and the one-hot rows are a whole-token change.
        c_init = torch.tensor(init, device=DEVICE).unsqueeze(0)
        logits_init = model(past_key_values=cache, decoder_input_ids=c_init, decoder_position_ids=dpos).logits[0]
        sc_plain = (logits_init / 0.8).to(torch.bfloat16)
        sc = sc_plain.clone()
        for p in np.nonzero(mask)[0].tolist():
            sc[p] = float("-inf")
            sc[p, int(toks[p])] = 0.0
        pinned_rows = torch.tensor(mask == 1, device=DEVICE)
        assert torch.equal(torch.softmax(sc[pinned_rows].float(), -1).max(-1).values,
                           torch.ones(int(mask.sum()), device=DEVICE)), "one-hot rows"
        pin_ids = torch.tensor(toks[mask == 1], device=DEVICE)
        p_pin = torch.softmax(sc_plain[pinned_rows].float(), -1).gather(-1, pin_ids.unsqueeze(-1)).squeeze(-1)
        assert float(p_pin.mean()) < 0.5, f"the plain signal already favours the pinned tokens ({p_pin.tolist()})"
        logits1 = model(past_key_values=cache, decoder_input_ids=c1, decoder_position_ids=dpos,
                        self_conditioning_logits=sc.unsqueeze(0)).logits[0]
        logits1_plain = model(past_key_values=cache, decoder_input_ids=c1, decoder_position_ids=dpos,
                              self_conditioning_logits=sc_plain.unsqueeze(0)).logits[0]
    out.arr("canvas1", canvas1, np.int32)
    out.arr("logits0", mf.np32(logits0[:keep]))
    out.arr("sc_input", mf.np32(sc_plain[:keep]))  # bf16 values; pinned rows are replaced by one-hot
    out.arr("logits1", mf.np32(logits1[:keep]))
    out.arr("logits1_softmax_sc", mf.np32(logits1_plain[:keep]))
    out.arr("argmax0", argmax0.cpu().numpy(), np.int32)
    out.arr("argmax1", logits1.argmax(-1).cpu().numpy(), np.int32)

    # --- B. generate() step 0 from the pinned initial canvas ---------------------------------------
    N = case["max_denoising_steps"]
    kwargs = dict(max_new_tokens=C, max_denoising_steps=N, t_min=case["t_min"], t_max=case["t_max"],
                  sampler_config=gen_mod.EntropyBoundSamplerConfig(entropy_bound=float(case["entropy_bound"])),
                  stability_threshold=case["stability_threshold"],
                  confidence_threshold=float(case["confidence_threshold"]), eos_token_id=EOS_IDS, pad_token_id=0,
                  decoder_input_ids=c0)
    with torch.no_grad(), mf.NoiseInjector(model, case["seed"], V, C, N) as inj:
        model.generate(prompt.clone(), **kwargs)
    s0 = inj.trace[0][0]
    assert np.array_equal(s0["canvas_in"][0].cpu().numpy(), canvas0), "generate started from decoder_input_ids"
    entropy0 = mf.np32(s0["entropy"][0])
    out.arr("step0.entropy", entropy0)
    out.arr("step0.argmax", s0["argmax"][0].cpu().numpy(), np.int32)
    out.arr("step0.sample", s0["sample"][0].cpu().numpy(), np.int32)
    out.arr("step0.temperature", np.array([s0["temperature"]], np.float32))
    out.arr("step0.accept_pinned_rule", pinned_accept(entropy0, mask, case["entropy_bound"]), np.uint8)
    out.arr("step0.accept_reference", s0["accept"][0].cpu().numpy(), np.uint8)  # the unpinned rule
    out.finish({"fixture": name, "seed": case["seed"], "pins": [{"offset": o, "tokens": t} for o, t in pins],
                "max_tokens": case["max_tokens"], "max_denoising_steps": N, "t_min": case["t_min"],
                "t_max": case["t_max"], "entropy_bound": case["entropy_bound"],
                "stability_threshold": case["stability_threshold"],
                "confidence_threshold": case["confidence_threshold"], "canvas_length": C, "vocab_size": V,
                "logits_rows_kept": keep, "sc_temperature": 0.8,
                "sc_source": "logits of the unpinned initial canvas / sc_temperature, bf16", "eos_token_ids": EOS_IDS,
                "torch_version": torch.__version__, "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"})
    print(f"{name}: wrote {out.root}; pinned {int(mask.sum())} of {C} positions of canvas 0; "
          f"step-0 accepted (pinned rule) {int(pinned_accept(entropy0, mask, case['entropy_bound']).sum())}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default="tests/fixtures")
    ap.add_argument("--only", default=None)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name, case in CASES.items():
        if args.only and name != args.only:
            continue
        make(name, case, args.fixtures)


if __name__ == "__main__":
    main()
