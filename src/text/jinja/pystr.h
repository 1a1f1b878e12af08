#pragma once
// Python str operations on UTF-8 text, with Python's whitespace and line-break sets. Case mapping and
// isprintable use Unicode tables generated from Python (unicode_tables.h); character classes beyond
// ASCII (isalpha, isdigit) are approximations (cased letters count as alphabetic).
// Text is split into code points with invalid bytes kept: each decodes to 0xDC00 + byte (never produced
// by valid UTF-8) and append_code_point writes it back unchanged, so nothing is lost.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dgemma::jinja {

class Interpreter;

bool py_is_space(uint32_t cp);  // str.isspace() of one character, the `\s` of a str regex
// The code point at s[i] (i < s.size()) into *cp; returns its length in bytes.
size_t decode_code_point(std::string_view s, size_t i, uint32_t* cp);
std::vector<uint32_t> code_points(std::string_view s);
void append_code_point(std::string& out, uint32_t cp);
std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end);

std::string py_upper(std::string_view s);        // str.upper()
std::string py_lower(std::string_view s);        // str.lower() (no final-sigma context rule)
std::string py_repr_string(std::string_view s);  // repr(str)
std::string py_float_repr(double d);             // repr(float)

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
