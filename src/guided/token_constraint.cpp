#include "guided/token_constraint.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>

#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/utf8.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

void set_bit(std::vector<uint32_t>& mask, int32_t id) {
  mask[static_cast<size_t>(id) >> 5] |= uint32_t{1} << (id & 31);
}

}  // namespace

std::shared_ptr<const TokenConstraint> TokenConstraint::build(std::shared_ptr<const Dfa> dfa,
                                                              std::shared_ptr<const TokenVocabulary> vocab,
                                                              const CompileLimits& limits) {
  DG_CHECK(dfa && vocab && !dfa->empty_language());
  std::shared_ptr<TokenConstraint> c(new TokenConstraint());
  c->dfa_ = std::move(dfa);
  c->vocab_ = std::move(vocab);
  c->filler_mask_.assign(static_cast<size_t>(c->mask_words()), 0);
  for (int32_t id = 0; id < c->vocab_->size(); ++id)
    if (c->vocab_->kind(id) == TokenKind::kFiller) set_bit(c->filler_mask_, id);
  c->build_trie();
  c->build_gap_mask(limits.max_mask_work);
  c->build_completions();
  return c;
}

TokenConstraintView TokenConstraint::view() const {
  return TokenConstraintView{dfa_->num_states,        dfa_->num_classes,        dfa_->start,
                             dfa_->byte_class.data(), dfa_->next.data(),        dfa_->accepting.data(),
                             vocab_->size(),          vocab_->offsets().data(), vocab_->data().data(),
                             vocab_->kinds().data()};
}

WalkResult TokenConstraint::walk(int32_t state, std::span<const int32_t> tokens) const {
  DG_CHECK(state >= 0 && state < dfa_->num_states);
  return walk_tokens(view(), state, tokens.data(), static_cast<int32_t>(tokens.size()));
}

void TokenConstraint::build_trie() {
  const TokenVocabulary& v = *vocab_;
  DG_CHECK(v.max_token_bytes() < UINT16_MAX);
  const uint8_t* data = v.data().data();
  const int32_t* offsets = v.offsets().data();
  const auto& byte_class = dfa_->byte_class;
  for (int32_t id = 0; id < v.size(); ++id)
    if (v.kind(id) == TokenKind::kText) sorted_tokens_.push_back(id);
  auto length = [&](int32_t t) { return offsets[t + 1] - offsets[t]; };
  auto class_at = [&](int32_t t, int32_t d) { return byte_class[data[offsets[t] + d]]; };
  std::vector<int32_t> scratch(sorted_tokens_.size());
  trie_.push_back(TrieNode{0, 0, 0, 0, 0});
  // Most-significant-digit radix sort of the tokens by class sequence, which lays the nodes out in
  // preorder: a node's tokens (those ending at its depth) first, then its children by class.
  auto build = [&](auto& self, int32_t node, int32_t lo, int32_t hi, int32_t depth) -> void {
    int32_t* tokens = sorted_tokens_.data();
    const int32_t mid = static_cast<int32_t>(
        std::stable_partition(tokens + lo, tokens + hi, [&](int32_t t) { return length(t) == depth; }) -
        tokens);
    trie_[static_cast<size_t>(node)].token_begin = lo;
    trie_[static_cast<size_t>(node)].token_end = mid;
    if (hi - mid <= 32) {
      std::stable_sort(tokens + mid, tokens + hi,
                       [&](int32_t a, int32_t b) { return class_at(a, depth) < class_at(b, depth); });
    } else {
      std::array<int32_t, 257> start{};
      for (int32_t i = mid; i < hi; ++i) ++start[class_at(tokens[i], depth) + 1u];
      for (size_t c = 1; c < start.size(); ++c) start[c] += start[c - 1];
      for (int32_t i = mid; i < hi; ++i)
        scratch[static_cast<size_t>(mid + start[class_at(tokens[i], depth)]++)] = tokens[i];
      std::copy(scratch.begin() + mid, scratch.begin() + hi, tokens + mid);
    }
    for (int32_t i = mid; i < hi;) {
      const uint8_t c = class_at(sorted_tokens_[static_cast<size_t>(i)], depth);
      int32_t j = i + 1;
      while (j < hi && class_at(sorted_tokens_[static_cast<size_t>(j)], depth) == c) ++j;
      const int32_t child = static_cast<int32_t>(trie_.size());
      trie_.push_back(TrieNode{0, 0, 0, static_cast<uint16_t>(depth + 1), c});
      self(self, child, i, j, depth + 1);
      i = j;
    }
    trie_[static_cast<size_t>(node)].end = static_cast<int32_t>(trie_.size());
  };
  build(build, 0, 0, static_cast<int32_t>(sorted_tokens_.size()), 0);
}

