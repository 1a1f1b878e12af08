#pragma once
// Jinja lexer with the environment transformers uses for chat templates: default delimiters,
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, newlines normalised to "\n".
// Whitespace control (`{%-`, `-%}`, `{%+`, `+%}`) and comments are resolved here: the parser sees
// data text exactly as jinja2 would emit it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dgemma::jinja {

enum class TokenType { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokenType type;
  std::string text;  // data, name, decoded string literal, operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Throws Error(kUnsupported) "chat template line N: ..." for malformed input.
std::vector<Token> tokenize(std::string_view source);

// "chat template line N: message" as a kUnsupported error (a template the server cannot start with).
[[noreturn]] void syntax_error(int line, const std::string& message);

}  // namespace dgemma::jinja
