#include "guided/dfa.h"

#include <algorithm>
#include <deque>
#include <unordered_map>

#include "guided/nfa.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

struct VectorHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ull + (h >> 29);
    return static_cast<size_t>(h);
  }
};
using SetIndex = std::unordered_map<std::vector<int32_t>, int32_t, VectorHash>;

size_t at(int32_t state, int32_t classes, int32_t c) {
  return static_cast<size_t>(state) * static_cast<size_t>(classes) + static_cast<size_t>(c);
}

[[noreturn]] void too_many_states(const CompileLimits& limits) {
  fail_arg("the constraint is too complex: its automaton needs more than {} states", limits.max_dfa_states);
}

[[noreturn]] void too_much_work(const CompileLimits& limits) {
  fail_arg("the constraint is too complex: building its automaton takes more than {} steps", limits.max_work);
}

// The epsilon closure of `seeds`, restricted to the states that matter to a subset: those with byte
// moves, and the accepting state. Sorted.
class Closure {
 public:
  explicit Closure(const Nfa& nfa) : nfa_(nfa), stamp_(static_cast<size_t>(nfa.size()), 0) {
    important_.resize(static_cast<size_t>(nfa.size()));
    for (int32_t s = 0; s < nfa.size(); ++s)
      important_[static_cast<size_t>(s)] = !nfa.edges[static_cast<size_t>(s)].empty() || s == nfa.accept;
  }
  std::vector<int32_t> of(const std::vector<int32_t>& seeds, int64_t& work) {
    ++generation_;
    std::vector<int32_t> stack, out;
    for (int32_t s : seeds) visit(s, stack);
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      ++work;
      if (important_[static_cast<size_t>(s)]) out.push_back(s);
      for (int32_t t : nfa_.eps[static_cast<size_t>(s)]) visit(t, stack);
    }
    std::sort(out.begin(), out.end());
    work += static_cast<int64_t>(out.size());
    return out;
  }

 private:
  void visit(int32_t s, std::vector<int32_t>& stack) {
    if (stamp_[static_cast<size_t>(s)] == generation_) return;
    stamp_[static_cast<size_t>(s)] = generation_;
    stack.push_back(s);
  }
  const Nfa& nfa_;
  std::vector<uint32_t> stamp_;
  std::vector<uint8_t> important_;
  uint32_t generation_ = 0;
};

