#!/usr/bin/env python3
"""Side-by-side denoising-step benchmark at the real DiffusionGemma-26B-A4B shape (random weights):
HF transformers (grouped_mm experts, sdpa attention) and dgemma (CUDA backend), in one run.

Run on the GPU machine from the repo root, after building dgemma there:
  scripts/device_build.sh build-device && python3 bench/denoise_step_bench.py --dgemma build-device/dgemma_bench --out $OUT/bench.json
transformers: ms per denoising step at batch 1 and 4 (canvas 256, 512-token prompt), measured as the
difference between runs with 48 and 8 forced steps (no early stop) divided by 40, so prefill and commit
costs cancel; the 256-token canvas's tokens/s at 48 and 16 forced steps; prefill tokens/s; with --full also
batch 8 and 16 ((16 steps - 8 steps) / 8).
dgemma (`dgemma_bench`, which times each engine step): ms per step and kernel launches per step at
batch 1, 4, 8, 16; prefill tokens/s and the time to the first canvas (prefill + 48 steps + commit) at a
512- and a 4,000-token prompt; tokens/s of a 256-token canvas at 48 and 16 forced steps, alone (batch 1)
and aggregate (batch 4, 16). --full adds batches 8/16, the long prompt and the 16-step runs.
"""
import argparse, json, os, re, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_files  # noqa: E402

LAYER_TYPES = (["sliding_attention"] * 5 + ["full_attention"]) * 5
TEXT = dict(model_type="diffusion_gemma_text", vocab_size=262144, hidden_size=2816, intermediate_size=2112,
            num_hidden_layers=30, num_attention_heads=16, num_key_value_heads=8, head_dim=256, global_head_dim=512,
            num_global_key_value_heads=2, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=262144,
            rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                "rope_theta": 1000000.0}},
            attention_bias=False, attention_dropout=0.0, sliding_window=1024, layer_types=LAYER_TYPES,
            final_logit_softcapping=30.0, use_bidirectional_attention="vision", num_experts=128, top_k_experts=8,
            moe_intermediate_size=704)
TOP = dict(architectures=["DiffusionGemmaForBlockDiffusion"], model_type="diffusion_gemma", canvas_length=256,
           tie_word_embeddings=True, eos_token_id=[1, 106], dtype="bfloat16", text_config=TEXT)
VISION = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
              num_attention_heads=2, num_key_value_heads=2, head_dim=8, patch_size=4, position_embedding_size=64,
              pooling_kernel_size=2, standardize=False, use_clipped_linears=False, rms_norm_eps=1e-6)
# The released vision tower (--write-model DIR --with-vision: dgemma_bench --images).
RELEASED_VISION = dict(model_type="gemma4_vision", hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                       num_attention_heads=16, num_key_value_heads=16, head_dim=72, patch_size=16,
                       position_embedding_size=10240, pooling_kernel_size=3, standardize=True,
                       use_clipped_linears=False, rms_norm_eps=1e-6, default_output_length=280)
GEN = {"max_new_tokens": 256, "max_denoising_steps": 48,
       "sampler_config": {"entropy_bound": 0.1, "_cls_name": "EntropyBoundSamplerConfig"},
       "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005,
       "eos_token_id": [1, 106, 50], "pad_token_id": 0, "bos_token_id": 2}
# The quantisation configs of the three quantised checkpoints' dummy stand-ins, as config.json's
# quantization_config (the same as dgemma_bench's --quantization presets, src/model/quant_config.cpp).
QUANT_CONFIGS = {
    "nvfp4-modelopt": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                       "ignore": ["lm_head", "*mlp*", "*router*", "*self_attn*", "*self_conditioning*"]},
    "nvfp4-ct": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                 "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                     "group_size": 16}}},
                 "ignore": ["re:.*self_attn.*", "re:.*router.*", "re:.*self_conditioning.*", "lm_head"]},
    "fp8-dynamic": {"quant_method": "compressed-tensors", "format": "float-quantized",
                    "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                                            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                                                  "dynamic": True}}},
                    "ignore": ["re:.*router.*", "re:.*self_conditioning.*", "lm_head"]},
}
PROMPT = [2] + [1000 + (i * 7919) % 200000 for i in range(511)]


