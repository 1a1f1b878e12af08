#include "guided/nfa.h"

#include "guided/dfa.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

class Builder {
 public:
  explicit Builder(const Ast& ast) : ast_(ast) {}

  Nfa take(NodeId root) {
    nfa_.start = fresh();
    nfa_.accept = build(root, nfa_.start);
    return std::move(nfa_);
  }

 private:
  int32_t fresh() {
    if (nfa_.size() >= ast_.limits().max_nfa_states)
      fail_arg("the constraint is too large: its automaton needs more than {} NFA states",
               ast_.limits().max_nfa_states);
    nfa_.edges.emplace_back();
    nfa_.eps.emplace_back();
    return nfa_.size() - 1;
  }
  void eps(int32_t from, int32_t to) { nfa_.eps[static_cast<size_t>(from)].push_back(to); }
  void edge(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
    nfa_.edges[static_cast<size_t>(from)].push_back({lo, hi, to});
  }

  // Builds `id` starting at state `in`; returns its exit state, which has no outgoing moves yet (or is
  // `in` itself for a fragment that is the empty string).
  int32_t build(NodeId id, int32_t in) {
    const Node& n = ast_[id];
    switch (n.kind) {
      case NodeKind::kNothing:
        return fresh();
      case NodeKind::kEmpty:
        return in;
      case NodeKind::kBytes: {
        int32_t cur = in;
        for (unsigned char b : n.bytes) {
          const int32_t next = fresh();
          edge(cur, b, b, next);
          cur = next;
        }
        return cur;
      }
      case NodeKind::kChars:
        return chars(n.chars, in);
      case NodeKind::kConcat: {
        int32_t cur = in;
        for (NodeId item : n.items) cur = build(item, cur);
        return cur;
      }
      case NodeKind::kAlt: {
        const int32_t out = fresh();
        for (NodeId item : n.items) {
          const int32_t s = fresh();
          eps(in, s);
          eps(build(item, s), out);
        }
        return out;
      }
      case NodeKind::kRepeat:
        return repeat(n, in);
      case NodeKind::kList:
        return list(n, in);
      case NodeKind::kAutomaton:
        return automaton(*n.dfa, in);
    }
    DG_CHECK(false);
  }

  int32_t chars(const CodeSet& set, int32_t in) {
    const int32_t out = fresh();
    for (const ByteSequence& s : utf8_sequences(set)) {
      int32_t cur = in;
      for (int i = 0; i < s.length; ++i) {
        const int32_t next = i + 1 == s.length ? out : fresh();
        edge(cur, s.lo[static_cast<size_t>(i)], s.hi[static_cast<size_t>(i)], next);
        cur = next;
      }
    }
    return out;
  }

  // One repetition: the item, preceded by the separator unless it is the first.
  int32_t unit(const Node& n, int32_t in, bool first) {
    if (!first && n.separator >= 0) in = build(n.separator, in);
    return build(n.items[0], in);
  }

  int32_t repeat(const Node& n, int32_t in) {
    const int32_t out = fresh();
    if (n.min == 0) eps(in, out);
    int32_t cur = in;
    if (n.max == kUnbounded) {
      // min - 1 repetitions, then one more that loops: its exit goes on (after the separator) back to
      // its entry, so the item is built once however many times it repeats.
      for (int count = 0; count + 1 < n.min; ++count) cur = unit(n, cur, count == 0);
      if (n.min > 1 && n.separator >= 0) cur = build(n.separator, cur);
      const int32_t loop = fresh();
      eps(cur, loop);
      const int32_t end = build(n.items[0], loop);
      eps(end, out);
      eps(n.separator >= 0 ? build(n.separator, end) : end, loop);
      return out;
    }
    // min repetitions, then optional ones up to max, each of which may be the last.
    int count = 0;
    for (; count < n.min; ++count) cur = unit(n, cur, count == 0);
    for (; count < n.max; ++count) {
      if (count > 0) eps(cur, out);
      cur = unit(n, cur, count == 0);
    }
    eps(cur, out);
    return out;
  }

  int32_t list(const Node& n, int32_t in) {
    int32_t none = in;  // nothing emitted yet (-1: impossible, a required item came before)
    int32_t some = -1;  // at least one emitted
    for (size_t i = 0; i < n.items.size(); ++i) {
      const int32_t next_some = fresh();
      if (none >= 0) {
        const int32_t s = fresh();
        eps(none, s);
        eps(build(n.items[i], s), next_some);
      }
      if (some >= 0) {
        int32_t s = fresh();
        eps(some, s);
        if (n.separator >= 0) s = build(n.separator, s);
        eps(build(n.items[i], s), next_some);
      }
      int32_t next_none = -1;
      if (n.optional[i]) {
        if (none >= 0) {
          next_none = fresh();
          eps(none, next_none);
        }
        if (some >= 0) eps(some, next_some);
      }
      none = next_none;
      some = next_some;
    }
    const int32_t out = fresh();
    if (none >= 0) eps(none, out);
    if (some >= 0) eps(some, out);
    return out;
  }

  int32_t automaton(const Dfa& dfa, int32_t in) {
    const int32_t out = fresh();
    if (dfa.num_states == 0) return out;
    // The byte intervals of each class.
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> intervals(static_cast<size_t>(dfa.num_classes));
    for (int b = 0; b < 256;) {
      int e = b;
      while (e + 1 < 256 &&
             dfa.byte_class[static_cast<size_t>(e + 1)] == dfa.byte_class[static_cast<size_t>(b)])
        ++e;
      intervals[dfa.byte_class[static_cast<size_t>(b)]].emplace_back(static_cast<uint8_t>(b),
                                                                     static_cast<uint8_t>(e));
      b = e + 1;
    }
    std::vector<int32_t> state(static_cast<size_t>(dfa.num_states));
    for (auto& s : state) s = fresh();
    eps(in, state[static_cast<size_t>(dfa.start)]);
    for (int32_t s = 0; s < dfa.num_states; ++s) {
      for (int32_t c = 0; c < dfa.num_classes; ++c) {
        const int32_t t =
            dfa.next[static_cast<size_t>(s) * static_cast<size_t>(dfa.num_classes) + static_cast<size_t>(c)];
        if (t < 0) continue;
        for (const auto& [lo, hi] : intervals[static_cast<size_t>(c)])
          edge(state[static_cast<size_t>(s)], lo, hi, state[static_cast<size_t>(t)]);
      }
      if (dfa.accepting[static_cast<size_t>(s)]) eps(state[static_cast<size_t>(s)], out);
    }
    return out;
  }

  const Ast& ast_;
  Nfa nfa_;
};

}  // namespace

Nfa build_nfa(const Ast& ast, NodeId root) {
  return Builder(ast).take(root);
}

}  // namespace dgemma::guided
