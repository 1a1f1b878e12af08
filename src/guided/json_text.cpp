#include "guided/json_text.h"

#include <cmath>

#include "guided/regex_parser.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void append(std::string& out, const OrderedJson& v) {
  switch (v.type()) {
    case OrderedJson::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        append_string(out, it.key());
        out += ": ";
        append(out, it.value());
      }
      out += '}';
      return;
    }
    case OrderedJson::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        append(out, v[i]);
      }
      out += ']';
      return;
    }
    case OrderedJson::value_t::string:
      return append_string(out, v.get_ref<const std::string&>());
    case OrderedJson::value_t::number_float:
      if (!std::isfinite(v.get<double>())) fail_arg("the number {} has no JSON text", v.get<double>());
      out += v.dump();
      return;
    default:
      out += v.dump();  // null, true, false, integers
  }
}

}  // namespace

std::string canonical_json(const OrderedJson& value) {
  std::string out;
  append(out, value);
  return out;
}

NodeId JsonText::string_char(const CodeSet& chars) {
  CodeSet special = CodeSet::range(0, 0x1F);
  special.add('"');
  special.add('\\');
  std::vector<NodeId> alts;
  if (CodeSet raw = chars.minus(special); !raw.empty()) alts.push_back(ast_.chars(std::move(raw)));
  // Escapes: \" \\ \b \f \n \r \t, the other controls as \u00xx.
  CodeSet letters;
  CodeSet low_digits, high_digits;  // xx = 0h / 1h
  const CodeSet escaped = chars.intersect(special);
  for (const auto& r : escaped.ranges()) {
    for (char32_t c = r.lo; c <= r.hi; ++c) {
      switch (c) {
        case '"':
          letters.add('"');
          break;
        case '\\':
          letters.add('\\');
          break;
        case '\b':
          letters.add('b');
          break;
        case '\f':
          letters.add('f');
          break;
        case '\n':
          letters.add('n');
          break;
        case '\r':
          letters.add('r');
          break;
        case '\t':
          letters.add('t');
          break;
        default:
          (c < 0x10 ? low_digits : high_digits).add(static_cast<char32_t>(kHex[c & 15]));
      }
    }
  }
  std::vector<NodeId> escapes;
  if (!letters.empty()) escapes.push_back(ast_.chars(std::move(letters)));
  std::vector<NodeId> unicode;
  if (!low_digits.empty())
    unicode.push_back(ast_.concat({ast_.bytes("0"), ast_.chars(std::move(low_digits))}));
  if (!high_digits.empty())
    unicode.push_back(ast_.concat({ast_.bytes("1"), ast_.chars(std::move(high_digits))}));
  if (!unicode.empty()) escapes.push_back(ast_.concat({ast_.bytes("u00"), ast_.alt(std::move(unicode))}));
  if (!escapes.empty()) alts.push_back(ast_.concat({ast_.bytes("\\"), ast_.alt(std::move(escapes))}));
  return ast_.alt(std::move(alts));
}

NodeId JsonText::encode_content(NodeId content) {
  return ast_.map_chars(content, [this](const CodeSet& set) {
    if (set == CodeSet::all()) {
      if (any_char_ < 0) any_char_ = string_char(set);
      return any_char_;
    }
    return string_char(set);
  });
}

NodeId JsonText::quoted(NodeId encoded_content) {
  return ast_.concat({ast_.bytes("\""), encoded_content, ast_.bytes("\"")});
}

NodeId JsonText::any_string() {
  if (any_string_ < 0) {
    if (any_char_ < 0) any_char_ = string_char(CodeSet::all());
    any_string_ = quoted(ast_.repeat(any_char_, 0, kUnbounded));
  }
  return any_string_;
}

NodeId JsonText::integer() {
  if (integer_ < 0) integer_ = parse_regex(ast_, "-?(0|[1-9][0-9]{0,19})");
  return integer_;
}

NodeId JsonText::number() {
  if (number_ < 0) number_ = parse_regex(ast_, "-?(0|[1-9][0-9]{0,19})(\\.[0-9]+)?([eE][+-]?[0-9]{1,2})?");
  return number_;
}

NodeId JsonText::boolean() {
  if (boolean_ < 0) boolean_ = ast_.alt({ast_.bytes("true"), ast_.bytes("false")});
  return boolean_;
}

NodeId JsonText::null() {
  return ast_.bytes("null");
}

NodeId JsonText::literal(const OrderedJson& value) {
  return ast_.bytes(canonical_json(value));
}

NodeId JsonText::any_value(int depth) {
  if (auto it = any_value_.find(depth); it != any_value_.end()) return it->second;
  std::vector<NodeId> alts = {any_string(), number(), boolean(), null()};
  if (depth > 0) {
    alts.push_back(any_object(depth));
    alts.push_back(any_array(depth));
  }
  const NodeId v = ast_.alt(std::move(alts));
  any_value_[depth] = v;
  return v;
}

NodeId JsonText::map_of(NodeId value) {
  const NodeId member = ast_.concat({any_string(), ast_.bytes(": "), value});
  return ast_.concat(
      {ast_.bytes("{"), ast_.repeat(member, 0, kUnbounded, ast_.bytes(", ")), ast_.bytes("}")});
}

NodeId JsonText::any_object(int depth) {
  if (auto it = any_object_.find(depth); it != any_object_.end()) return it->second;
  const NodeId o = map_of(any_value(depth - 1));
  any_object_[depth] = o;
  return o;
}

NodeId JsonText::any_array(int depth) {
  if (auto it = any_array_.find(depth); it != any_array_.end()) return it->second;
  const NodeId a = ast_.concat(
      {ast_.bytes("["), ast_.repeat(any_value(depth - 1), 0, kUnbounded, ast_.bytes(", ")), ast_.bytes("]")});
  any_array_[depth] = a;
  return a;
}

}  // namespace dgemma::guided
