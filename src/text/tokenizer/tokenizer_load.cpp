// tokenizer.json -> tokenizer_detail::Impl. Accepts exactly the subset of the HF format whose
// behaviour tokenizer.cpp reproduces; everything else is a clear Error(kInvalidFile), because a
// tokenizer that silently differs from the reference corrupts every prompt.
#include <algorithm>
#include <string>
#include <string_view>

#include "text/tokenizer/tokenizer_impl.h"
#include "text/tokenizer/utf8.h"
#include "util/error.h"
#include "util/json.h"

namespace dgemma::tokenizer_detail {

// ---- MergeMap ---------------------------------------------------------------------------------

void MergeMap::reserve(size_t n) {
  size_t cap = 16;
  int bits = 4;
  while (cap < n * 2) {
    cap <<= 1;
    ++bits;
  }
  keys_.assign(cap, kEmpty);
  vals_.assign(cap, Merge{0, 0});
  mask_ = cap - 1;
  shift_ = 64 - bits;
  size_ = 0;
}

bool MergeMap::insert(int32_t a, int32_t b, Merge m) {
  if ((size_ + 1) * 2 > keys_.size()) {
    // Grow: rehash everything into a table twice the size.
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<Merge> old_vals = std::move(vals_);
    reserve(std::max<size_t>(old_keys.size(), 8));
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty)
        insert(static_cast<int32_t>(old_keys[i] >> 32), static_cast<int32_t>(old_keys[i] & 0xFFFFFFFFu),
               old_vals[i]);
  }
  const uint64_t key = pack(a, b);
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    if (keys_[i] == key) {
      vals_[i] = m;
      return false;
    }
    if (keys_[i] == kEmpty) {
      keys_[i] = key;
      vals_[i] = m;
      ++size_;
      return true;
    }
  }
}

// ---- PieceIndex -------------------------------------------------------------------------------

void PieceIndex::reserve(size_t n) {
  entries_.reserve(n);
  size_t slots = 16;
  while (slots < n * 2) slots <<= 1;
  if (slots > slots_.size()) rehash(slots);
}

void PieceIndex::rehash(size_t slots) {
  slots_.assign(slots, 0);
  const size_t mask = slots - 1;
  for (size_t e = 0; e < entries_.size(); ++e) {
    size_t i = std::hash<std::string_view>{}(entries_[e].first) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = static_cast<uint32_t>(e + 1);
  }
}

bool PieceIndex::insert(std::string piece, int32_t id) {
  if (find(piece) >= 0) return false;
  if ((entries_.size() + 1) * 2 > slots_.size()) {
    entries_.emplace_back(std::move(piece), id);
    rehash(std::max<size_t>(16, slots_.size() * 2));
    return true;
  }
  const size_t mask = slots_.size() - 1;
  size_t i = std::hash<std::string_view>{}(piece) & mask;
  while (slots_[i] != 0) i = (i + 1) & mask;
  entries_.emplace_back(std::move(piece), id);
  slots_[i] = static_cast<uint32_t>(entries_.size());
  return true;
}

int32_t PieceIndex::find(std::string_view piece) const {
  if (slots_.empty()) return -1;
  const size_t mask = slots_.size() - 1;
  for (size_t i = std::hash<std::string_view>{}(piece) & mask;; i = (i + 1) & mask) {
    const uint32_t e = slots_[i];
    if (e == 0) return -1;
    if (entries_[e - 1].first == piece) return entries_[e - 1].second;
  }
}

// ---- TokenTrie --------------------------------------------------------------------------------

int32_t TokenTrie::child(int32_t node, unsigned char b) const {
  const auto& next = nodes_[node].next;
  auto it = std::lower_bound(next.begin(), next.end(), b,
                             [](const std::pair<unsigned char, int32_t>& e, unsigned char v) { return e.first < v; });
  return it != next.end() && it->first == b ? it->second : -1;
}

void TokenTrie::add(std::string_view s, int32_t value) {
  DG_CHECK(!s.empty());
  auto first = static_cast<unsigned char>(s[0]);
  if (root_[first] < 0) {
    root_[first] = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  int32_t node = root_[first];
  for (size_t i = 1; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    int32_t c = child(node, b);
    if (c < 0) {
      c = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& next = nodes_[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), b,
                                 [](const std::pair<unsigned char, int32_t>& e, unsigned char v) { return e.first < v; });
      next.insert(it, {b, c});
    }
    node = c;
  }
  nodes_[node].value = value;
}

