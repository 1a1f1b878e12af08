#!/usr/bin/env python3
"""Trains the tiny DiffusionGemma that `make run` serves (models/tiny-code) on one GPU, in minutes.

    python3 tools/tiny_model/train.py --out OUT_DIR [--data tools/tiny_model/data/train.npz]
        [--minutes 4.0] [--steps N] [--batch 512] [--lr 3e-3] [--t-power 0.5] [--seed 0] [--len-bucket 64]
        [--profile-steps N] [--profile]

Needs PyTorch and transformers with the DiffusionGemma classes (the model is transformers'
DiffusionGemmaForBlockDiffusion, so the weights mean exactly what the reference means), numpy and
safetensors. Input: the pre-tokenised examples from build_data.py and models/tiny-code's config,
generation config and tokenizer. Output in OUT_DIR: config.json, generation_config.json,
model.safetensors (bf16, the released checkpoint's tensor names), tokenizer.json,
tokenizer_config.json and train_log.txt (loss curve, samples).

Objective (block diffusion, docs/ARCHITECTURE.md): each example is a chat prompt plus an answer cut
into canvases of canvas_length tokens. A training item picks one canvas k: the context (prompt +
the answer's first k canvases, clean) goes through the causal encoder into the KV cache; the
canvas (answer tokens k*C.., padded with <pad> after the end-of-turn token) has each token replaced
by a uniformly random token with probability t = u ** t_power, u ~ U(0, 1) (t drawn per item; the
default 0.5 puts more items at high noise, where generation starts: the first denoising step sees
a fully random canvas); the bidirectional decoder predicts the clean canvas, cross-entropy over
every canvas position, the <pad> positions after the end-of-turn included: the early-stop rule
needs a low mean entropy over the whole canvas, so the model must be sure of those too.
Self-conditioning: for half the items the decoder also gets the logits of a first, no-grad pass
over the same input, divided by a temperature in [t_min, t_max] as at inference. Weights are bf16 (as served) with fp32
master copies in AdamW.

With --steps 0 (default) the step count is fixed after timing the first steps so the run fits in
--minutes; the chosen count is printed and logged: pass it as --steps to reproduce a run exactly.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np

# Batches come in a few fixed shapes, but the allocator still sees many sizes (logits, masks, experts
# buffers); expandable segments keep it from fragmenting and calling cudaMalloc again and again.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
import torch  # noqa: E402
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODEL_SRC = os.path.join(REPO, "models", "tiny-code")
MAX_CONTEXT = 448  # < sliding_window - 1, so the sliding layers' cache holds the whole context
PAD, TURN_END, TOOL_RESPONSE = 0, 106, 50


class Log:
    def __init__(self, path):
        self.f = open(path, "w", encoding="utf-8")

    def __call__(self, *parts):
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


# ---- data -----------------------------------------------------------------------------------------

class Data:
    def __init__(self, path, canvas, bucket=64):
        d = np.load(path)
        self.ids = d["ids"].astype(np.int64)
        self.start, self.plen, self.alen = d["start"], d["prompt_len"], d["answer_len"]
        self.kind = d["kind"]
        self.kinds = [str(k) for k in d["kinds"]]
        self.C = canvas
        # Every (example, canvas index) whose context fits.
        items = []
        for i in range(len(self.start)):
            for k in range(int(math.ceil(self.alen[i] / canvas))):
                if self.plen[i] + k * canvas <= MAX_CONTEXT:
                    items.append((i, k))
        self.items = np.array(items, np.int64)
        self.ctx_len = self.plen[self.items[:, 0]] + self.items[:, 1] * canvas
        # Contexts are left-padded to a multiple of `bucket`: a handful of batch shapes instead of a
        # new one nearly every step (each new shape costs the GPU side a fresh set of kernel plans,
        # allocations and, for some attention backends, a graph build).
        self.bucket = max(1, bucket)
        self.padded_len = -(-self.ctx_len // self.bucket) * self.bucket
        self.queue = []

    def shapes(self):
        return sorted(set(int(x) for x in self.padded_len))

    def batch_of_len(self, rng, n, L):
        """n random items whose padded context length is L (for warming up that shape)."""
        cand = np.nonzero(self.padded_len == L)[0]
        return self.make(self.items[cand[rng.integers(0, len(cand), n)]], L)

    def batch(self, rng, n, group=1):
        """Left-padded contexts [n, L], their validity mask, clean target canvases [n, C]. With group > 1,
        group*n random items are drawn at once and cut into n-item batches of similar context length
        (in random order), so a batch pads to its own length rather than to the longest of 128 random
        contexts: the same items, far fewer padded positions."""
        if group <= 1:
            return self.make(self.items[rng.integers(0, len(self.items), n)])
        if not self.queue:
            pick = rng.integers(0, len(self.items), n * group)
            pick = pick[np.argsort(self.ctx_len[pick], kind="stable")]
            self.queue = [pick[i * n:(i + 1) * n] for i in rng.permutation(group)]
        return self.make(self.items[self.queue.pop()])

    def make(self, pick, L=None):
        n = len(pick)
        ctxs, tgts = [], []
        for i, k in pick:
            s, p, a = self.start[i], self.plen[i], self.alen[i]
            seq = self.ids[s:s + p + a]
            ctx = seq[:p + k * self.C]
            tgt = seq[p + k * self.C:p + (k + 1) * self.C]
            tgt = np.concatenate([tgt, np.full(self.C - len(tgt), PAD, np.int64)])
            ctxs.append(ctx)
            tgts.append(tgt)
        if L is None:
            L = max(len(c) for c in ctxs)
            L = -(-L // self.bucket) * self.bucket
        ctx = np.full((n, L), PAD, np.int64)
        valid = np.zeros((n, L), bool)
        for r, c in enumerate(ctxs):
            ctx[r, L - len(c):] = c
            valid[r, L - len(c):] = True
        return ctx, valid, np.stack(tgts)


# ---- per-phase timing (--profile-steps) -------------------------------------------------------------

class Phases:
    """Wall time per phase of a training step; synchronises the GPU at each boundary, so only on in
    --profile-steps mode (a normal step has no host syncs)."""

    def __init__(self, device):
        self.device, self.on, self.t, self.n, self.last = device, False, {}, 0, 0.0

    def _now(self):
        if self.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def start(self):
        if self.on:
            self.last = self._now()

    def mark(self, name):
        if self.on:
            now = self._now()
            self.t[name] = self.t.get(name, 0.0) + now - self.last
            self.last = now

    def end(self):
        if self.on:
            self.n += 1

    def report(self, log):
        n = max(1, self.n)
        total = sum(self.t.values()) / n
        log("phases (mean of %d synchronised steps, %.1f ms/step in all): %s" % (
            n, total * 1e3, ", ".join("%s %.1f ms" % (k, v / n * 1e3) for k, v in self.t.items())))


def profile_tables(prof, n_steps, device, log):
    ka = prof.key_averages()
    sorts = [("self_cpu_time_total", "self CPU time"), ("cpu_time_total", "CPU time (with children)")]
    if device == "cuda":  # the key's name changed across torch versions
        sorts.insert(0, (("self_device_time_total", "self_cuda_time_total"), "self CUDA time"))
    for keys, what in sorts:
        for key in (keys if isinstance(keys, tuple) else (keys,)):
            try:
                table = ka.table(sort_by=key, row_limit=20)
                break
            except Exception as e:  # noqa: BLE001
                table = "(no table: %r)" % (e,)
        log("profile, %d steps, top 20 ops by %s:\n%s" % (n_steps, what, table))


# ---- masks (additive, in the compute dtype: valid for eager and SDPA attention alike) --------------

def masks(valid, C, dtype):
    """Encoder: causal over the real tokens; a pad token sees only itself (no empty softmax rows).
    Decoder: every real context token and the whole canvas."""
    n, L = valid.shape
    dev = valid.device
    neg = torch.finfo(dtype).min
    q = torch.arange(L, device=dev)
    causal = q[None, :] <= q[:, None]  # [L(query), L(key)]
    enc_ok = (causal[None] & valid[:, None, :]) | torch.eye(L, dtype=torch.bool, device=dev)[None]
    enc = torch.zeros((n, 1, L, L), dtype=dtype, device=dev).masked_fill(~enc_ok[:, None], neg)
    dec_ok = torch.cat([valid, torch.ones((n, C), dtype=torch.bool, device=dev)], dim=1)
    dec = torch.zeros((n, 1, C, L + C), dtype=dtype, device=dev).masked_fill(~dec_ok[:, None, None, :], neg)
    return {"full_attention": enc, "sliding_attention": enc}, {"full_attention": dec, "sliding_attention": dec}


def positions(valid, C):
    n_real = valid.sum(dim=1)
    enc = (valid.long().cumsum(dim=1) - 1).clamp(min=0)
    dec = n_real[:, None] + torch.arange(C, device=valid.device)[None, :]
    return enc, dec


# ---- model ------------------------------------------------------------------------------------------

def hf_config(cfg):
    from transformers.models.diffusion_gemma.configuration_diffusion_gemma import DiffusionGemmaConfig
    c = json.loads(json.dumps(cfg))
    c.update(boi_token_id=255999, eoi_token_id=258882, image_token_id=258880)  # unused (no images)
    # transformers always builds a vision tower; a tiny one keeps it out of the way (its tensors are
    # not saved: dgemma serves text only).
    c["vision_config"] = dict(model_type="gemma4_vision", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                              num_attention_heads=2, num_key_value_heads=2, head_dim=8, patch_size=4,
                              position_embedding_size=64, pooling_kernel_size=2, standardize=False,
                              use_clipped_linears=False, rms_norm_eps=1e-6)
    return DiffusionGemmaConfig(**c)


def tie_encoder_to_decoder(model):
    """The encoder and decoder share every text weight (the checkpoint stores the decoder's); make
    sure they are the same Parameter objects so training updates both."""
    enc = model.model.encoder.language_model
    dec = model.model.decoder
    dec_params = dict(dec.named_parameters())
    for name, p in list(enc.named_parameters()):
        target = dec_params.get(name)
        if target is None:
            raise SystemExit("encoder parameter %s has no decoder twin" % name)
        if p is not target:
            mod = enc
            *path, leaf = name.split(".")
            for part in path:
                mod = getattr(mod, part)
            setattr(mod, leaf, target)
    model.lm_head.weight = dec.embed_tokens.weight
    for name, p in enc.named_parameters():
        assert p.data_ptr() == dec_params[name].data_ptr(), name


def checkpoint_tensors(model):
    out = {}
    for k, v in model.state_dict().items():
        if k.startswith("model.decoder.") or (k.startswith("model.encoder.language_model.") and
                                              k.endswith("layer_scalar")):
            out[k] = v.detach().to("cpu", torch.bfloat16).contiguous().clone()
    return out


def to_device_bf16(model, device):
    """Parameters and saved buffers in bf16 (as served); non-persistent float buffers (RoPE inverse
    frequencies) stay fp32. from_pretrained computes those in fp32, and so do dgemma and the
    reference: a plain model.to(bfloat16) would round inv_freq to bf16 and train against a RoPE that
    drifts by up to ~1 rad at position 400 (the reloaded model would then disagree with the trained one)."""
    saved = set(model.state_dict().keys())
    keep = {n: b.detach().clone() for n, b in model.named_buffers()
            if n not in saved and b.is_floating_point()}
    model = model.to(device=device, dtype=torch.bfloat16)
    for name, b in keep.items():
        mod = model
        *path, leaf = name.split(".")
        for part in path:
            mod = getattr(mod, part)
        mod._buffers[leaf] = b.to(device)
    return model, sorted(keep)


def experts_modules(model):
    return [m for m in model.modules() if hasattr(m, "gate_up_proj") and hasattr(m, "down_proj")]


def set_experts(model, impl):
    """Selects transformers' experts implementation ('eager' loops over experts in Python, with a host
    sync per expert; 'grouped_mm' / 'batched_mm' are single batched kernels). Returns what the
    experts modules now use."""
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(impl)
    # set_experts_implementation reaches the sub-models whose config class differs from the top one;
    # the decoder's experts read the top config's text_config, so every experts module's config is
    # also set directly (transformers keeps the value behind a property, in *_internal).
    for m in experts_modules(model):
        c = m.config
        if getattr(c, "_experts_implementation", None) != impl:
            if hasattr(c, "_experts_implementation_internal"):
                c._experts_implementation_internal = impl
            else:
                c._experts_implementation = impl
    used = {getattr(getattr(m, "config", None), "_experts_implementation", "?") for m in experts_modules(model)}
    if used != {impl}:
        raise RuntimeError("experts implementation %s requested, modules use %s" % (impl, sorted(used)))
    return impl


def pick_experts(model, device, log, candidates=("grouped_mm", "batched_mm")):
    """The first of candidates that works here and matches eager (forward and gradients on one experts
    module); falls back to eager. Logs the choice."""
    mods = experts_modules(model)
    if not mods:
        log("experts implementation: eager (no experts modules)")
        return "eager"
    set_experts(model, "eager")
    m = mods[0]
    g = torch.Generator(device=device).manual_seed(1)
    E, H = m.gate_up_proj.shape[0], m.gate_up_proj.shape[2]
    K = model.config.text_config.top_k_experts
    x = torch.randn((300, H), generator=g, device=device).to(torch.bfloat16)
    idx = torch.stack([torch.randperm(E, generator=g, device=device)[:K] for _ in range(300)])
    w = torch.rand((300, K), generator=g, device=device)

    def run(impl):
        set_experts(model, impl)
        xx = x.clone().requires_grad_(True)
        out = m(xx, idx, w)
        (out.float() ** 2).sum().backward()
        grads = [xx.grad.float(), m.gate_up_proj.grad.float(), m.down_proj.grad.float()]
        m.gate_up_proj.grad = None
        m.down_proj.grad = None
        return out.float().detach(), grads

    want, want_g = run("eager")
    for impl in candidates:
        try:
            got, got_g = run(impl)
            if torch.equal(got, want) and all(torch.equal(a, b) for a, b in zip(got_g, want_g)):
                log("experts implementation %s gives eager's bits exactly (still eager underneath?)" % impl)
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - not available in this torch/transformers
            log("experts implementation %s unavailable: %s" % (impl, repr(e)[:200]))
            continue
        err = max([float((got - want).abs().max()) / (float(want.abs().max()) + 1e-6)] +
                  [float((a - b).abs().max()) / (float(b.abs().max()) + 1e-6) for a, b in zip(got_g, want_g)])
        if err < 0.05:
            log("experts implementation: %s (max relative difference to eager %.2g, forward and grads)" % (impl, err))
            return set_experts(model, impl)
        log("experts implementation %s disagrees with eager (relative %.2g): not used" % (impl, err))
    log("experts implementation: eager (fallback)")
    return set_experts(model, "eager")


SC_MASK_SUPPORTED = [True]  # False after a transformers without self_conditioning_mask refused it


def forward(model, ctx, valid, canvas, sc_logits, sc_mask, C):
    if sc_mask is not None and not SC_MASK_SUPPORTED[0]:
        # Emulate the per-item mask: items with and without self-conditioning in separate passes.
        out = torch.empty((canvas.shape[0], C, model.config.text_config.vocab_size), device=canvas.device)
        on, off = sc_mask.nonzero()[:, 0], (~sc_mask).nonzero()[:, 0]
        if len(on):
            out[on] = forward(model, ctx[on], valid[on], canvas[on], sc_logits[on], None, C)
        if len(off):
            out[off] = forward(model, ctx[off], valid[off], canvas[off], None, None, C)
        return out
    enc_mask, dec_mask = masks(valid, C, next(model.parameters()).dtype)
    enc_pos, dec_pos = positions(valid, C)
    kw = dict(input_ids=ctx, attention_mask=enc_mask, position_ids=enc_pos, decoder_input_ids=canvas,
              self_conditioning_logits=sc_logits, decoder_attention_mask=dec_mask, decoder_position_ids=dec_pos)
    if sc_mask is not None:
        kw["self_conditioning_mask"] = sc_mask
    try:
        out = model(**kw)
    except TypeError as e:
        if "self_conditioning_mask" not in str(e) or sc_mask is None:
            raise
        SC_MASK_SUPPORTED[0] = False
        print("this transformers has no self_conditioning_mask: splitting batches instead", flush=True)
        return forward(model, ctx, valid, canvas, sc_logits, sc_mask, C)
    return out.logits.float()


def padding_check(model, data, C, device, log):
    """Left padding must change nothing: the logits of a short example in a padded batch equal its
    logits alone. Checked in fp32 (eager experts) on a copy, where only a real mask or position error
    can make a difference; bf16 is logged too: there, rounding differences between batch shapes can
    flip near-tied top-2 expert choices of the random-init router, which moves single tokens a lot."""
    import copy
    rng = np.random.default_rng(7)
    ctx, valid, tgt = data.batch(rng, 4)
    while len(set(valid.sum(1).tolist())) < 2:
        ctx, valid, tgt = data.batch(rng, 4)
    to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    fp32 = copy.deepcopy(model).float()
    set_experts(fp32, "eager")
    fp32.eval()
    res = {}
    for name, m in (("fp32", fp32), ("bf16", model)):
        worst, scale = 0.0, 0.0
        with torch.no_grad():
            both = forward(m, to(ctx), to(valid), to(tgt), None, None, C)
            for r in range(len(ctx)):
                n = int(valid[r].sum())
                alone = forward(m, to(ctx[r:r + 1, -n:]), to(valid[r:r + 1, -n:]), to(tgt[r:r + 1]), None, None, C)[0]
                worst = max(worst, float((both[r] - alone).abs().max()))
                scale = max(scale, float(alone.abs().max()))
        res[name] = (worst, scale)
    del fp32
    bad = res["fp32"][0] > 1e-3 * res["fp32"][1] + 1e-4
    log("padding check: max |logit difference| fp32 %.3g, bf16 %.3g (logits up to %.3g)%s" % (
        res["fp32"][0], res["bf16"][0], res["fp32"][1],
        "  <-- WARNING: padding changes the result" if bad else ""))


# ---- sampling (the reference generate loop, for the log) -------------------------------------------

def sample_answers(model, enc, prompts, gen_cfg, device, log):
    from transformers.models.diffusion_gemma import generation_diffusion_gemma as gen_mod
    model.eval()
    for text in prompts:
        ids = torch.tensor([enc.encode(text)], device=device)
        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=128, max_denoising_steps=gen_cfg["max_denoising_steps"],
                                 t_min=gen_cfg["t_min"], t_max=gen_cfg["t_max"],
                                 sampler_config=gen_mod.EntropyBoundSamplerConfig(
                                     entropy_bound=gen_cfg["sampler_config"]["entropy_bound"]),
                                 stability_threshold=gen_cfg["stability_threshold"],
                                 confidence_threshold=gen_cfg["confidence_threshold"],
                                 eos_token_id=gen_cfg["eos_token_id"], pad_token_id=PAD,
                                 return_dict_in_generate=True)
        seq = out.sequences if hasattr(out, "sequences") else out
        gen = [t for t in seq[0, ids.shape[1]:].tolist() if t != PAD]
        tpf = getattr(out, "tokens_per_forward", None)
        log("--- prompt:", repr(text))
        log("    answer:", repr(enc.decode(gen)), "| tokens/forward:", tpf)


def chat_prompt(user_text, tools_text=None):
    # The chat template's rendering of one user turn (thinking off); tools_text: a system turn body.
    sys_turn = "<|turn>system\n%s<turn|>\n" % tools_text if tools_text else ""
    return "<bos>%s<|turn>user\n%s<turn|>\n<|turn>model\n" % (sys_turn, user_text)


# ---- main -------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=os.path.join(HERE, "data", "train.npz"))
    ap.add_argument("--minutes", type=float, default=4.0, help="training time budget (without start-up)")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (0: fit --minutes)")
    # A step is overhead-bound (177 ms at batch 128 on one H200, mostly launch and host time), so a
    # larger batch sees several times more tokens in the same minutes; the peak LR grows with about
    # the square root of the batch (2e-3 at 128).
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--t-power", type=float, default=0.5,
                    help="noise level t = u ** t_power, u ~ U(0, 1) (1: uniform; < 1: more items at high noise)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sc-prob", type=float, default=0.5, help="share of items with self-conditioning")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--length-groups", type=int, default=8,
                    help="batches drawn together and grouped by context length (1: plain random batches)")
    ap.add_argument("--experts", default="auto",
                    help="transformers experts implementation: auto (on cuda the first of grouped_mm, batched_mm "
                         "that matches eager; eager elsewhere), or a name to force")
    ap.add_argument("--len-bucket", type=int, default=64,
                    help="contexts are left-padded to a multiple of this (few batch shapes; 1: pad to the longest)")
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="time the phases of the first N training steps (synchronising between phases) and log "
                         "the mean of each")
    ap.add_argument("--profile", action="store_true",
                    help="run torch.profiler over 10 training steps and log the top 20 ops by self CUDA time "
                         "and by CPU time")
    args = ap.parse_args()
    if not args.t_power > 0:
        raise SystemExit("--t-power must be > 0 (got %r)" % args.t_power)
    if args.batch < 1 or args.lr <= 0:
        raise SystemExit("--batch must be >= 1 and --lr > 0")
    t_start = time.time()

    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "train_log.txt"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator(device=device).manual_seed(args.seed)

    with open(os.path.join(MODEL_SRC, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(MODEL_SRC, "generation_config.json")) as f:
        gen_cfg = json.load(f)
    C = cfg["canvas_length"]
    V = cfg["text_config"]["vocab_size"]
    t_min, t_max = gen_cfg["t_min"], gen_cfg["t_max"]

    data = Data(args.data, C, args.len_bucket)
    log("data: %d examples, %d training items (example, canvas), %d tokens; kinds %s" % (
        len(data.start), len(data.items), len(data.ids),
        {k: int((data.kind == i).sum()) for i, k in enumerate(data.kinds)}))

    sys.path.insert(0, HERE)
    import bpe
    with open(os.path.join(MODEL_SRC, "tokenizer.json"), encoding="utf-8") as f:
        enc = bpe.Encoder(json.load(f))
    for i in (0, len(data.start) - 1):
        s, p, a = data.start[i], data.plen[i], data.alen[i]
        log("example %d: prompt %r -> answer %r" % (i, enc.decode(data.ids[s:s + p].tolist())[-120:],
                                                    enc.decode(data.ids[s + p:s + p + a].tolist())[:200]))

    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaForBlockDiffusion
    import transformers
    model = DiffusionGemmaForBlockDiffusion(hf_config(cfg))
    tie_encoder_to_decoder(model)
    model, fp32_buffers = to_device_bf16(model, device)
    tie_encoder_to_decoder(model)
    set_experts(model, "eager")
    model.train()
    n_params = sum(p.numel() for p in model.model.decoder.parameters())
    log("transformers %s, torch %s, device %s; attention %s; decoder parameters %d; fp32 buffers %s" % (
        transformers.__version__, torch.__version__, device,
        getattr(model.config.text_config, "_attn_implementation", "?"), n_params,
        sorted({n.split(".")[-1] for n in fp32_buffers})))

    padding_check(model, data, C, device, log)
    if args.experts == "auto":
        experts_impl = pick_experts(model, device, log) if device == "cuda" else set_experts(model, "eager")
    else:
        experts_impl = set_experts(model, args.experts)
    log("experts implementation in use:", experts_impl)
    model.train()

    params = [p for p in model.parameters() if p.requires_grad]
    master = [p.detach().float().clone().requires_grad_(True) for p in params]
    decay = [m for m, p in zip(master, params) if p.dim() >= 2]
    no_decay = [m for m, p in zip(master, params) if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98), eps=1e-8, **({"fused": True} if device == "cuda" else {}))

    def lr_at(step, total):
        warm = 100  # the first steps (also those timed for --steps 0) do not depend on total
        if step < warm:
            return args.lr * (step + 1) / warm
        frac = (step - warm) / max(1, total - warm)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    phases = Phases(device)

    def train_step(step, total, batch=None, update=True):
        phases.start()
        ctx, valid, tgt = batch if batch is not None else data.batch(rng, args.batch, args.length_groups)
        phases.mark("batch (host)")
        ctx = torch.from_numpy(ctx).to(device, non_blocking=True)
        valid = torch.from_numpy(valid).to(device, non_blocking=True)
        tgt = torch.from_numpy(tgt).to(device, non_blocking=True)
        phases.mark("h2d copies")
        B = tgt.shape[0]
        t = torch.rand((B, 1), generator=gen, device=device) ** args.t_power
        noise = torch.randint(0, V, tgt.shape, generator=gen, device=device)
        noised = torch.rand(tgt.shape, generator=gen, device=device) < t
        canvas = torch.where(noised, noise, tgt)
        phases.mark("noise")
        # No host syncs in a step (they stall the GPU queue): the self-conditioning pass always runs
        # (a batch of hundreds at sc_prob 0.5 always has an item that uses it), the metrics stay on the GPU.
        use_sc = torch.rand((B,), generator=gen, device=device) < args.sc_prob
        sc_logits = None
        if args.sc_prob > 0:
            with torch.no_grad():
                first = forward(model, ctx, valid, canvas, None, None, C)
                temp = t_min + (t_max - t_min) * torch.rand((B, 1, 1), generator=gen, device=device)
                sc_logits = (first / temp).to(torch.bfloat16)
                del first
        phases.mark("sc no-grad pass")
        logits = forward(model, ctx, valid, canvas, sc_logits, use_sc if sc_logits is not None else None, C)
        loss_tok = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), reduction="none").view(B, C)
        loss = loss_tok.mean()
        phases.mark("main forward + loss")
        for p in params:
            p.grad = None
        loss.backward()
        phases.mark("backward")
        if not update:  # shape warm-up: the gradients are dropped, nothing is learnt
            for p in params:
                p.grad = None
            return None
        for m, p in zip(master, params):
            m.grad = p.grad.float() if p.grad is not None else torch.zeros_like(m)
        gnorm = torch.nn.utils.clip_grad_norm_(master, 1.0)
        lr = lr_at(step, total)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            for m, p in zip(master, params):
                p.copy_(m)
        phases.mark("optimizer")
        with torch.no_grad():
            acc = (logits.argmax(-1) == tgt).float().mean()
            hi = (t[:, 0] > 0.8).float()
            loss_hi = (loss_tok.mean(1) * hi).sum() / hi.sum()  # nan when no item has t > 0.8
        phases.mark("metrics")
        phases.end()
        return loss.detach(), loss_hi, acc, gnorm, lr

    # Every batch shape once before the clock starts (forward and backward, no update), so that no
    # timed or counted step pays for a first-time shape.
    t_warm = time.time()
    warm_rng = np.random.default_rng(args.seed + 1)
    shapes = data.shapes()
    for i, L in enumerate(shapes):
        b = data.batch_of_len(warm_rng, args.batch, L)
        if i == 0 and experts_impl != "eager":
            try:  # the fast experts path on the real shapes; eager if it fails
                train_step(0, 1, b, update=False)
            except Exception as e:  # noqa: BLE001
                log("first step with experts %s failed (%s): eager instead" % (experts_impl, repr(e)[:200]))
                experts_impl = set_experts(model, "eager")
                train_step(0, 1, b, update=False)
        else:
            train_step(0, 1, b, update=False)
    if device == "cuda":
        torch.cuda.synchronize()
    log("warm-up: %d batch shapes (context lengths %s, padded to multiples of %d) in %.1fs" % (
        len(shapes), shapes, data.bucket, time.time() - t_warm))

    total = args.steps if args.steps > 0 else 10 ** 9
    prof_steps = (10 if args.profile else 0)
    first_timed = max(args.profile_steps, prof_steps) + 5
    timed = (first_timed, first_timed + 30)  # steps timed to fix the step count (after the profiled ones)
    prof = None
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        prof = profile(activities=acts)
        prof.__enter__()
    phases.on = args.profile_steps > 0
    step = 0
    t_train = time.time()
    t_timed = None
    sums = [torch.zeros((), device=device), torch.zeros((), device=device)]
    while step < total:
        if args.steps == 0 and step in timed:
            if device == "cuda":
                torch.cuda.synchronize()
            if step == timed[0]:
                t_timed = time.time()
            else:
                per_step = (time.time() - t_timed) / (timed[1] - timed[0])
                total = max(200, int((args.minutes * 60 - (time.time() - t_train)) / per_step) + step)
                log("%.1f ms/step -> %d steps in all (reproduce with --steps %d)" % (per_step * 1000, total, total))
        loss, loss_hi, acc, gnorm, lr = train_step(step, total)
        sums[0] += loss
        sums[1] += acc
        step += 1
        if phases.on and step == args.profile_steps:
            phases.on = False
            phases.report(log)
        if prof is not None and step == prof_steps:
            if device == "cuda":
                torch.cuda.synchronize()
            prof.__exit__(None, None, None)
            profile_tables(prof, prof_steps, device, log)
            prof = None
        if step % args.log_every == 0 or step == total:
            n = args.log_every if step % args.log_every == 0 else step % args.log_every
            mean_loss = float(sums[0]) / n
            log("step %5d  loss %.4f  acc %.3f  loss(t>0.8) %.3f  gnorm %.2f  lr %.2e  %.0fs" % (
                step, mean_loss, float(sums[1]) / n, float(loss_hi), float(gnorm), lr, time.time() - t_start))
            sums = [torch.zeros((), device=device), torch.zeros((), device=device)]
            if not math.isfinite(mean_loss):
                raise SystemExit("loss is not finite before step %d" % step)
    if prof is not None:  # fewer steps than the profile window
        prof.__exit__(None, None, None)
        profile_tables(prof, step, device, log)
        prof = None
    log("trained %d steps in %.0fs (batch %d, lr %g, t_power %g, seed %d)" % (
        step, time.time() - t_train, args.batch, args.lr, args.t_power, args.seed))

    # ---- write the model directory first, then the samples (a sampling failure loses nothing) ----
    from safetensors.torch import save_file
    model.eval()
    save_file(checkpoint_tensors(model), os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(MODEL_SRC, f), os.path.join(args.out, f))
    log("wrote", sorted(os.listdir(args.out)))

    try:  # the reference must load the directory as written and compute the same logits
        ctx, valid, tgt = data.batch(np.random.default_rng(123), 8)
        ctx, valid, tgt = (torch.from_numpy(a).to(device) for a in (ctx, valid, tgt))
        with torch.no_grad():
            want = forward(model, ctx, valid, tgt, None, None, C)
            reloaded = DiffusionGemmaForBlockDiffusion.from_pretrained(args.out, config=hf_config(cfg),
                                                                       dtype=torch.bfloat16).to(device).eval()
            set_experts(reloaded, experts_impl)  # the same kernels, so the same bits
            got = forward(reloaded, ctx, valid, tgt, None, None, C)
        mine = dict(model.named_buffers())
        odd = ["%s %s/%s" % (n, b.dtype, mine[n].dtype) for n, b in reloaded.named_buffers()
               if n in mine and "vision" not in n and b.dtype != mine[n].dtype]
        log("reload check: max |logit difference| %.3g (expect 0), argmax agreement %.4f%s" % (
            float((got - want).abs().max()), float((got.argmax(-1) == want.argmax(-1)).float().mean()),
            "; buffer dtypes differ (reloaded/trained): %s" % odd[:4] if odd else ""))
        del reloaded
    except Exception as e:  # noqa: BLE001
        log("reload check failed:", repr(e))

    try:
        sample_answers(model, enc, [
            chat_prompt("Write a Python function that reverses a string."),
            chat_prompt("Write a Python function that returns the largest of three numbers."),
            chat_prompt("Write a Python function that counts the words in a sentence."),
            chat_prompt("Write a Python function that checks whether a number is even."),
            chat_prompt("Write a Python function that sorts a list."),
            chat_prompt("Write a Python function `parse_header(line)`. Split an HTTP header line into name and value."),
            chat_prompt("What does `os.path.join` do?"),
        ], gen_cfg, device, log)
    except Exception as e:  # noqa: BLE001 - the samples are informative only
        log("sampling failed (the model files are written):", repr(e))
    log("total %.0fs" % (time.time() - t_start))


if __name__ == "__main__":
    main()