// Partition refinement (Hopcroft) over states 0..n-1 with transitions delta[q * k + c] in 0..n-1.
// Returns the block of every state; states in one block are equivalent.
std::vector<int32_t> hopcroft(int32_t n, int32_t k, const std::vector<int32_t>& delta,
                              const std::vector<uint8_t>& accepting) {
  // Predecessors per (target, class), compressed rows.
  std::vector<int32_t> inv_start(static_cast<size_t>(n) * static_cast<size_t>(k) + 1, 0);
  for (int32_t q = 0; q < n; ++q)
    for (int32_t c = 0; c < k; ++c) ++inv_start[at(delta[at(q, k, c)], k, c) + 1];
  for (size_t i = 1; i < inv_start.size(); ++i) inv_start[i] += inv_start[i - 1];
  std::vector<int32_t> inv(static_cast<size_t>(n) * static_cast<size_t>(k));
  {
    std::vector<int32_t> fill(inv_start.begin(), inv_start.end() - 1);
    for (int32_t q = 0; q < n; ++q)
      for (int32_t c = 0; c < k; ++c) inv[static_cast<size_t>(fill[at(delta[at(q, k, c)], k, c)]++)] = q;
  }

  std::vector<int32_t> elems(static_cast<size_t>(n)), loc(static_cast<size_t>(n)),
      blk(static_cast<size_t>(n));
  std::vector<int32_t> first, end, mid;
  {
    int32_t pos = 0;
    for (int pass = 0; pass < 2; ++pass) {
      const int32_t begin = pos;
      for (int32_t q = 0; q < n; ++q) {
        if ((accepting[static_cast<size_t>(q)] != 0) != (pass == 0)) continue;
        elems[static_cast<size_t>(pos)] = q;
        loc[static_cast<size_t>(q)] = pos++;
        blk[static_cast<size_t>(q)] = static_cast<int32_t>(first.size());
      }
      if (pos > begin) {
        first.push_back(begin);
        end.push_back(pos);
        mid.push_back(begin);
      }
    }
  }
  std::vector<std::pair<int32_t, int32_t>> work;
  std::vector<uint8_t> in_work;
  auto ensure = [&](size_t blocks) {
    if (in_work.size() < blocks * static_cast<size_t>(k))
      in_work.resize(blocks * static_cast<size_t>(k) * 2, 0);
  };
  auto push = [&](int32_t b, int32_t c) {
    ensure(static_cast<size_t>(b) + 1);
    if (in_work[at(b, k, c)]) return;
    in_work[at(b, k, c)] = 1;
    work.emplace_back(b, c);
  };
  {
    int32_t smallest = 0;
    for (int32_t b = 1; b < static_cast<int32_t>(first.size()); ++b)
      if (end[static_cast<size_t>(b)] - first[static_cast<size_t>(b)] <
          end[static_cast<size_t>(smallest)] - first[static_cast<size_t>(smallest)])
        smallest = b;
    if (first.size() > 1)
      for (int32_t c = 0; c < k; ++c) push(smallest, c);
  }
  std::vector<int32_t> preds, touched;
  while (!work.empty()) {
    const auto [a, c] = work.back();
    work.pop_back();
    in_work[at(a, k, c)] = 0;
    preds.clear();
    for (int32_t i = first[static_cast<size_t>(a)]; i < end[static_cast<size_t>(a)]; ++i) {
      const size_t row = at(elems[static_cast<size_t>(i)], k, c);
      for (int32_t j = inv_start[row]; j < inv_start[row + 1]; ++j)
        preds.push_back(inv[static_cast<size_t>(j)]);
    }
    touched.clear();
    for (int32_t p : preds) {
      const int32_t b = blk[static_cast<size_t>(p)];
      auto& m = mid[static_cast<size_t>(b)];
      if (loc[static_cast<size_t>(p)] < m) continue;  // already marked
      if (m == first[static_cast<size_t>(b)]) touched.push_back(b);
      const int32_t other = elems[static_cast<size_t>(m)];
      std::swap(elems[static_cast<size_t>(m)], elems[static_cast<size_t>(loc[static_cast<size_t>(p)])]);
      loc[static_cast<size_t>(other)] = loc[static_cast<size_t>(p)];
      loc[static_cast<size_t>(p)] = m++;
    }
    for (int32_t b : touched) {
      const size_t bi = static_cast<size_t>(b);
      if (mid[bi] == end[bi]) {
        mid[bi] = first[bi];
        continue;
      }
      const int32_t nb = static_cast<int32_t>(first.size());
      first.push_back(first[bi]);
      end.push_back(mid[bi]);
      mid.push_back(first[bi]);
      first[bi] = mid[bi];
      mid[bi] = first[bi];
      for (int32_t i = first[static_cast<size_t>(nb)]; i < end[static_cast<size_t>(nb)]; ++i)
        blk[static_cast<size_t>(elems[static_cast<size_t>(i)])] = nb;
      ensure(static_cast<size_t>(nb) + 1);
      const bool new_smaller =
          end[static_cast<size_t>(nb)] - first[static_cast<size_t>(nb)] < end[bi] - first[bi];
      for (int32_t cc = 0; cc < k; ++cc) {
        if (in_work[at(b, k, cc)])
          push(nb, cc);
        else
          push(new_smaller ? nb : b, cc);
      }
    }
  }
  return blk;
}

}  // namespace

