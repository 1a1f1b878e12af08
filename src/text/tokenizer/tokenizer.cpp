// Encoding and decoding, reproducing HF `tokenizers` (0.2x) for BPE tokenizer.json files:
//   1. added tokens are cut out of the raw text (leftmost-longest; special ones only if allowed),
//   2. the rest is normalised, normalized=true added tokens are cut out of that,
//   3. the pre-tokenizer splits it into words, 4. each word goes through byte-fallback BPE.
// BPE applies, at every step, the lowest-rank merge (leftmost on ties) — with a heap over a linked
// list of symbols, so a 1 MB word costs O(n log n), not O(n^2).
#include <algorithm>
#include <deque>
#include <functional>
#include <queue>
#include <unordered_map>

#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/tokenizer_impl.h"
#include "text/tokenizer/utf8.h"
#include "util/error.h"
#include "util/json.h"
#include "util/mmap_file.h"

namespace dgemma {

using tokenizer_detail::Impl;
using tokenizer_detail::SplitBehavior;

namespace {

constexpr size_t kMaxEncodeBytes = size_t{1} << 30;
constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581 "▁"
// Words up to this size are cached within one encode() call (repeated words are common in text;
// the cache holds views of the call's text and offsets into its output, so it costs no copies).
constexpr size_t kMaxCachedWord = size_t{1} << 16;

// Start of the UTF-8 character that ends right before byte `pos` of `s`.
size_t prev_char_start(std::string_view s, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return start;
}

char32_t last_char(std::string_view s) {
  return s.empty() ? 0 : utf8::decode(s, prev_char_start(s, s.size())).cp;
}

// One encode() call: output, scratch buffers and the word cache.
class Encoder {
 public:
  Encoder(const Impl& impl, bool allow_special, std::vector<int32_t>& out)
      : impl_(impl), allow_special_(allow_special), out_(out) {}

  void run(std::string_view text) {
    split_added(text, impl_.raw_trie, [&](std::string_view seg) { encode_raw_segment(seg); });
  }

 private:
  // Calls on_text for the text between matches of `trie` and appends the matched tokens' ids.
  template <typename F>
  void split_added(std::string_view text, const tokenizer_detail::TokenTrie& trie, F&& on_text) {
    size_t from = 0, seg_start = 0, s = 0, e = 0;
    int32_t idx = -1;
    while (from < text.size() && trie.find(text, from, s, e, idx)) {
      const auto& tok = impl_.added[idx];
      from = e;
      // A special token the caller did not allow stays ordinary text; matching resumes after it
      // (HF encode_special_tokens=True).
      if (tok.special && !allow_special_) continue;
      if (s > seg_start) on_text(text.substr(seg_start, s - seg_start));
      out_.push_back(tok.id);
      seg_start = e;
    }
    if (seg_start < text.size()) on_text(text.substr(seg_start));
  }

  void encode_raw_segment(std::string_view seg) {
    // Kept alive for the whole call: the word cache holds views into it.
    const std::string& normalized = normalized_.emplace_back(tokenizer_detail::normalize(impl_, seg));
    if (impl_.norm_trie.empty()) {
      pre_tokenize(normalized);
    } else {
      split_added(normalized, impl_.norm_trie, [&](std::string_view sub) { pre_tokenize(sub); });
    }
  }

  void pre_tokenize(std::string_view text) {
    if (impl_.pre_tokenizer.empty()) {
      encode_word_split(text);
      return;
    }
    std::vector<std::string_view> words{text}, next;
    for (const auto& step : impl_.pre_tokenizer) {
      next.clear();
      for (std::string_view w : words) split_step(w, step, next);
      words.swap(next);
    }
    for (std::string_view w : words) encode_word_split(w);
  }

  // HF pre_tokenizers::Split with a literal pattern.
  static void split_step(std::string_view w, const tokenizer_detail::SplitStep& step,
                         std::vector<std::string_view>& out) {
    struct Range {
      size_t start, end;
      bool is_match;
    };
    std::vector<Range> parts;
    size_t prev = 0;
    for (size_t hit = w.find(step.pattern); hit != std::string_view::npos; hit = w.find(step.pattern, prev)) {
      if (hit != prev) parts.push_back({prev, hit, false});
      parts.push_back({hit, hit + step.pattern.size(), true});
      prev = hit + step.pattern.size();
    }
    if (prev != w.size() || parts.empty()) parts.push_back({prev, w.size(), false});
    if (step.invert)
      for (auto& p : parts) p.is_match = !p.is_match;

    std::vector<Range> res;
    bool previous_match = false;
    switch (step.behavior) {
      case SplitBehavior::kIsolated:
        res = parts;
        break;
      case SplitBehavior::kRemoved:
        for (const auto& p : parts)
          if (!p.is_match) res.push_back(p);
        break;
      case SplitBehavior::kMergedWithPrevious:
        for (const auto& p : parts) {
          if (p.is_match && !previous_match && !res.empty()) res.back().end = p.end;
          else res.push_back(p);
          previous_match = p.is_match;
        }
        break;
      case SplitBehavior::kMergedWithNext:
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
          if (it->is_match && !previous_match && !res.empty()) res.back().start = it->start;
          else res.push_back(*it);
          previous_match = it->is_match;
        }
        std::reverse(res.begin(), res.end());
        break;
      case SplitBehavior::kContiguous:
        for (const auto& p : parts) {
          if (p.is_match == previous_match && !res.empty()) res.back().end = p.end;
          else res.push_back(p);
          previous_match = p.is_match;
        }
        break;
    }
    for (const auto& r : res)
      if (r.end > r.start) out.push_back(w.substr(r.start, r.end - r.start));
  }

