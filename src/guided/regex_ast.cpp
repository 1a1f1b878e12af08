#include "guided/regex_ast.h"

#include "util/error.h"

namespace dgemma::guided {
namespace {

Node node_of(NodeKind kind) {
  Node n;
  n.kind = kind;
  return n;
}

}  // namespace

NodeId Ast::add(Node n) {
  if (nodes_.size() >= limits_.max_ast_nodes)
    fail_arg("the constraint is too large: more than {} syntax tree nodes", limits_.max_ast_nodes);
  nodes_.push_back(std::move(n));
  return static_cast<NodeId>(nodes_.size() - 1);
}

NodeId Ast::nothing() {
  return add(node_of(NodeKind::kNothing));
}

NodeId Ast::empty() {
  return add(node_of(NodeKind::kEmpty));
}

NodeId Ast::chars(CodeSet set) {
  if (set.empty()) return nothing();
  Node n = node_of(NodeKind::kChars);
  n.chars = std::move(set);
  return add(std::move(n));
}

NodeId Ast::bytes(std::string_view text) {
  if (text.empty()) return empty();
  Node n = node_of(NodeKind::kBytes);
  n.bytes = std::string(text);
  return add(std::move(n));
}

NodeId Ast::concat(std::vector<NodeId> items) {
  if (items.empty()) return empty();
  if (items.size() == 1) return items[0];
  Node n = node_of(NodeKind::kConcat);
  n.items = std::move(items);
  return add(std::move(n));
}

NodeId Ast::alt(std::vector<NodeId> items) {
  if (items.empty()) return nothing();
  if (items.size() == 1) return items[0];
  Node n = node_of(NodeKind::kAlt);
  n.items = std::move(items);
  return add(std::move(n));
}

NodeId Ast::repeat(NodeId item, int min, int max, NodeId separator) {
  DG_CHECK(min >= 0 && (max == kUnbounded || max >= min));
  if (max == 0) return empty();
  if (min == 1 && max == 1) return item;
  Node n = node_of(NodeKind::kRepeat);
  n.items = {item};
  n.min = min;
  n.max = max;
  n.separator = separator;
  return add(std::move(n));
}

NodeId Ast::list(std::vector<NodeId> items, std::vector<uint8_t> optional, NodeId separator) {
  DG_CHECK(items.size() == optional.size());
  if (items.empty()) return empty();
  Node n = node_of(NodeKind::kList);
  n.items = std::move(items);
  n.optional = std::move(optional);
  n.separator = separator;
  return add(std::move(n));
}

NodeId Ast::automaton(std::shared_ptr<const Dfa> dfa) {
  Node n = node_of(NodeKind::kAutomaton);
  n.dfa = std::move(dfa);
  return add(std::move(n));
}

}  // namespace dgemma::guided
