#include "model/forward_inputs.h"

#include <algorithm>

#include "util/error.h"

namespace dgemma {
namespace {

uint64_t address_of(const Tensor& t) {
  return t.empty() ? 0 : static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.data));
}

// The device address of t (0: empty) at words[at, at + 2) as a little-endian u64, as the device reads
// the block's address tables.
void put_address(std::vector<int32_t>& words, int64_t at, const Tensor& t) {
  const uint64_t v = address_of(t);
  words.at(static_cast<size_t>(at)) = static_cast<int32_t>(static_cast<uint32_t>(v));
  words.at(static_cast<size_t>(at) + 1) = static_cast<int32_t>(static_cast<uint32_t>(v >> 32));
}

// 64 bytes: the backends' encoded structs' alignment.
int64_t aligned(int64_t words) {
  return (words + 15) / 16 * 16;
}

}  // namespace

ForwardInputs encode_forward_inputs(const ForwardShape& shape, std::span<const ForwardItem> items,
                                    int64_t table_words) {
  DG_CHECK(shape.config != nullptr);
  const ModelConfig& config = *shape.config;
  const TextConfig& t = config.text;
  ForwardInputs in;
  int64_t entries = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const ForwardItem& it = items[i];
    DG_CHECK(it.length() > 0 && (it.token_ids.empty() || it.tokens.empty()) && it.kv.cached >= 0);
    DG_CHECK(it.token_ids.empty() ||
             (it.token_ids.type == ScalarType::kI32 && it.token_ids.device == shape.device));
    if (it.kind == ForwardItem::Kind::kDenoise) {
      DG_CHECK(!it.logits.empty() && it.logits.dim(0) == it.length() &&
               it.logits.dim(1) == shape.logits_columns);
      DG_CHECK(in.denoise.empty() || it.length() == items[static_cast<size_t>(in.denoise.front())].length());
      DG_CHECK(it.soft_embeds.empty() ||
               (it.soft_embeds.type == ScalarType::kBF16 && it.soft_embeds.device == shape.device &&
                it.soft_embeds.numel() == it.length() * t.hidden_size));
      in.denoise.push_back(static_cast<int64_t>(i));
    } else {
      DG_CHECK(in.denoise.empty());  // encode items first, then the denoise items
      int64_t end = 0;
      for (const ForwardImage& im : it.images) {
        const int64_t n = im.pixels.grid_h * im.pixels.grid_w /
                          (int64_t{config.vision.pooling_kernel_size} * config.vision.pooling_kernel_size);
        DG_CHECK(config.has_vision && n > 0 && im.first >= end && im.first + n <= it.length() &&
                 !it.tokens.empty());
        for (int64_t j = im.first; j < im.first + n; ++j)
          DG_CHECK(it.tokens[static_cast<size_t>(j)] == config.image_token_id);
        in.host_blocks.push_back({static_cast<int32_t>(im.first), static_cast<int32_t>(im.first + n)});
        end = im.first + n;
      }
    }
    DG_CHECK(it.kind == ForwardItem::Kind::kEncode || it.images.empty());
    for (const auto& tb : it.kv.tables) entries += static_cast<int64_t>(tb.size());
    in.offsets.push_back(in.total);
    in.total += it.length();
  }
  in.offsets.push_back(in.total);
  DG_CHECK(in.total <= INT32_MAX);
  DG_CHECK(table_words == 0 || table_words >= entries);
  in.table_words = std::max<int64_t>(table_words > 0 ? table_words : entries, 1);
  const int64_t n = static_cast<int64_t>(items.size()), item_words = n * kAttentionItemFields;
  // Layout: ids, positions, tables, both groups' items, the image blocks, then the u64 address tables
  // (8-byte aligned).
  in.ids_at = 0;
  in.positions_at = in.total;
  in.tables_at = 2 * in.total;
  in.items_at[0] = in.tables_at + in.table_words;
  in.items_at[1] = in.items_at[0] + item_words;
  in.blocks_at = in.items_at[1] + item_words;
  const int64_t nd = static_cast<int64_t>(in.denoise.size());
  in.canvas_table_at = (in.blocks_at + 2 * static_cast<int64_t>(in.host_blocks.size()) + 1) / 2 * 2;
  in.soft_table_at = in.canvas_table_at + 2 * nd;
  in.words.assign(static_cast<size_t>(in.soft_table_at + 2 * nd), 0);
  int32_t* w = in.words.data();

  // Token ids (device canvases are gathered over theirs later) and absolute positions: an item's
  // tokens start right after what its sequence has in the cache.
  std::vector<std::array<std::pair<int64_t, int64_t>, kKvGroups>> ranges(items.size());
  int64_t at = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const ForwardItem& it = items[i];
    const int64_t o = in.offsets[i];
    // The encoder embeds every image token as the pad id (its image's soft tokens, if any, overwrite it).
    std::transform(it.tokens.begin(), it.tokens.end(), w + in.ids_at + o, [&](int32_t id) {
      return it.kind == ForwardItem::Kind::kEncode && id == config.image_token_id ? t.pad_token_id : id;
    });
    for (int64_t j = 0; j < it.length(); ++j)
      w[in.positions_at + o + j] = static_cast<int32_t>(it.kv.cached + j);
    for (int g = 0; g < kKvGroups; ++g) {
      const auto& tb = it.kv.tables[g];
      std::copy(tb.begin(), tb.end(), w + in.tables_at + at);
      ranges[i][g] = {at, at + static_cast<int64_t>(tb.size())};
      at += static_cast<int64_t>(tb.size());
    }
  }
  std::copy_n(reinterpret_cast<const int32_t*>(in.host_blocks.data()), 2 * in.host_blocks.size(),
              w + in.blocks_at);
  // Both KV groups' attention items; the launch plans see plan_cached where it is larger.
  for (int g = 0; g < kKvGroups; ++g) {
    const bool sliding = g == static_cast<int>(KvGroup::kSliding);
    // Which layers widen their mask over the image blocks, and whether the window still applies.
    const bool blocks =
        config.image_mask == ImageMask::kGenerate || (config.image_mask == ImageMask::kGemma4 && sliding);
    const bool windowed = config.image_mask == ImageMask::kGemma4;
    int32_t next_block = 0;
    // Visible cache: every cached token (full layers) or the most recent window-1 (sliding layers).
    auto visible_of = [&](int64_t cached) {
      return sliding ? std::min<int64_t>(cached, sliding_keep(config)) : cached;
    };
    in.plan_items[g].reserve(items.size());
    in.host_items[g].reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const ForwardItem& it = items[i];
      const int64_t cached = it.kv.cached, visible = visible_of(cached);
      DG_CHECK(visible == 0 || ranges[i][g].second > ranges[i][g].first);
      DG_CHECK(cached <= INT32_MAX && it.plan_cached <= INT32_MAX);
      AttentionItem a;
      a.q_first = static_cast<int32_t>(in.offsets[i]);
      a.q_len = static_cast<int32_t>(in.offsets[i + 1] - in.offsets[i]);
      a.cache_first = static_cast<int32_t>(cached - visible);
      a.cache_len = static_cast<int32_t>(visible);
      a.table_first = static_cast<int32_t>(ranges[i][g].first);
      a.table_len = static_cast<int32_t>(ranges[i][g].second - ranges[i][g].first);
      a.causal = it.kind == ForwardItem::Kind::kEncode ? 1 : 0;
      a.window = (a.causal && sliding) ? t.sliding_window : 0;
      a.blocks_first = next_block;
      a.blocks_len = blocks ? static_cast<int32_t>(it.images.size()) : 0;
      a.blocks_windowed = a.blocks_len > 0 && windowed ? 1 : 0;
      next_block += static_cast<int32_t>(it.images.size());
      std::copy_n(reinterpret_cast<const int32_t*>(&a), kAttentionItemFields,
                  w + in.items_at[g] + i * kAttentionItemFields);
      in.host_items[g].push_back(a);
      if (it.plan_cached > cached) a.cache_len = static_cast<int32_t>(visible_of(it.plan_cached));
      in.plan_items[g].push_back(a);
    }
  }
  for (int64_t k = 0; k < nd; ++k) {
    const ForwardItem& it = items[static_cast<size_t>(in.denoise[static_cast<size_t>(k)])];
    // The device copies them in 16-byte words (Backend::gather_blocks).
    DG_CHECK(address_of(it.token_ids) % 16 == 0 && address_of(it.soft_embeds) % 16 == 0);
    put_address(in.words, in.canvas_table_at + 2 * k, it.token_ids);
    put_address(in.words, in.soft_table_at + 2 * k, it.soft_embeds);
  }
  return in;
}

