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
set -euo pipefail
build="${1:-build}"
out="$build/embedded-model"
here="$(cd "$(dirname "$0")/.." && pwd)"
tiny="$here/models/tiny-code"
rm -rf "$out"
mkdir -p "$out"
if [[ -f "$tiny/model.safetensors" ]]; then
  cp "$tiny/config.json" "$tiny/generation_config.json" "$tiny/tokenizer.json" "$tiny/tokenizer_config.json" \
     "$tiny/model.safetensors" "$out/"
  echo "embedded model (models/tiny-code, trained weights) written to $out"
  exit 0
fi
cp "$build/gemma4-tokenizer/tokenizer.json" "$build/gemma4-tokenizer/tokenizer_config.json" "$out/"
cat > "$out/config.json" <<'JSON'
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
cat > "$out/generation_config.json" <<'JSON'
{"max_new_tokens": 256, "max_denoising_steps": 8,
 "sampler_config": {"entropy_bound": 0.1, "_cls_name": "EntropyBoundSamplerConfig"},
 "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005,
 "eos_token_id": [1, 106, 50], "pad_token_id": 0, "bos_token_id": 2}
JSON
echo "embedded model (random weights; models/tiny-code has no model.safetensors yet) written to $out"