void TokenConstraint::build_gap_mask(int64_t max_work) {
  const Dfa& d = *dfa_;
  const size_t k = static_cast<size_t>(d.num_classes);
  gap_mask_ = filler_mask_;
  auto allow_tokens = [&](const TrieNode& node) {
    for (int32_t i = node.token_begin; i < node.token_end; ++i)
      set_bit(gap_mask_, sorted_tokens_[static_cast<size_t>(i)]);
  };
  // Exact: the set of states each prefix can reach from any state.
  std::vector<std::vector<int32_t>> level(1);
  for (int32_t s = 0; s < d.num_states; ++s) level[0].push_back(s);
  std::vector<int32_t> stamp(static_cast<size_t>(d.num_states), -1);
  int64_t work = 0;
  bool exact = true;
  for (int32_t n = 1; n < static_cast<int32_t>(trie_.size());) {
    const TrieNode& node = trie_[static_cast<size_t>(n)];
    if (level.size() <= node.depth) level.resize(node.depth + 1u);
    const std::vector<int32_t>& parent = level[node.depth - 1u];
    std::vector<int32_t>& cur = level[node.depth];
    cur.clear();
    for (int32_t s : parent) {
      const int32_t t = d.next[static_cast<size_t>(s) * k + node.cls];
      if (t >= 0 && stamp[static_cast<size_t>(t)] != n) {
        stamp[static_cast<size_t>(t)] = n;
        cur.push_back(t);
      }
    }
    work += static_cast<int64_t>(parent.size()) + 1;
    if (work > max_work) {
      exact = false;
      break;
    }
    if (cur.empty()) {
      n = node.end;
      continue;
    }
    allow_tokens(node);
    ++n;
  }
  gap_mask_exact_ = exact;
  if (exact) return;
  // Approximation: every byte class of the token has a live move from some state.
  gap_mask_ = filler_mask_;
  std::vector<uint8_t> live_class(k, 0);
  for (int32_t s = 0; s < d.num_states; ++s)
    for (size_t c = 0; c < k; ++c)
      if (d.next[static_cast<size_t>(s) * k + c] >= 0) live_class[c] = 1;
  for (int32_t n = 1; n < static_cast<int32_t>(trie_.size());) {
    const TrieNode& node = trie_[static_cast<size_t>(n)];
    if (!live_class[node.cls]) {
      n = node.end;
      continue;
    }
    allow_tokens(node);
    ++n;
  }
}

std::vector<uint32_t> TokenConstraint::state_mask(int32_t state) const {
  DG_CHECK(state >= 0 && state < dfa_->num_states);
  const Dfa& d = *dfa_;
  const size_t k = static_cast<size_t>(d.num_classes);
  std::vector<uint32_t> mask = filler_mask_;
  std::vector<int32_t> at_depth = {state};
  for (int32_t n = 1; n < static_cast<int32_t>(trie_.size());) {
    const TrieNode& node = trie_[static_cast<size_t>(n)];
    if (at_depth.size() <= node.depth) at_depth.resize(node.depth + 1u);
    const int32_t t = d.next[static_cast<size_t>(at_depth[node.depth - 1u]) * k + node.cls];
    if (t < 0) {
      n = node.end;
      continue;
    }
    at_depth[node.depth] = t;
    for (int32_t i = node.token_begin; i < node.token_end; ++i)
      set_bit(mask, sorted_tokens_[static_cast<size_t>(i)]);
    ++n;
  }
  return mask;
}