  // The last character of the piece that character `c` becomes as an initial BPE symbol.
  char32_t symbol_last_char(std::string_view c) const {
    const utf8::Decoded d = utf8::decode(c, 0);
    if (d.cp < 0x10000 ? impl_.bmp_ids[d.cp] >= 0 : impl_.astral_ids.count(d.cp) > 0) return d.cp;
    if (impl_.byte_fallback) {
      bool all = true;
      for (char b : c) all = all && impl_.byte_ids[static_cast<unsigned char>(b)] >= 0;
      if (all) return last_char(impl_.pieces[impl_.byte_ids[static_cast<unsigned char>(c.back())]]);
    }
    return impl_.unk_id >= 0 ? last_char(impl_.pieces[impl_.unk_id]) : 0;
  }

  // Cuts a word right before each "▁" that no merge can reach across (see tokenizer_impl.h).
  void encode_word_split(std::string_view word) {
    if (!impl_.split_before_meta) {
      encode_word(word);
      return;
    }
    size_t start = 0;
    for (size_t pos = word.find(kMeta, 1); pos != std::string_view::npos; pos = word.find(kMeta, pos + kMeta.size())) {
      const size_t c = prev_char_start(word, pos);
      if (word.substr(c, pos - c) == kMeta) continue;
      if (impl_.chars_before_meta.count(symbol_last_char(word.substr(c, pos - c)))) continue;
      if (pos > start) encode_word(word.substr(start, pos - start));
      start = pos;
    }
    encode_word(word.substr(start));
  }

  void encode_word(std::string_view word) {
    if (word.empty()) return;
    if (impl_.ignore_merges) {
      if (const int32_t id = impl_.vocab.find(word); id >= 0) {
        out_.push_back(id);
        return;
      }
    }
    const bool cacheable = word.size() <= kMaxCachedWord;
    if (cacheable) {
      if (auto it = cache_.find(word); it != cache_.end()) {
        const auto [off, len] = it->second;
        for (size_t k = 0; k < len; ++k) {
          const int32_t id = out_[off + k];  // copy first: push_back may reallocate
          out_.push_back(id);
        }
        return;
      }
    }
    const size_t before = out_.size();
    bpe(word);
    if (cacheable && cache_.size() < 100000)
      cache_.emplace(word, std::pair<size_t, size_t>{before, out_.size() - before});
  }

  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  // A queued merge candidate, packed as rank << 32 | position so the min-heap orders by lowest rank,
  // then leftmost, with plain integer compares. A rank names exactly one pair, so "the pair at this
  // position still has this rank" is the whole staleness check (HF compares the merged id: same).
  static uint64_t candidate(int32_t rank, int32_t pos) {
    return (uint64_t{static_cast<uint32_t>(rank)} << 32) | static_cast<uint32_t>(pos);
  }

  void add_symbol(int32_t id) {
    const auto n = static_cast<int32_t>(syms_.size());
    syms_.push_back({id, n - 1, n + 1, true});
  }

  void push_candidate(int32_t left) {
    const int32_t right = syms_[left].next;
    if (right >= static_cast<int32_t>(syms_.size())) return;
    if (const auto* m = impl_.merges.find(syms_[left].id, syms_[right].id)) {
      heap_.push_back(candidate(m->rank, left));
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>{});
    }
  }

