#pragma once
// A step's input block: everything a forward pass and the step's sampler and decide read from the host,
// laid out here and nowhere else as one block of i32 words that goes up in one copy. A forward reads
// nothing else from the host, so a recorded step (Backend::capture) replays with another block of the
// same layout: the layout depends only on the items' kinds and lengths, the tables' reserved room and
// the number of denoising canvases, never on the step's values.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/kv_view.h"
#include "model/vision_tower.h"

namespace dgemma {

// An image of a prompt chunk: its soft tokens replace the embeddings of the chunk's tokens [first, first +
// soft tokens), which attend to each other as one image block (docs/IMAGES.md "The attention mask").
struct ForwardImage {
  int64_t first = 0;        // offset in the item's tokens
  VisionImageInput pixels;  // the vision tower's input
};

// One piece of work of one sequence in a batched forward pass.
struct ForwardItem {
  enum class Kind {
    kEncode,   // causal pass over tokens not yet in the cache (a prompt chunk or a committed canvas)
    kDenoise,  // bidirectional pass over a canvas at positions [kv.cached, +C); produces logits
  };
  Kind kind = Kind::kEncode;
  std::span<const int32_t> tokens;
  ItemKv kv;           // the sequence's cache; encode items write positions [kv.cached, +n) through it
  Tensor soft_embeds;  // kDenoise: [C, H] bf16 self-conditioning soft embeddings (probs·E·scale); empty at
                       // step 1
  Tensor logits;     // kDenoise: output [C, V] bf16 LM-head logits before the soft-cap (a rank: [C, V / N]);
                     // consecutive denoise items whose logits are adjacent rows of one buffer get one GEMM
  Tensor token_ids;  // i32 [n] on the backend's device, read instead of `tokens` when set
  // The cache length the attention launch plans assume when larger than kv.cached (a recorded step,
  // replayed later over longer caches, plans for the longest: AttentionBatchArgs::host_items); -1: kv.cached.
  int64_t plan_cached = -1;
  // kEncode: the images of the chunk, ascending and whole (a chunk never cuts an image block).
  std::vector<ForwardImage> images{};

  int64_t length() const {
    return token_ids.empty() ? static_cast<int64_t>(tokens.size()) : token_ids.numel();
  }
};

// The forward's part of the block: encode items' token ids (the image token as the pad id: the encoder
// embeds it as pad, its soft tokens overwrite the rows of images), every token's position, both KV groups'
// page tables and attention items, the encode items' image blocks, and the device addresses of the denoise
// items' canvases (token_ids) and self-conditioning inputs (soft_embeds), which the forward gathers on the
// device. `words` is the whole block (a step block appends its parts after the forward's).
struct ForwardInputs {
  std::vector<int32_t> words;
  int64_t total = 0;                          // tokens of all items
  std::vector<int64_t> offsets;               // item i: rows [offsets[i], offsets[i + 1]); offsets[N] = total
  int64_t ids_at = 0, positions_at = 0;       // [total] each
  int64_t tables_at = 0, table_words = 0;     // both groups' page tables, table_words reserved
  std::array<int64_t, kKvGroups> items_at{};  // [N * kAttentionItemFields] per group
  std::array<std::vector<AttentionItem>, kKvGroups> host_items;  // the items as the block holds them
  std::array<std::vector<AttentionItem>, kKvGroups> plan_items;  // as the launch plans see them (plan_cached)
  int64_t blocks_at = 0;                           // [2 * host_blocks.size()]: the encode items' image blocks
  std::vector<ImageBlock> host_blocks;             // the same on the host (AttentionBatchArgs::host_blocks)
  std::vector<int64_t> denoise;                    // indices of the denoise items, in item order
  int64_t canvas_table_at = 0, soft_table_at = 0;  // one u64 address (2 words) per denoise item; 0: none
};

// What the items are checked against: the model's config, the logits' columns (a rank: its share of
// the vocabulary) and the device the forward runs on (DiffusionGemma::forward_shape).
struct ForwardShape {
  const ModelConfig* config = nullptr;
  int64_t logits_columns = 0;
  Device device = Device::kCpu;
};

// The forward's block (table_words: room for the page tables, at least what the items' tables take;
// 0: exactly that). Encode items come first, then the denoise items, all of one length.
ForwardInputs encode_forward_inputs(const ForwardShape& shape, std::span<const ForwardItem> items,
                                    int64_t table_words = 0);

// A whole step: the forward's part, then per denoising canvas the address of the buffer its
// self-conditioning output is scattered to (0: none, an idle canvas), then the sampler's and decide's
// per-canvas arguments as the backend encodes them (Backend::encode_sampler_args / encode_decide_args).
struct StepInputs {
  ForwardInputs forward;  // forward.words: the whole block
  int64_t soft_out_at = 0;
  int64_t sampler_at = 0, decide_at = 0;
  int64_t words = 0;
};
StepInputs encode_step_inputs(const ForwardShape& shape, const Backend& backend,
                              std::span<const ForwardItem> items, int64_t table_words,
                              std::span<const Tensor> soft_out, std::span<const SamplerArgs> sampling,
                              std::span<const DecideArgs> deciding);

}  // namespace dgemma
