#pragma once
// The string formats a JSON Schema may name, as regexes over the string's characters. Each accepts
// only strings that the strict checkers accept (a real calendar date, RFC 3339 date-time, RFC 4122
// layout, a dot-atom address), so a generated value always validates.
//   date       YYYY-MM-DD, year 0001..9999, days per month, 29 February in leap years only
//   date-time  date "T" hh:mm:ss, optional .fraction of 1..6 digits, then "Z" or +hh:mm / -hh:mm
//   uuid       8-4-4-4-12 hexadecimal digits, either case
//   email      dot-atom local part "@" two or more dot-separated host labels (letters, digits, inner '-')
#include <optional>
#include <string_view>

namespace dgemma::guided {

// The regex of `format`, or nullopt for a format outside that list.
std::optional<std::string_view> format_regex(std::string_view format);

}  // namespace dgemma::guided
