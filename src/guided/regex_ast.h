#pragma once
// The syntax tree every constraint is built as before it becomes an automaton: regexes parse into it,
// JSON Schema and choices are built in it. Nodes live in one pool (Ast) and refer to each other by
// index, so a sub-tree may be shared (a $ref used twice); the NFA builder expands shared nodes.
//
// Characters are code-point sets (CodeSet), compiled to UTF-8 byte sequences only by the NFA builder,
// so that a tree over characters can still be rewritten per character (a JSON string's escaping).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "guided/code_set.h"
#include "guided/limits.h"

namespace dgemma::guided {

struct Dfa;
using NodeId = int32_t;
inline constexpr int kUnbounded = -1;

enum class NodeKind : uint8_t {
  kNothing,    // the empty language
  kEmpty,      // the empty string
  kChars,      // one code point of `chars`
  kBytes,      // the byte string `bytes` (already encoded)
  kConcat,     // items in order
  kAlt,        // any one of items
  kRepeat,     // items[0] repeated min..max times (max kUnbounded), `separator` between repetitions
  kList,       // items in order, those with optional[i] may be absent, `separator` between present ones
  kAutomaton,  // the byte language of `dfa`
};

struct Node {
  NodeKind kind = NodeKind::kEmpty;
  CodeSet chars;
  std::string bytes;
  std::vector<NodeId> items;
  std::vector<uint8_t> optional;
  NodeId separator = -1;
  int min = 0, max = 0;
  std::shared_ptr<const Dfa> dfa;
};

class Ast {
 public:
  explicit Ast(const CompileLimits& limits) : limits_(limits) {}

  const Node& operator[](NodeId id) const { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  const CompileLimits& limits() const { return limits_; }

  NodeId nothing();
  NodeId empty();
  NodeId chars(CodeSet set);
  NodeId bytes(std::string_view text);
  NodeId concat(std::vector<NodeId> items);
  NodeId alt(std::vector<NodeId> items);
  NodeId repeat(NodeId item, int min, int max, NodeId separator = -1);
  NodeId optional(NodeId item) { return repeat(item, 0, 1); }
  NodeId list(std::vector<NodeId> items, std::vector<uint8_t> optional, NodeId separator);
  NodeId automaton(std::shared_ptr<const Dfa> dfa);

  // A copy of the tree at `root` with every kChars node replaced by what `replace` returns for its set
  // (shared sub-trees stay shared). `replace` may add nodes.
  template <typename F>
  NodeId map_chars(NodeId root, F&& replace);

 private:
  NodeId add(Node n);
  CompileLimits limits_;
  std::vector<Node> nodes_;
};

template <typename F>
NodeId Ast::map_chars(NodeId root, F&& replace) {
  std::vector<NodeId> memo(nodes_.size(), -1);
  auto rec = [&](auto& self, NodeId id) -> NodeId {
    if (static_cast<size_t>(id) < memo.size() && memo[static_cast<size_t>(id)] >= 0)
      return memo[static_cast<size_t>(id)];
    const Node n = nodes_[static_cast<size_t>(id)];
    NodeId out = id;
    if (n.kind == NodeKind::kChars) {
      out = replace(n.chars);
    } else if (!n.items.empty() || n.separator >= 0) {
      Node copy = n;
      for (NodeId& item : copy.items) item = self(self, item);
      if (copy.separator >= 0) copy.separator = self(self, copy.separator);
      out = add(std::move(copy));
    }
    if (static_cast<size_t>(id) < memo.size()) memo[static_cast<size_t>(id)] = out;
    return out;
  };
  return rec(rec, root);
}

}  // namespace dgemma::guided
