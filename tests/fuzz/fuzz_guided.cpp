// Fuzz target for guided decoding's compilers: the first byte picks the kind ('0' regex, '1' JSON
// Schema, '2' choices, one a line), the rest is the constraint. Bad input may raise dgemma::Error;
// anything else (a crash, a hang, another exception, unbounded memory) is a bug. Invariants checked,
// abort() on violation:
//  - a constraint that compiles also passes check_constraint;
//  - the automaton is minimal (minimize changes nothing) and every random walk it allows is accepted;
//  - a JSON Schema's accepted texts are valid UTF-8 JSON;
//  - lifted to a byte vocabulary, the walk accepts those texts token by token and every prefix's
//    completion closes it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "guided/guided.h"
#include "text/tokenizer/utf8.h"
#include "util/error.h"

namespace {

using namespace dgemma;
using namespace dgemma::guided;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_guided: invariant violated: %s\n", what);
  std::abort();
}

CompileLimits small_limits() {
  CompileLimits l;
  l.max_repeat = 40;
  l.max_ast_nodes = 20000;
  l.max_nfa_states = 20000;
  l.max_dfa_states = 2000;
  l.max_work = 2'000'000;
  l.any_value_depth = 2;
  l.json_object_depth = 2;
  l.max_mask_work = 2'000'000;
  return l;
}

const std::shared_ptr<const TokenVocabulary>& byte_vocabulary() {
  static const std::shared_ptr<const TokenVocabulary> v = [] {
    std::vector<std::string> pieces = {""};
    std::vector<TokenKind> kinds = {TokenKind::kFiller};
    for (int b = 0; b < 256; ++b)
      pieces.emplace_back(1, static_cast<char>(b)), kinds.push_back(TokenKind::kText);
    for (const char* p : {"\": ", ", \"", "{\"", "\"}", "true", "null", "é", "ab"})
      pieces.emplace_back(p), kinds.push_back(TokenKind::kText);
    return TokenVocabulary::from_pieces(pieces, kinds);
  }();
  return v;
}

std::string walk_sample(const Dfa& dfa, std::mt19937_64& rng) {
  std::string out;
  int32_t s = dfa.start;
  for (int steps = 0; steps < 64; ++steps) {
    if (dfa.accepting[static_cast<size_t>(s)] && rng() % 4 == 0) break;
    std::vector<int> moves;
    for (int b = 0; b < 256; ++b)
      if (dfa.step(s, static_cast<uint8_t>(b)) >= 0) moves.push_back(b);
    if (moves.empty()) break;
    const int b = moves[rng() % moves.size()];
    out += static_cast<char>(b);
    s = dfa.step(s, static_cast<uint8_t>(b));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  ConstraintSpec spec;
  switch (data[0] % 3) {
    case 0:
      spec = ConstraintSpec::regex(body);
      break;
    case 1:
      spec = ConstraintSpec::json_schema(body);
      break;
    default: {
      std::vector<std::string> choices;
      size_t pos = 0;
      while (true) {
        const size_t nl = body.find('\n', pos);
        choices.push_back(body.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
        if (nl == std::string::npos) break;
        pos = nl + 1;
      }
      spec = ConstraintSpec::choice(choices);
    }
  }
  const CompileLimits limits = small_limits();
  std::shared_ptr<const TokenConstraint> c;
  try {
    c = compile_for_vocabulary(spec, byte_vocabulary(), limits);
  } catch (const Error&) {
    return 0;
  }
  try {
    check_constraint(spec, limits);
  } catch (const Error&) {
    die("compiles but fails the check");
  }
  const Dfa& dfa = c->dfa();
  const Dfa again = minimize(dfa);
  if (again.num_states != dfa.num_states || again.num_classes != dfa.num_classes) die("not minimal");
  std::mt19937_64 rng(
      std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(data), size)));
  for (int i = 0; i < 8; ++i) {
    const std::string text = walk_sample(dfa, rng);
    const int32_t end = walk_bytes(dfa, dfa.start, text);
    if (end < 0) die("a random walk left the automaton");
    const bool accepted = dfa.accepting[static_cast<size_t>(end)] != 0;
    if (accepted && spec.kind == ConstraintKind::kJsonSchema) {
      if (!utf8::is_valid(text)) die("accepted text is not UTF-8");
      if (nlohmann::json::parse(text, nullptr, false).is_discarded()) die("accepted text is not JSON");
    }
    std::vector<int32_t> ids;
    for (unsigned char b : text) ids.push_back(1 + b);
    const WalkResult w = c->walk(c->start(), ids);
    if (w.accepted != static_cast<int32_t>(ids.size()) || w.state != end)
      die("token walk differs from bytes");
    const auto rest = c->completion_tokens(w.state);
    if (!rest || !c->accepting(c->walk(w.state, *rest).state)) die("completion does not close the value");
    if (accepted && !rest->empty()) die("an accepting state needs a completion");
  }
  return 0;
}