Dfa determinize(const Nfa& nfa, const CompileLimits& limits) {
  // Byte classes: the intervals between the ends of all byte ranges.
  std::array<bool, 257> cut{};
  for (const auto& edges : nfa.edges)
    for (const auto& e : edges) {
      cut[e.lo] = true;
      cut[static_cast<size_t>(e.hi) + 1] = true;
    }
  Dfa raw;
  int32_t classes = 0;
  for (int b = 0; b < 256; ++b) {
    if (b > 0 && cut[static_cast<size_t>(b)]) ++classes;
    raw.byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(classes);
  }
  raw.num_classes = classes + 1;
  const int32_t k = raw.num_classes;

  int64_t work = 0;
  Closure closure(nfa);
  SetIndex index;
  std::vector<std::vector<int32_t>> sets;
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    if (set.empty()) return kDead;
    auto [it, inserted] = index.try_emplace(std::move(set), static_cast<int32_t>(sets.size()));
    if (inserted) {
      if (static_cast<int64_t>(sets.size()) >= limits.max_dfa_states) too_many_states(limits);
      sets.push_back(it->first);
      raw.next.resize(raw.next.size() + static_cast<size_t>(k), kDead);
      raw.accepting.push_back(std::binary_search(it->first.begin(), it->first.end(), nfa.accept));
    }
    return it->second;
  };
  raw.start = intern(closure.of({nfa.start}, work));
  std::vector<std::vector<int32_t>> targets(static_cast<size_t>(k));
  for (size_t d = 0; d < sets.size(); ++d) {
    for (auto& t : targets) t.clear();
    for (int32_t s : sets[d]) {
      for (const auto& e : nfa.edges[static_cast<size_t>(s)]) {
        for (int32_t c = raw.byte_class[e.lo]; c <= raw.byte_class[e.hi]; ++c)
          targets[static_cast<size_t>(c)].push_back(e.to);
        work += raw.byte_class[e.hi] - raw.byte_class[e.lo] + 1;
      }
    }
    for (int32_t c = 0; c < k; ++c) {
      auto& t = targets[static_cast<size_t>(c)];
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      const int32_t to = intern(closure.of(t, work));
      raw.next[at(static_cast<int32_t>(d), k, c)] = to;
    }
    if (work > limits.max_work) too_much_work(limits);
  }
  raw.num_states = static_cast<int32_t>(sets.size());
  return minimize(raw);
}