def bench_hf(result, full=False):
    import torch
    from transformers.models.diffusion_gemma.configuration_diffusion_gemma import DiffusionGemmaConfig
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion
    from transformers.models.diffusion_gemma import generation_diffusion_gemma as gm
    cfg = DiffusionGemmaConfig(**json.loads(json.dumps(dict(TOP, vision_config=VISION))))
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.time()
    with torch.device("cuda"):
        model = DiffusionGemmaForBlockDiffusion(cfg).eval()
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("grouped_mm")
    print(f"hf: model built in {time.time() - t0:.1f}s", flush=True)

    def gen(batch, steps):
        ids = torch.tensor([PROMPT] * batch, device="cuda")
        torch.cuda.synchronize()
        t = time.time()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=256, max_denoising_steps=steps, confidence_threshold=1e-12,
                           stability_threshold=1, eos_token_id=[999999999 % 262144], pad_token_id=0)
        torch.cuda.synchronize()
        return (time.time() - t) * 1e3

    for batch in (1, 4):
        gen(batch, 2)  # warm-up
        t48, t16, t8 = gen(batch, 48), gen(batch, 16), gen(batch, 8)
        result[f"hf_ms_per_step_b{batch}"] = (t48 - t8) / 40
        result[f"hf_canvas48_ms_b{batch}"] = t48
        result[f"hf_canvas16_ms_b{batch}"] = t16
        # a whole generate() call: prefill, the steps and the commit of one 256-token canvas
        result[f"hf_tokens_per_s_48steps_b{batch}"] = 256 * batch / (t48 / 1e3)
        result[f"hf_tokens_per_s_16steps_b{batch}"] = 256 * batch / (t16 / 1e3)
        print(f"hf batch {batch}: 48 steps {t48:.0f} ms, 16 steps {t16:.0f} ms, 8 steps {t8:.0f} ms -> "
              f"{(t48 - t8) / 40:.2f} ms/step", flush=True)
    for batch in (8, 16) if full else ():  # the step only: (t16 - t8) / 8, fewer steps at these batches
        gen(batch, 2)
        t16, t8 = gen(batch, 16), gen(batch, 8)
        result[f"hf_ms_per_step_b{batch}"] = (t16 - t8) / 8
        result[f"hf_tokens_per_s_16steps_b{batch}"] = 256 * batch / (t16 / 1e3)
        print(f"hf batch {batch}: 16 steps {t16:.0f} ms, 8 steps {t8:.0f} ms -> {(t16 - t8) / 8:.2f} ms/step", flush=True)
    from transformers import DynamicCache
    ids = torch.tensor([PROMPT], device="cuda")
    with torch.no_grad():
        for _ in range(2):
            cache = DynamicCache(config=model.config.get_text_config(decoder=True))
            torch.cuda.synchronize(); t = time.time()
            model.model.encoder(input_ids=ids, past_key_values=cache)
            torch.cuda.synchronize()
    result["hf_prefill_tokens_per_s"] = len(PROMPT) / (time.time() - t)
    print(f"hf prefill: {result['hf_prefill_tokens_per_s']:.0f} tokens/s", flush=True)


LINE = re.compile(r"prefill ([\d.]+) ms \(([\d.]+|inf) tokens/s\), ([\d.]+) ms per denoising step \((\d+) steps\), "
                  r"([\d.]+) ms total, ([\d.]+) tokens/s, ([\d.]+) launches per step")


def run_dgemma(binary, model_dir, runs, quantization=None, device="cuda", extra_args=()):
    """One dgemma_bench process (one set of dummy weights) for runs [(batch, steps, prompt_len)], one 256-token
    canvas per sequence, with extra_args (e.g. a kernel choice) appended; returns each run's figures."""
    spec = ",".join(f"{b}:{s}:{p}" for b, s, p in runs)
    cmd = [binary, model_dir, "--device", device, "--runs", spec]
    if quantization:
        cmd += ["--quantization", quantization]
    cmd += list(extra_args)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:] + out.stdout[-2000:])
    lines = [line for line in out.stdout.splitlines() if LINE.search(line)]  # one per run, in order
    if len(lines) != len(runs):
        raise RuntimeError(f"{len(lines)} result lines for {len(runs)} runs: " + out.stdout[-1000:] + out.stderr[-1000:])
    print(f"dgemma {quantization or 'bf16'} runs {spec}:", out.stderr.strip(), flush=True)
    results = []
    for (batch, steps, prompt_len), line in zip(runs, lines):
        prefill_ms, _, ms, _, total, tps, launches = LINE.search(line).groups()
        prefill_ms = float(prefill_ms)
        r = dict(ms_per_step=float(ms), total_ms=float(total), launches=float(launches),
                 tokens_per_s=256 * batch / (float(total) / 1e3))  # prefill, steps and commit included
        if prefill_ms > 0:  # batch > 1 fuses the prompts' last chunk with the first step: no separate figure
            r["prefill_tokens_per_s"] = batch * prompt_len / (prefill_ms / 1e3)
        print(f"dgemma {quantization or 'bf16'} batch {batch} steps {steps} prompt {prompt_len}:", line, flush=True)
        results.append(r)
    return results