StepInputs encode_step_inputs(const ForwardShape& shape, const Backend& backend,
                              std::span<const ForwardItem> items, int64_t table_words,
                              std::span<const Tensor> soft_out, std::span<const SamplerArgs> sampling,
                              std::span<const DecideArgs> deciding) {
  const int n = static_cast<int>(soft_out.size());
  DG_CHECK(sampling.size() == soft_out.size() && deciding.size() == soft_out.size());
  StepInputs s;
  s.forward = encode_forward_inputs(shape, items, table_words);
  DG_CHECK(static_cast<int64_t>(s.forward.denoise.size()) == n);
  std::vector<int32_t>& words = s.forward.words;
  s.soft_out_at = aligned(static_cast<int64_t>(words.size()));
  s.sampler_at = aligned(s.soft_out_at + 2 * n);
  s.decide_at = aligned(s.sampler_at + static_cast<int64_t>((backend.encoded_sampler_bytes(n) + 3) / 4));
  s.words = aligned(s.decide_at + static_cast<int64_t>((backend.encoded_decide_bytes(n) + 3) / 4));
  words.resize(static_cast<size_t>(s.words), 0);
  for (int i = 0; i < n; ++i) put_address(words, s.soft_out_at + 2 * i, soft_out[static_cast<size_t>(i)]);
  if (n > 0) {
    backend.encode_sampler_args(sampling, words.data() + s.sampler_at);
    backend.encode_decide_args(deciding, words.data() + s.decide_at);
  }
  return s;
}

}  // namespace dgemma
