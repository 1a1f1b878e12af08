#pragma once
// Python str operations on UTF-8 text, with Python's whitespace and line-break sets. Case mapping uses
// the Unicode tables of the chat-template renderer (generated from Python); character classes beyond
// ASCII (isalpha, isdigit) are approximations (cased letters count as alphabetic).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dgemma::jinja {

class Interpreter;

bool py_is_space(uint32_t cp);
std::vector<uint32_t> code_points(std::string_view s);
std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end);

// side: 0 both, -1 left, 1 right.
std::string py_strip_ws(std::string_view s, int side);
std::string py_strip_chars(std::string_view s, std::string_view chars, int side);
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count, Interpreter& in);
std::string py_title_method(std::string_view s);  // str.title()
std::string py_capitalize(std::string_view s);    // str.capitalize()
std::string py_swapcase(std::string_view s);
std::string jinja_title(std::string_view s);      // the `title` filter (splits at -, whitespace, brackets)
// kind: 'd' isdigit, 'a' isalpha, 'n' isalnum, 's' isspace.
bool py_is_class(std::string_view s, char kind);
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);

}  // namespace dgemma::jinja