Dfa minimize(const Dfa& in) {
  const int32_t k = in.num_classes;
  Dfa out;
  out.byte_class.fill(0);
  if (in.num_states == 0 || in.start == kDead) return out;
  // Reachable states, then live ones (reverse search from the accepting states).
  std::vector<uint8_t> reachable(static_cast<size_t>(in.num_states), 0);
  std::vector<int32_t> stack = {in.start};
  reachable[static_cast<size_t>(in.start)] = 1;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t c = 0; c < k; ++c) {
      const int32_t t = in.next[at(s, k, c)];
      if (t != kDead && !reachable[static_cast<size_t>(t)]) {
        reachable[static_cast<size_t>(t)] = 1;
        stack.push_back(t);
      }
    }
  }
  std::vector<std::vector<int32_t>> preds(static_cast<size_t>(in.num_states));
  for (int32_t s = 0; s < in.num_states; ++s) {
    if (!reachable[static_cast<size_t>(s)]) continue;
    for (int32_t c = 0; c < k; ++c)
      if (const int32_t t = in.next[at(s, k, c)]; t != kDead) preds[static_cast<size_t>(t)].push_back(s);
  }
  std::vector<uint8_t> live(static_cast<size_t>(in.num_states), 0);
  for (int32_t s = 0; s < in.num_states; ++s)
    if (reachable[static_cast<size_t>(s)] && in.accepting[static_cast<size_t>(s)]) {
      live[static_cast<size_t>(s)] = 1;
      stack.push_back(s);
    }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : preds[static_cast<size_t>(s)])
      if (!live[static_cast<size_t>(p)]) {
        live[static_cast<size_t>(p)] = 1;
        stack.push_back(p);
      }
  }
  if (!live[static_cast<size_t>(in.start)]) return out;

  // Dense numbering of the live states, plus a sink (index n) for kDead.
  std::vector<int32_t> dense(static_cast<size_t>(in.num_states), -1);
  int32_t n = 0;
  for (int32_t s = 0; s < in.num_states; ++s)
    if (live[static_cast<size_t>(s)]) dense[static_cast<size_t>(s)] = n++;
  const int32_t sink = n;
  std::vector<int32_t> delta(static_cast<size_t>(n + 1) * static_cast<size_t>(k));
  std::vector<uint8_t> acc(static_cast<size_t>(n + 1), 0);
  for (int32_t s = 0; s < in.num_states; ++s) {
    const int32_t d = dense[static_cast<size_t>(s)];
    if (d < 0) continue;
    acc[static_cast<size_t>(d)] = in.accepting[static_cast<size_t>(s)];
    for (int32_t c = 0; c < k; ++c) {
      const int32_t t = in.next[at(s, k, c)];
      delta[at(d, k, c)] =
          (t == kDead || dense[static_cast<size_t>(t)] < 0) ? sink : dense[static_cast<size_t>(t)];
    }
  }
  for (int32_t c = 0; c < k; ++c) delta[at(sink, k, c)] = sink;
  const std::vector<int32_t> blk = hopcroft(n + 1, k, delta, acc);

  // Number the blocks breadth-first from the start; the sink's block is kDead.
  const int32_t sink_block = blk[static_cast<size_t>(sink)];
  std::unordered_map<int32_t, int32_t> number;
  std::vector<int32_t> rep;  // a representative dense state per new state
  std::vector<int32_t> rep_of_block(static_cast<size_t>(n + 1), -1);
  for (int32_t d = 0; d <= n; ++d)
    if (rep_of_block[static_cast<size_t>(blk[static_cast<size_t>(d)])] < 0)
      rep_of_block[static_cast<size_t>(blk[static_cast<size_t>(d)])] = d;
  std::deque<int32_t> queue;
  const int32_t start_block = blk[static_cast<size_t>(dense[static_cast<size_t>(in.start)])];
  number[start_block] = 0;
  queue.push_back(start_block);
  std::vector<int32_t> next_blocks;
  while (!queue.empty()) {
    const int32_t b = queue.front();
    queue.pop_front();
    rep.push_back(rep_of_block[static_cast<size_t>(b)]);
    for (int32_t c = 0; c < k; ++c) {
      const int32_t tb = blk[static_cast<size_t>(delta[at(rep.back(), k, c)])];
      if (tb == sink_block || number.count(tb)) continue;
      number.emplace(tb, static_cast<int32_t>(number.size()));
      queue.push_back(tb);
    }
  }
  const int32_t m = static_cast<int32_t>(rep.size());
  std::vector<int32_t> table(static_cast<size_t>(m) * static_cast<size_t>(k));
  for (int32_t s = 0; s < m; ++s)
    for (int32_t c = 0; c < k; ++c) {
      const int32_t tb = blk[static_cast<size_t>(delta[at(rep[static_cast<size_t>(s)], k, c)])];
      table[at(s, k, c)] = tb == sink_block ? kDead : number.at(tb);
    }

  // Merge equal class columns.
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> columns;
  std::vector<int32_t> class_map(static_cast<size_t>(k), -1), keep;
  for (int b = 0; b < 256; ++b) {
    const int32_t c = in.byte_class[static_cast<size_t>(b)];
    if (class_map[static_cast<size_t>(c)] >= 0) continue;
    std::vector<int32_t> col(static_cast<size_t>(m));
    for (int32_t s = 0; s < m; ++s) col[static_cast<size_t>(s)] = table[at(s, k, c)];
    auto [it, inserted] = columns.try_emplace(std::move(col), static_cast<int32_t>(keep.size()));
    if (inserted) keep.push_back(c);
    class_map[static_cast<size_t>(c)] = it->second;
  }
  out.num_states = m;
  out.num_classes = static_cast<int32_t>(keep.size());
  out.start = 0;
  for (int b = 0; b < 256; ++b)
    out.byte_class[static_cast<size_t>(b)] =
        static_cast<uint8_t>(class_map[in.byte_class[static_cast<size_t>(b)]]);
  out.next.resize(static_cast<size_t>(m) * keep.size());
  out.accepting.resize(static_cast<size_t>(m));
  for (int32_t s = 0; s < m; ++s) {
    out.accepting[static_cast<size_t>(s)] = acc[static_cast<size_t>(rep[static_cast<size_t>(s)])];
    for (int32_t c = 0; c < out.num_classes; ++c)
      out.next[at(s, out.num_classes, c)] = table[at(s, k, keep[static_cast<size_t>(c)])];
  }
  return out;
}