  void bpe(std::string_view word) {
    syms_.clear();
    heap_.clear();
    // Initial symbols: one per character; byte-fallback pieces for characters not in the vocab;
    // otherwise <unk> (consecutive unknowns fused when fuse_unk). As in HF, a pending <unk> is only
    // emitted when a known character or the end of the word follows.
    int32_t pending_unk = 0;
    for (size_t i = 0; i < word.size();) {
      const utf8::Decoded d = utf8::decode(word, i);
      const std::string_view ch = word.substr(i, d.len);
      i += d.len;
      int32_t id = -1;
      if (d.cp < 0x10000) {
        id = impl_.bmp_ids[d.cp];
      } else if (auto it = impl_.astral_ids.find(d.cp); it != impl_.astral_ids.end()) {
        id = it->second;
      }
      if (id >= 0) {
        for (; pending_unk > 0; --pending_unk) add_symbol(impl_.unk_id);
        add_symbol(id);
        continue;
      }
      if (impl_.byte_fallback) {
        bool all = true;
        for (char b : ch) all = all && impl_.byte_ids[static_cast<unsigned char>(b)] >= 0;
        if (all) {
          for (char b : ch) add_symbol(impl_.byte_ids[static_cast<unsigned char>(b)]);
          continue;
        }
      }
      if (impl_.unk_id < 0)
        fail_arg("{}: the text contains a character the tokenizer cannot represent (no unk token)", impl_.what);
      if (pending_unk == 0 || !impl_.fuse_unk) ++pending_unk;
    }
    for (; pending_unk > 0; --pending_unk) add_symbol(impl_.unk_id);

    const auto n = static_cast<int32_t>(syms_.size());
    for (int32_t i = 0; i + 1 < n; ++i)
      if (const auto* m = impl_.merges.find(syms_[i].id, syms_[i + 1].id)) heap_.push_back(candidate(m->rank, i));
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>{});

    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
      const uint64_t top = heap_.back();
      heap_.pop_back();
      const auto rank = static_cast<int32_t>(top >> 32);
      const auto pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
      Symbol& left = syms_[pos];
      if (!left.alive || left.next >= n) continue;
      const int32_t right_pos = left.next;
      // Stale entry: the pair at this position has changed since it was queued.
      const auto* m = impl_.merges.find(left.id, syms_[right_pos].id);
      if (!m || m->rank != rank) continue;
      left.id = m->new_id;
      syms_[right_pos].alive = false;
      left.next = syms_[right_pos].next;
      if (left.next < n) syms_[left.next].prev = pos;
      if (left.prev >= 0) push_candidate(left.prev);
      push_candidate(pos);
    }
    for (int32_t i = 0; i < n; i = syms_[i].next) out_.push_back(syms_[i].id);
  }

  const Impl& impl_;
  const bool allow_special_;
  std::vector<int32_t>& out_;
  std::vector<Symbol> syms_;
  std::vector<uint64_t> heap_;
  std::deque<std::string> normalized_;
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> cache_;  // word -> ids in out_
};

}  // namespace

tokenizer_detail::Impl& tokenizer_detail::TestAccess::impl(Tokenizer& tok) { return *tok.impl_; }

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path) {
  MappedFile file(path);
  return from_json_text(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), path);
}

std::unique_ptr<Tokenizer> Tokenizer::from_json_text(std::string_view json_text, std::string_view what) {
  auto impl = std::make_unique<Impl>();
  impl->what = std::string(what);
  tokenizer_detail::load_impl(*impl, json_text);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  if (text.size() > kMaxEncodeBytes) fail_arg("text too long to tokenize ({} bytes)", text.size());
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::sanitize(text);
    text = repaired;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  Encoder(*impl_, allow_special, out).run(text);
  return out;
}

void Tokenizer::decode_append(std::span<const int32_t> ids, bool skip_special, std::string& pending_bytes,
                              std::string& out) const {
  const Impl& im = *impl_;
  for (int32_t id : ids)
    if (id < 0 || id >= im.vocab_size) fail_arg("token id {} is out of range [0, {})", id, im.vocab_size);
  for (int32_t id : ids) {
    // Like HF, holes and skipped special tokens are dropped before the decoder runs, so they do
    // not end a run of byte pieces.
    if (!im.present[id] || (skip_special && im.special[id])) continue;
    if (im.byte_value[id] >= 0) {
      pending_bytes.push_back(static_cast<char>(im.byte_value[id]));
      continue;
    }
    if (!pending_bytes.empty()) flush_byte_run(pending_bytes, out);
    out += im.texts[id];
  }
}

void Tokenizer::flush_byte_run(std::string& pending_bytes, std::string& out) {
  if (utf8::is_valid(pending_bytes)) {
    out += pending_bytes;
  } else {
    // HF ByteFallback: a run that is not valid UTF-8 becomes one U+FFFD per byte.
    for (size_t i = 0; i < pending_bytes.size(); ++i) out += utf8::kReplacement;
  }
  pending_bytes.clear();
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out, pending;
  decode_append(ids, skip_special, pending, out);
  flush_byte_run(pending, out);
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (auto it = impl_->added_ids.find(key); it != impl_->added_ids.end()) return it->second;
  if (const int32_t id = impl_->vocab.find(key); id >= 0) return id;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) return {};
  return impl_->pieces[id];
}

std::optional<uint8_t> Tokenizer::byte_value(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size || impl_->byte_value[id] < 0) return std::nullopt;
  return static_cast<uint8_t>(impl_->byte_value[id]);
}

int Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->vocab_size && impl_->special[id];
}

}  // namespace dgemma