def bench_dgemma(binary, result, formats=("bf16",), full=False):
    d = tempfile.mkdtemp()
    json.dump(TOP, open(os.path.join(d, "config.json"), "w"))
    json.dump(GEN, open(os.path.join(d, "generation_config.json"), "w"))
    for fmt in formats:
        tag = "" if fmt == "bf16" else f"_{fmt.replace('-', '_')}"  # bf16 keeps the original keys
        q = None if fmt == "bf16" else fmt
        batches = (1, 4, 8, 16) if full and fmt == "bf16" else (1, 4)
        runs = [(b, s, len(PROMPT)) for b in batches for s in ((48, 16) if full else (48,))]
        if full:
            runs.append((1, 48, 4000))
        try:
            figures = dict(zip(runs, run_dgemma(binary, d, runs, quantization=q)))
        except Exception as e:  # the other formats still run
            print(f"dgemma {fmt} bench failed:", e, flush=True)
            result[f"dgemma{tag}_error"] = str(e)[-2000:]
            continue
        for batch in batches:
            r = figures[(batch, 48, len(PROMPT))]
            result[f"dgemma{tag}_ms_per_step_b{batch}"] = r["ms_per_step"]
            result[f"dgemma{tag}_launches_per_step_b{batch}"] = r["launches"]
            result[f"dgemma{tag}_tokens_per_s_48steps_b{batch}"] = r["tokens_per_s"]
            if "prefill_tokens_per_s" in r:
                result[f"dgemma{tag}_prefill_tokens_per_s_b{batch}"] = r["prefill_tokens_per_s"]
            if batch == 1:
                result[f"dgemma{tag}_first_canvas_ms_prompt512"] = r["total_ms"]
            if full:
                result[f"dgemma{tag}_tokens_per_s_16steps_b{batch}"] = figures[(batch, 16, len(PROMPT))]["tokens_per_s"]
        if full:
            r = figures[(1, 48, 4000)]
            result[f"dgemma{tag}_first_canvas_ms_prompt4000"] = r["total_ms"]
            result[f"dgemma{tag}_prefill_tokens_per_s_prompt4000"] = r.get("prefill_tokens_per_s", 0.0)
            result[f"dgemma{tag}_ms_per_step_prompt4000"] = r["ms_per_step"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dgemma", default="build-device/dgemma_bench")
    ap.add_argument("--out", default="bench.json")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--skip-dgemma", action="store_true")
    ap.add_argument("--full", action="store_true", help="also batches 8 and 16, 16-step runs and a 4,000-token prompt")
    ap.add_argument("--write-model", metavar="DIR",
                    help="only write the 26B-A4B model directory for dummy weights and exit: config, generation "
                         "config, and what `dgemma serve` needs (bench/serve_files.py: tokenizer, chat template, "
                         "processor config)")
    ap.add_argument("--with-vision", action="store_true",
                    help="with --write-model: the released vision tower's vision_config too (dgemma_bench --images, "
                         "images through dgemma serve)")
    ap.add_argument("--formats", default="bf16",
                    help="comma-separated dummy-weight formats for dgemma: bf16, nvfp4-modelopt, nvfp4-ct, fp8-dynamic")
    a = ap.parse_args()
    if a.write_model:
        os.makedirs(a.write_model, exist_ok=True)
        top = dict(TOP, vision_config=RELEASED_VISION) if a.with_vision else TOP
        json.dump(top, open(os.path.join(a.write_model, "config.json"), "w"))
        json.dump(GEN, open(os.path.join(a.write_model, "generation_config.json"), "w"))
        serve_files.add_serve_files(a.write_model)
        return
    result = {}
    if not a.skip_dgemma:
        bench_dgemma(a.dgemma, result, a.formats.split(","), a.full)
    if not a.skip_hf:
        bench_hf(result, a.full)
    for b in (1, 4, 8, 16):
        if f"hf_ms_per_step_b{b}" in result and f"dgemma_ms_per_step_b{b}" in result:
            result[f"speedup_b{b}"] = result[f"hf_ms_per_step_b{b}"] / result[f"dgemma_ms_per_step_b{b}"]
    json.dump(result, open(a.out, "w"), indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
