#!/usr/bin/env bash
# Writes the embedded default model that `make run` serves to BUILD/embedded-model.
#  - models/tiny-code with its trained weights (model.safetensors): a 7.7M-parameter DiffusionGemma
#    (6 layers, hidden 256, 8 experts, canvas 64) with its own 8,192-piece tokenizer, trained by
#    tools/tiny_model/train.py to answer small coding requests and make tool calls (tools/tiny_model/README.md).
#  - Without those weights (before the first training run is committed): a DiffusionGemma-shaped
#    model with the real 262,144-token Gemma 4 vocabulary and deterministic random weights made at
#    start-up (--load-format dummy): it exercises the whole server, but its text is gibberish.
# The Makefile serves the directory with --load-format dummy exactly when it has no model.safetensors.
# Serve the real checkpoint instead with: build/dgemma serve /path/to/diffusiongemma-26B-A4B-it
# A server may be running on the directory (make run while make test rewrites it): the files are
# written beside it and renamed in only when they differ, so an unchanged file is left alone and a
# changed one is replaced by rename (a running server keeps reading the file it opened); the directory
# itself is never removed.
set -euo pipefail
build="${1:-build}"
out="$build/embedded-model"
here="$(cd "$(dirname "$0")/.." && pwd)"
tiny="$here/models/tiny-code"
mkdir -p "$out"
new="$(mktemp -d "$build/.embedded-model.XXXXXX")"
trap 'rm -rf "$new"' EXIT

# Puts the files of $new into $out: each one that differs by rename, the same ones not at all; files
# of $out that $new does not have are removed (a switch between the two kinds of model below).
install_new() {
  local f name keep=()
  for f in "$new"/*; do keep+=("$(basename "$f")"); done
  for name in "${keep[@]}"; do
    cmp -s "$new/$name" "$out/$name" || mv -f "$new/$name" "$out/$name"
  done
  for f in "$out"/*; do
    name="$(basename "$f")"
    [[ " ${keep[*]} " == *" $name "* ]] || rm -f "$f"
  done
}

if [[ -f "$tiny/model.safetensors" ]]; then
  cp "$tiny/config.json" "$tiny/generation_config.json" "$tiny/tokenizer.json" "$tiny/tokenizer_config.json" \
     "$tiny/chat_template.jinja" "$tiny/model.safetensors" "$new/"
  install_new
  echo "embedded model (models/tiny-code, trained weights) written to $out"
  exit 0
fi
cp "$build/gemma4-tokenizer/tokenizer.json" "$build/gemma4-tokenizer/tokenizer_config.json" "$tiny/chat_template.jinja" "$new/"
cat > "$new/config.json" <<'JSON'
{
  "architectures": ["DiffusionGemmaForBlockDiffusion"],
  "model_type": "diffusion_gemma",
  "canvas_length": 64,
  "tie_word_embeddings": true,
  "eos_token_id": [1, 106],
  "dtype": "bfloat16",
  "text_config": {
    "model_type": "diffusion_gemma_text",
    "vocab_size": 262144, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "global_head_dim": 64, "num_global_key_value_heads": 1,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "sliding_window": 512, "max_position_embeddings": 8192,
    "num_experts": 8, "top_k_experts": 2, "moe_intermediate_size": 32,
    "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06, "final_logit_softcapping": 30.0,
    "use_bidirectional_attention": "vision",
    "rope_parameters": {
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
      "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}
    }
  }
}
JSON
cat > "$new/generation_config.json" <<'JSON'
{"max_new_tokens": 256, "max_denoising_steps": 8,
 "sampler_config": {"entropy_bound": 0.1, "_cls_name": "EntropyBoundSamplerConfig"},
 "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005,
 "eos_token_id": [1, 106, 50], "pad_token_id": 0, "bos_token_id": 2}
JSON
install_new
echo "embedded model (random weights; models/tiny-code has no model.safetensors yet) written to $out"