bool TokenTrie::find(std::string_view text, size_t from, size_t& start, size_t& end, int32_t& value) const {
  if (nodes_.empty()) return false;
  for (size_t pos = from; pos < text.size(); ++pos) {
    int32_t node = root_[static_cast<unsigned char>(text[pos])];
    if (node < 0) continue;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t i = pos + 1;; ++i) {
      if (nodes_[node].value >= 0) {
        best = nodes_[node].value;
        best_end = i;
      }
      if (i >= text.size()) break;
      node = child(node, static_cast<unsigned char>(text[i]));
      if (node < 0) break;
    }
    if (best >= 0) {
      start = pos;
      end = best_end;
      value = best;
      return true;
    }
  }
  return false;
}

// ---- string helpers ----------------------------------------------------------------------------

std::string replace_all(std::string_view s, std::string_view pattern, std::string_view content) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t hit = s.find(pattern, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(content);
    pos = hit + pattern.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string normalize(const Impl& impl, std::string_view segment) {
  std::string s(segment);
  for (const auto& step : impl.normalizer) {
    if (step.kind == NormalizerStep::Kind::kReplace) {
      if (s.find(step.pattern) != std::string::npos) s = replace_all(s, step.pattern, step.content);
    } else if (!s.empty()) {
      s.insert(0, step.content);
    }
  }
  return s;
}

// ---- JSON helpers -----------------------------------------------------------------------------

namespace {

[[noreturn]] void unsupported(const Impl& impl, std::string_view detail) {
  fail_file("{}: unsupported tokenizer.json: {} (dgemma supports BPE tokenizers of the "
            "SentencePiece/Gemma family)",
            impl.what, detail);
}

const Json& member(const Impl& impl, const Json& obj, const char* key, const char* where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail_file("{}: {} has no \"{}\"", impl.what, where, key);
  return *it;
}

std::string string_member(const Impl& impl, const Json& obj, const char* key, const char* where) {
  const Json& v = member(impl, obj, key, where);
  if (!v.is_string()) fail_file("{}: {}.{} must be a string", impl.what, where, key);
  return v.get<std::string>();
}

bool bool_member(const Impl& impl, const Json& obj, const char* key, const char* where, bool dflt) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) fail_file("{}: {}.{} must be a boolean", impl.what, where, key);
  return it->get<bool>();
}

std::string type_of(const Impl& impl, const Json& obj, const char* where) {
  if (!obj.is_object()) fail_file("{}: {} must be an object or null", impl.what, where);
  return string_member(impl, obj, "type", where);
}

// {"String": "..."} -> the literal; {"Regex": ...} is not supported.
std::string string_pattern(const Impl& impl, const Json& obj, const char* where) {
  const Json& p = member(impl, obj, "pattern", where);
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    std::string s = p["String"].get<std::string>();
    if (s.empty()) unsupported(impl, fmt::format("{} with an empty pattern", where));
    return s;
  }
  if (p.is_object() && p.contains("Regex")) unsupported(impl, fmt::format("{} with a Regex pattern", where));
  fail_file("{}: {}.pattern must be {{\"String\": ...}}", impl.what, where);
}

void load_normalizer(Impl& impl, const Json& j) {
  if (j.is_null()) return;
  const std::string type = type_of(impl, j, "normalizer");
  if (type == "Sequence") {
    const Json& list = member(impl, j, "normalizers", "normalizer Sequence");
    if (!list.is_array()) fail_file("{}: normalizer Sequence.normalizers must be an array", impl.what);
    for (const Json& n : list) load_normalizer(impl, n);
  } else if (type == "Replace") {
    NormalizerStep step{NormalizerStep::Kind::kReplace, string_pattern(impl, j, "normalizer Replace"),
                        string_member(impl, j, "content", "normalizer Replace")};
    impl.normalizer.push_back(std::move(step));
  } else if (type == "Prepend") {
    impl.normalizer.push_back({NormalizerStep::Kind::kPrepend, {}, string_member(impl, j, "prepend", "normalizer Prepend")});
  } else {
    unsupported(impl, fmt::format("normalizer type \"{}\"", type));
  }
}

