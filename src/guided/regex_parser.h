#pragma once
// The regex dialect clients send (vLLM's guided_regex, JSON Schema "pattern"), parsed into an Ast.
//
// A pattern matches the whole text (full match). Supported:
//   literals (UTF-8; any code point), escapes \t \n \r \f \v \0 \xHH \uHHHH \u{H...} \UHHHHHHHH and
//   \ before any ASCII punctuation; classes \d \w \s (ASCII digits, [A-Za-z0-9_], the ECMAScript white
//   space set) and \D \W \S; [...] and [^...] with ranges and those escapes (\b is U+0008 inside a
//   class); "." (any code point but \n, \r, U+2028, U+2029: the ECMAScript set, which is within
//   Python's); alternation |; groups (...), (?:...), (?P<name>...), (?<name>...); quantifiers ? * +
//   {m} {m,} {m,n}, lazy forms (*? ... : the same language under full match); ^ \A at the start and
//   $ \Z \z at the end of a top-level alternative (no-ops under full match). "{" that does not start a
//   quantifier is a literal, as in Python and ECMAScript.
// Anything else is Error(kUnsupported) naming the construct: backreferences, lookaround, word
// boundaries, inline flags, possessive quantifiers, atomic groups, Unicode property escapes, anchors
// inside the pattern. Malformed patterns are Error(kInvalidArgument) with the byte offset.
// Matching is by code point: a class or "." matches one whole UTF-8 encoded scalar value.
#include <string_view>

#include "guided/regex_ast.h"

namespace dgemma::guided {

NodeId parse_regex(Ast& ast, std::string_view pattern);

// The whitespace set of \s (ECMAScript's WhiteSpace and LineTerminator).
CodeSet regex_space_set();

}  // namespace dgemma::guided