int32_t walk_bytes(const Dfa& dfa, int32_t state, std::string_view text) {
  for (unsigned char b : text) {
    if (state == kDead) return kDead;
    state = dfa.step(state, b);
  }
  return state;
}

bool accepts(const Dfa& dfa, std::string_view text) {
  if (dfa.empty_language()) return false;
  const int32_t s = walk_bytes(dfa, dfa.start, text);
  return s != kDead && dfa.accepting[static_cast<size_t>(s)];
}

Dfa product(const std::vector<const Dfa*>& parts, ProductRule rule, const CompileLimits& limits) {
  DG_CHECK(!parts.empty());
  // Classes of the product: bytes with the same class in every part.
  Dfa raw;
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> class_ids;
  std::vector<std::vector<int32_t>> class_parts;  // per product class, the class in each part
  for (int b = 0; b < 256; ++b) {
    std::vector<int32_t> key;
    for (const Dfa* p : parts) key.push_back(p->byte_class[static_cast<size_t>(b)]);
    auto [it, inserted] = class_ids.try_emplace(key, static_cast<int32_t>(class_parts.size()));
    if (inserted) class_parts.push_back(key);
    raw.byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(it->second);
  }
  raw.num_classes = static_cast<int32_t>(class_parts.size());
  const int32_t k = raw.num_classes;
  auto accepting = [&](const std::vector<int32_t>& t) {
    int count = 0;
    for (size_t i = 0; i < parts.size(); ++i)
      if (t[i] != kDead && parts[i]->accepting[static_cast<size_t>(t[i])]) ++count;
    return rule == ProductRule::kAll ? count == static_cast<int>(parts.size()) : count == 1;
  };
  auto dead = [&](const std::vector<int32_t>& t) {
    if (rule == ProductRule::kAll) return std::find(t.begin(), t.end(), kDead) != t.end();
    return std::all_of(t.begin(), t.end(), [](int32_t s) { return s == kDead; });
  };
  SetIndex index;
  std::vector<std::vector<int32_t>> tuples;
  int64_t work = 0;
  auto intern = [&](std::vector<int32_t> t) -> int32_t {
    if (dead(t)) return kDead;
    auto [it, inserted] = index.try_emplace(std::move(t), static_cast<int32_t>(tuples.size()));
    if (inserted) {
      if (static_cast<int64_t>(tuples.size()) >= limits.max_dfa_states) too_many_states(limits);
      tuples.push_back(it->first);
      raw.next.resize(raw.next.size() + static_cast<size_t>(k), kDead);
      raw.accepting.push_back(accepting(it->first));
    }
    return it->second;
  };
  std::vector<int32_t> start;
  for (const Dfa* p : parts) start.push_back(p->start);
  raw.start = intern(start);
  for (size_t d = 0; d < tuples.size(); ++d) {
    for (int32_t c = 0; c < k; ++c) {
      std::vector<int32_t> t(parts.size());
      for (size_t i = 0; i < parts.size(); ++i) {
        const int32_t s = tuples[d][i];
        t[i] = s == kDead
                   ? kDead
                   : parts[i]->next[at(s, parts[i]->num_classes, class_parts[static_cast<size_t>(c)][i])];
      }
      work += static_cast<int64_t>(parts.size());
      raw.next[at(static_cast<int32_t>(d), k, c)] = intern(std::move(t));
    }
    if (work > limits.max_work) too_much_work(limits);
  }
  raw.num_states = static_cast<int32_t>(tuples.size());
  if (raw.start == kDead) return Dfa{};
  return minimize(raw);
}

}  // namespace dgemma::guided