void load_pre_tokenizer(Impl& impl, const Json& j) {
  if (j.is_null()) return;
  const std::string type = type_of(impl, j, "pre_tokenizer");
  if (type == "Sequence") {
    const Json& list = member(impl, j, "pretokenizers", "pre_tokenizer Sequence");
    if (!list.is_array()) fail_file("{}: pre_tokenizer Sequence.pretokenizers must be an array", impl.what);
    for (const Json& p : list) load_pre_tokenizer(impl, p);
  } else if (type == "Split") {
    const std::string b = string_member(impl, j, "behavior", "pre_tokenizer Split");
    SplitBehavior behavior;
    if (b == "Removed") behavior = SplitBehavior::kRemoved;
    else if (b == "Isolated") behavior = SplitBehavior::kIsolated;
    else if (b == "MergedWithPrevious") behavior = SplitBehavior::kMergedWithPrevious;
    else if (b == "MergedWithNext") behavior = SplitBehavior::kMergedWithNext;
    else if (b == "Contiguous") behavior = SplitBehavior::kContiguous;
    else fail_file("{}: unknown pre_tokenizer Split behavior \"{}\"", impl.what, b);
    impl.pre_tokenizer.push_back({string_pattern(impl, j, "pre_tokenizer Split"), behavior,
                                  bool_member(impl, j, "invert", "pre_tokenizer Split", false)});
  } else {
    unsupported(impl, fmt::format("pre_tokenizer type \"{}\"", type));
  }
}

