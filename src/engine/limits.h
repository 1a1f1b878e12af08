#pragma once
// The one set of bounds on serving parameters. The API (request fields), the command line (serve and
// generate flags) and the engine (its resolve and factory checks) all test against these constants, so a
// value one layer accepts is never refused by the next (docs/API.md documents the same numbers).
#include <cstdint>
#include <string>
#include <string_view>

namespace dgemma::limits {

// Denoising steps per canvas (request max_denoising_steps, --diffusion-config, generation config).
// The checkpoint uses 48; far more steps only burn time on a canvas that has long converged.
inline constexpr int kMaxDenoisingSteps = 1024;

// Requests running at once (--max-num-seqs): each holds a KV cache slot for max_model_len tokens.
inline constexpr int kMaxNumSeqs = 1024;

// Requests that may wait beyond --max-num-seqs (--max-queue).
inline constexpr int kMaxQueue = 1000000;

// Tokens per canvas (--diffusion-config canvas_length, generate --canvas-length). The backends' decide
// op sorts one canvas in a CUDA block's shared memory (backend/decide_rules.h kMaxDecideCanvas) and the
// per-canvas buffers are [C, vocab]; 4096 keeps both comfortable.
inline constexpr int kMaxCanvasLength = 4096;

// OpenAI temperature: it scales the checkpoint's schedule (t_min, t_max); 0 is greedy.
inline constexpr double kMinTemperature = 0.0;
inline constexpr double kMaxTemperature = 2.0;

// Per-request overrides of the sampler settings (the generation config's own values pass the same checks).
inline constexpr double kMaxEntropyBound = 1e6;         // > 0
inline constexpr double kMaxScheduleTemperature = 1e4;  // t_min, t_max: >= 0
inline constexpr int kMaxStabilityThreshold = 64;       // >= 0
inline constexpr double kMaxConfidenceThreshold = 1e6;  // > 0

// Largest prompt chunk the encoder takes in one pass with chunked prefill (the memory plan's and the
// scheduler's; engine/memory_plan.h prefill_chunk_tokens).
inline constexpr int64_t kMaxPrefillChunk = 2048;

// Alternatives per committed token (chat top_logprobs; completions logprobs is at most 5), as vLLM's
// default --max-logprobs; the backends keep each row's list in registers.
inline constexpr int kMaxTopLogprobs = 20;

// The context-overflow message in vLLM's wording (clients pattern-match it): `prompt_tokens` of the
// `prompt_word` ("messages" or "prompt") and `max_tokens` of completion against max_model_len. The
// engine's submit and the API's error both write it with this.
std::string context_length_message(int64_t max_model_len, int64_t prompt_tokens, int64_t max_tokens,
                                   std::string_view prompt_word = "messages");

}  // namespace dgemma::limits