void TokenConstraint::build_completions() {
  const Dfa& d = *dfa_;
  const size_t n = static_cast<size_t>(d.num_states);
  std::vector<std::vector<int32_t>> preds(n);
  for (size_t s = 0; s < n; ++s)
    for (int32_t c = 0; c < d.num_classes; ++c)
      if (const int32_t t = d.next[s * static_cast<size_t>(d.num_classes) + static_cast<size_t>(c)]; t >= 0)
        preds[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
  distance_.assign(n, -1);
  std::deque<int32_t> queue;
  for (size_t s = 0; s < n; ++s)
    if (d.accepting[s]) {
      distance_[s] = 0;
      queue.push_back(static_cast<int32_t>(s));
    }
  while (!queue.empty()) {
    const int32_t t = queue.front();
    queue.pop_front();
    for (int32_t s : preds[static_cast<size_t>(t)])
      if (distance_[static_cast<size_t>(s)] < 0) {
        distance_[static_cast<size_t>(s)] = distance_[static_cast<size_t>(t)] + 1;
        queue.push_back(s);
      }
  }
  next_byte_.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    DG_CHECK(distance_[s] >= 0);  // every state is live
    if (distance_[s] == 0) continue;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = d.step(static_cast<int32_t>(s), static_cast<uint8_t>(b));
      if (t >= 0 && distance_[static_cast<size_t>(t)] == distance_[s] - 1) {
        next_byte_[s] = static_cast<uint8_t>(b);
        break;
      }
    }
  }
}

std::string TokenConstraint::completion_bytes(int32_t state) const {
  DG_CHECK(state >= 0 && state < dfa_->num_states);
  std::string out;
  while (distance_[static_cast<size_t>(state)] > 0) {
    const uint8_t b = next_byte_[static_cast<size_t>(state)];
    out += static_cast<char>(b);
    state = dfa_->step(state, b);
  }
  return out;
}

std::optional<std::vector<int32_t>> TokenConstraint::completion_tokens(int32_t state) const {
  const std::string bytes = completion_bytes(state);
  const TokenVocabulary& v = *vocab_;
  if (bytes.empty()) return std::vector<int32_t>{};
  if (v.tokenizer() && utf8::is_valid(bytes)) {
    std::vector<int32_t> ids = v.tokenizer()->encode(bytes);
    std::string spelled;
    bool ok = true;
    for (int32_t id : ids) {
      if (id < 0 || id >= v.size() || v.kind(id) != TokenKind::kText) {
        ok = false;
        break;
      }
      spelled += v.bytes(id);
    }
    if (ok && spelled == bytes) return ids;
  }
  // The fewest pieces that spell the bytes (longest piece first among equals), by dynamic programming
  // from the end.
  const size_t n = bytes.size();
  const std::string_view view(bytes);
  constexpr int32_t kNone = INT32_MAX;
  std::vector<int32_t> cost(n + 1, kNone), piece(n, -1), length(n, 0);
  cost[n] = 0;
  for (size_t i = n; i-- > 0;) {
    for (size_t len = std::min(n - i, static_cast<size_t>(v.max_token_bytes())); len > 0; --len) {
      if (cost[i + len] == kNone || cost[i + len] + 1 >= cost[i]) continue;
      if (const auto id = v.find(view.substr(i, len))) {
        cost[i] = cost[i + len] + 1;
        piece[i] = *id;
        length[i] = static_cast<int32_t>(len);
      }
    }
  }
  if (cost[0] == kNone) return std::nullopt;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; i += static_cast<size_t>(length[i])) ids.push_back(piece[i]);
  return ids;
}

size_t TokenConstraint::memory_bytes() const {
  return sizeof(*this) + dfa_->next.size() * sizeof(int32_t) + dfa_->accepting.size() +
         trie_.size() * sizeof(TrieNode) + sorted_tokens_.size() * sizeof(int32_t) +
         (filler_mask_.size() + gap_mask_.size()) * sizeof(uint32_t) + distance_.size() * 5;
}

}  // namespace dgemma::guided