// Flattens the decoder into: Replace* -> ByteFallback? -> Fuse?, the only shape whose output is a
// per-piece concatenation (which streaming relies on).
void load_decoder(Impl& impl, const Json& j, bool& fused) {
  const std::string type = type_of(impl, j, "decoder");
  if (type == "Sequence") {
    const Json& list = member(impl, j, "decoders", "decoder Sequence");
    if (!list.is_array()) fail_file("{}: decoder Sequence.decoders must be an array", impl.what);
    for (const Json& d : list) load_decoder(impl, d, fused);
    return;
  }
  if (fused) unsupported(impl, fmt::format("decoder \"{}\" after Fuse", type));
  if (type == "Replace") {
    if (impl.decoder_byte_fallback) unsupported(impl, "decoder Replace after ByteFallback");
    impl.decoder_replacements.emplace_back(string_pattern(impl, j, "decoder Replace"),
                                           string_member(impl, j, "content", "decoder Replace"));
  } else if (type == "ByteFallback") {
    if (impl.decoder_byte_fallback) unsupported(impl, "two ByteFallback decoders");
    impl.decoder_byte_fallback = true;
  } else if (type == "Fuse") {
    fused = true;
  } else {
    unsupported(impl, fmt::format("decoder type \"{}\"", type));
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// HF ByteFallback: a 6-byte "<0x..>" whose two middle characters parse as a u8 in base 16 (Rust's
// u8::from_str_radix, which also accepts a leading '+').
int byte_piece_value(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  if (t[3] == '+' && lo >= 0) return lo;
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

void load_model(Impl& impl, const Json& model, RawTokenizerJson& raw) {
  if (!model.is_object()) fail_file("{}: \"model\" must be an object", impl.what);
  if (auto it = model.find("type"); it != model.end()) {
    if (!it->is_string()) fail_file("{}: model.type must be a string", impl.what);
    if (it->get<std::string>() != "BPE")
      unsupported(impl, fmt::format("model type \"{}\" (only BPE)", it->get<std::string>()));
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 0.0) unsupported(impl, "BPE dropout (non-deterministic)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      unsupported(impl, fmt::format("BPE {}", key));
  }
  impl.fuse_unk = bool_member(impl, model, "fuse_unk", "model", false);
  impl.byte_fallback = bool_member(impl, model, "byte_fallback", "model", false);
  impl.ignore_merges = bool_member(impl, model, "ignore_merges", "model", false);

  if (!raw.has_vocab) fail_file("{}: model has no \"vocab\" object", impl.what);
  if (!raw.vocab_error.empty()) fail_file("{}: {}", impl.what, raw.vocab_error);
  if (!raw.has_merges) fail_file("{}: model has no \"merges\" array", impl.what);
  if (!raw.merges_error.empty()) fail_file("{}: model.merges: {}", impl.what, raw.merges_error);

  impl.vocab.reserve(raw.vocab.size());
  int32_t max_id = -1;
  for (auto& [piece, id] : raw.vocab) {
    if (id < 0 || id > kMaxTokenId) fail_file("{}: vocab id {} out of range [0, {}]", impl.what, id, kMaxTokenId);
    if (!utf8::is_valid(piece)) fail_file("{}: vocab entry with invalid UTF-8", impl.what);
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  impl.pieces.assign(static_cast<size_t>(max_id) + 1, {});
  impl.present.assign(static_cast<size_t>(max_id) + 1, 0);
  for (auto& [piece, id] : raw.vocab) {
    if (impl.present[id]) fail_file("{}: vocab id {} is used by two pieces", impl.what, id);
    impl.present[id] = 1;
    impl.pieces[id] = piece;
    if (!impl.vocab.insert(std::move(piece), static_cast<int32_t>(id)))
      fail_file("{}: vocab piece \"{}\" listed twice", impl.what, impl.pieces[id]);
  }
  raw.vocab = {};

  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) fail_file("{}: model.unk_token must be a string", impl.what);
    impl.unk_id = impl.vocab.find(it->get<std::string>());
    if (impl.unk_id < 0) fail_file("{}: unk_token \"{}\" is not in the vocab", impl.what, it->get<std::string>());
  }

  impl.bmp_ids.assign(0x10000, -1);
  for (const auto& [piece, id] : impl.vocab.entries()) {
    const utf8::Decoded d = utf8::decode(piece, 0);
    if (static_cast<size_t>(d.len) != piece.size()) continue;
    if (d.cp < 0x10000) impl.bmp_ids[d.cp] = id;
    else impl.astral_ids.emplace(d.cp, id);
  }
  impl.byte_ids.fill(-1);
  impl.all_bytes_present = true;
  for (int b = 0; b < 256; ++b) {
    impl.byte_ids[b] = impl.vocab.find(fmt::format("<0x{:02X}>", b));
    impl.all_bytes_present = impl.all_bytes_present && impl.byte_ids[b] >= 0;
  }

  impl.merges.reserve(raw.merges.size());
  int32_t rank = 0;
  std::string joined;
  for (const RawMerge& m : raw.merges) {
    std::string_view a = m.a, b = m.b;
    if (!m.is_pair) {
      const size_t sp = a.find(' ');
      if (sp == std::string::npos || a.find(' ', sp + 1) != std::string::npos)
        fail_file("{}: merge #{} \"{}\" is not two pieces", impl.what, rank, m.a);
      b = a.substr(sp + 1);
      a = a.substr(0, sp);
    }
    joined.assign(a);
    joined.append(b);
    const int32_t ia = impl.vocab.find(a), ib = impl.vocab.find(b), ij = impl.vocab.find(joined);
    if (ia < 0 || ib < 0 || ij < 0)
      fail_file("{}: merge #{} (\"{}\", \"{}\") uses a piece that is not in the vocab", impl.what, rank, a, b);
    // Later duplicates win, as in HF (its merge map is filled in file order).
    impl.merges.insert(ia, ib, {rank, ij});
    ++rank;
  }
  raw.merges = {};
}

void load_added_tokens(Impl& impl, const Json& list) {
  if (list.is_null()) return;
  if (!list.is_array()) fail_file("{}: added_tokens must be an array", impl.what);
  for (const Json& t : list) {
    if (!t.is_object()) fail_file("{}: added_tokens entries must be objects", impl.what);
    const Json& idj = member(impl, t, "id", "added token");
    if (!idj.is_number_integer()) fail_file("{}: added token id must be an integer", impl.what);
    const int64_t file_id = idj.get<int64_t>();
    AddedToken tok;
    tok.content = string_member(impl, t, "content", "added token");
    tok.special = bool_member(impl, t, "special", "added token", false);
    tok.normalized = bool_member(impl, t, "normalized", "added token", !tok.special);
    for (const char* flag : {"single_word", "lstrip", "rstrip"})
      if (bool_member(impl, t, flag, "added token", false))
        unsupported(impl, fmt::format("added token \"{}\" with {}=true", tok.content, flag));
    if (tok.content.empty()) continue;  // HF ignores empty added tokens
    if (!utf8::is_valid(tok.content)) fail_file("{}: added token with invalid UTF-8", impl.what);
    if (file_id < 0 || file_id > kMaxTokenId) fail_file("{}: added token id {} out of range", impl.what, file_id);
    // HF gives an added token the model's id for the same piece.
    if (const int32_t v = impl.vocab.find(tok.content); v >= 0) {
      if (v != file_id)
        fail_file("{}: added token \"{}\" has id {} but the vocab says {}", impl.what, tok.content, file_id, v);
    } else if (static_cast<size_t>(file_id) < impl.present.size() && impl.present[file_id] &&
               impl.pieces[file_id] != tok.content) {
      fail_file("{}: added token \"{}\" reuses id {} of \"{}\"", impl.what, tok.content, file_id,
                impl.pieces[file_id]);
    }
    tok.id = static_cast<int32_t>(file_id);
    if (!impl.added_ids.emplace(tok.content, tok.id).second)
      fail_file("{}: added token \"{}\" listed twice", impl.what, tok.content);
    impl.added.push_back(std::move(tok));
  }
  // As in HF, normalized=true tokens are matched on normalised text, so their pattern is their
  // normalised content (the normaliser must be loaded first).
  for (size_t i = 0; i < impl.added.size(); ++i) {
    const AddedToken& tok = impl.added[i];
    if (!tok.normalized) {
      impl.raw_trie.add(tok.content, static_cast<int32_t>(i));
    } else if (const std::string pattern = normalize(impl, tok.content); !pattern.empty()) {
      impl.norm_trie.add(pattern, static_cast<int32_t>(i));
    }
  }
}

void build_id_tables(Impl& impl) {
  int32_t max_id = static_cast<int32_t>(impl.pieces.size()) - 1;
  for (const AddedToken& t : impl.added) max_id = std::max(max_id, t.id);
  impl.vocab_size = max_id + 1;
  // Per-id tables are sized by the largest id: refuse absurdly sparse files instead of allocating.
  const size_t entries = impl.vocab.size() + impl.added.size();
  if (static_cast<size_t>(impl.vocab_size) > 2 * entries + 65536)
    fail_file("{}: ids are too sparse (largest id {} for {} pieces)", impl.what, max_id, entries);
  impl.pieces.resize(impl.vocab_size);
  impl.present.resize(impl.vocab_size, 0);
  impl.special.assign(impl.vocab_size, 0);
  for (const AddedToken& t : impl.added) {
    impl.pieces[t.id] = t.content;
    impl.present[t.id] = 1;
  }
  // HF decides "special" by the piece's content, so an id whose piece equals a special token's
  // content counts as special too.
  std::unordered_set<std::string> special_contents;
  for (const AddedToken& t : impl.added)
    if (t.special) special_contents.insert(t.content);
  impl.texts.assign(impl.vocab_size, {});
  impl.byte_value.assign(impl.vocab_size, -1);
  for (int32_t id = 0; id < impl.vocab_size; ++id) {
    if (!impl.present[id]) continue;
    if (special_contents.count(impl.pieces[id])) impl.special[id] = 1;
    std::string text = impl.pieces[id];
    for (const auto& [pattern, content] : impl.decoder_replacements) text = replace_all(text, pattern, content);
    if (impl.decoder_byte_fallback) impl.byte_value[id] = static_cast<int16_t>(byte_piece_value(text));
    impl.texts[id] = std::move(text);
  }
}

void setup_meta_split(Impl& impl) {
  static constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581
  impl.meta_id = impl.vocab.find(kMeta);
  if (impl.meta_id < 0 || impl.ignore_merges) return;
  for (const auto& [piece, id] : impl.vocab.entries()) {
    for (size_t pos = piece.find(kMeta, 1); pos != std::string::npos; pos = piece.find(kMeta, pos + 1)) {
      // The character just before this "▁" (pieces are valid UTF-8).
      size_t start = pos - 1;
      while (start > 0 && (static_cast<unsigned char>(piece[start]) & 0xC0) == 0x80) --start;
      impl.chars_before_meta.insert(utf8::decode(piece, start).cp);
    }
  }
  impl.split_before_meta = true;
}

}  // namespace

void load_impl(Impl& impl, std::string_view json_text) {
  RawTokenizerJson raw = read_tokenizer_json(json_text, impl.what);
  const Json& j = raw.rest;
  try {
    if (!j.is_object()) fail_file("{}: tokenizer.json must be a JSON object", impl.what);
    for (const char* key : {"truncation", "padding"})
      if (auto it = j.find(key); it != j.end() && !it->is_null())
        unsupported(impl, fmt::format("\"{}\" settings", key));
    load_model(impl, member(impl, j, "model", "tokenizer.json"), raw);
    load_normalizer(impl, j.value("normalizer", Json()));
    load_added_tokens(impl, j.value("added_tokens", Json()));
    load_pre_tokenizer(impl, j.value("pre_tokenizer", Json()));
    auto dec = j.find("decoder");
    if (dec == j.end() || dec->is_null()) unsupported(impl, "a missing decoder");
    bool fused = false;
    load_decoder(impl, *dec, fused);
    // post_processor only matters for add_special_tokens=True, which dgemma never uses.
    build_id_tables(impl);
    setup_meta_split(impl);
  } catch (const Json::exception& e) {
    fail_file("{}: malformed tokenizer.json: {}", impl.what, e.what());
  }
}

}  // namespace dgemma::tokenizer_detail
