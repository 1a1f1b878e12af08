#pragma once
// Internals of the chat-template renderer: a model of the Python/Jinja values the template sees
// (jinja2's Undefined, dict/list/str semantics, the sandbox's item lookup) and the Python string
// functions whose exact output the template exposes (str(), repr(), upper, lower, strip).
// Only chat_template*.cpp and the Jinja interpreter (src/text/jinja/) include this.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/chat_template.h"
#include "util/json.h"

namespace dgemma::chat_detail {

// ---- Unicode tables generated from Python (chat_template_unicode.cpp) ----
struct CaseRun {  // maps first, first+stride, ... (count code points) to cp + delta
  uint32_t first;
  int count;
  int stride;
  int delta;
};
struct CaseSpecial {  // a code point whose mapping is several characters
  uint32_t cp;
  const char* utf8;
};
struct PrintableRange {  // [begin, end)
  uint32_t begin;
  uint32_t end;
};
struct UnicodeTables {
  const CaseRun* upper_runs;
  size_t upper_runs_size;
  const CaseSpecial* upper_specials;
  size_t upper_specials_size;
  const CaseRun* lower_runs;
  size_t lower_runs_size;
  const CaseSpecial* lower_specials;
  size_t lower_specials_size;
  const PrintableRange* printable;
  size_t printable_size;
};
extern const UnicodeTables kUnicodeTables;

// ---- Python string functions (UTF-8 in, UTF-8 out) ----
std::string py_upper(std::string_view s);  // str.upper()
std::string py_lower(std::string_view s);  // str.lower() (no final-sigma context rule)
std::string py_strip(std::string_view s);  // str.strip() with Python's whitespace set
bool py_isprintable(uint32_t cp);
std::string py_repr_string(std::string_view s);
std::string py_float_repr(double d);
std::string py_str(const Json& j);   // str(x) for a JSON-derived Python value
std::string py_repr(const Json& j);  // repr(x)
bool py_truthy(const Json& j);
bool py_equal(const Json& a, const Json& b);

// Splits valid UTF-8 into code points (the parser guarantees validity; invalid bytes map to U+FFFD).
std::vector<uint32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, uint32_t cp);

// A runtime failure of the template (Python TypeError, jinja2 UndefinedError, raise_exception).
// The renderer turns it into Error(kInvalidArgument) with the request parameter attached.
[[noreturn]] void template_error(std::string message);

// A value as the Jinja template sees it: jinja2's Undefined, a JSON-derived Python object, or a bound
// dict method (what `d['items']` yields in jinja2 when d has no 'items' key).
class Value {
 public:
  enum class Kind { kUndefined, kJson, kMethod };

  Value() = default;  // Undefined
  static Value borrow(const Json& j) { return Value(Kind::kJson, &j, nullptr); }
  static Value own(Json j) {
    auto p = std::make_shared<const Json>(std::move(j));
    const Json* raw = p.get();
    return Value(Kind::kJson, raw, std::move(p));
  }
  static Value method() { return Value(Kind::kMethod, nullptr, nullptr); }
  static Value none();
  static Value str(std::string s) { return own(Json(std::move(s))); }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_json() const { return kind_ == Kind::kJson; }
  const Json& json() const;  // only for kJson

  // Jinja tests.
  bool is_none() const { return is_json() && json_->is_null(); }
  bool is_string() const { return is_json() && json_->is_string(); }
  bool is_boolean() const { return is_json() && json_->is_boolean(); }
  bool is_mapping() const { return is_json() && json_->is_object(); }
  // jinja2's `sequence` test: anything with len() and __getitem__ (str, list, dict, and Undefined).
  bool is_sequence() const;
  bool truthy() const;
  const std::string& as_string() const { return json_->get_ref<const std::string&>(); }

  // `x[key]` / `x.key` in the sandbox: dict item, else a safe attribute, else Undefined. Fails on
  // Undefined (jinja2 raises UndefinedError).
  Value operator[](std::string_view key) const;
  Value index(size_t i) const;  // `x[i]` on a list (Undefined when out of range)
  // `x.get(key)`: None when absent; fails unless x is a dict.
  Value get(std::string_view key) const;
  // `for item in x`: list items, dict keys, string characters, nothing for Undefined; fails otherwise.
  std::vector<Value> iterate() const;
  // `x | dictsort`: (key, value) pairs sorted by key.lower(), stable; fails unless x is a dict.
  std::vector<std::pair<const std::string*, Value>> dictsort() const;

  bool equals(const Value& other) const;   // Python ==
  bool equals(std::string_view s) const;   // x == 'literal'
  bool contains(std::string_view needle) const;  // 'needle' in x
  std::string to_str() const;              // {{ x }}: str(x), '' for Undefined
  std::string upper() const { return py_upper(to_str()); }  // x | upper

 private:
  Value(Kind kind, const Json* json, std::shared_ptr<const Json> owned)
      : kind_(kind), json_(json), owned_(std::move(owned)) {}

  Kind kind_ = Kind::kUndefined;
  const Json* json_ = nullptr;
  std::shared_ptr<const Json> owned_;  // set for temporaries (dict keys, characters, built strings)
};

// str + x: Python's concatenation, which only accepts another str.
std::string concat_str(const Value& v, std::string_view what);

}  // namespace dgemma::chat_detail

namespace dgemma {

// The request checks every chat template render starts with (chat_template.cpp): messages is an array
// of objects with a known string role and content that is a string, null or a list of part objects.
void validate_chat_messages(const Json& messages);
// CRLF -> LF, trailing whitespace removed: what template recognition hashes.
std::string normalise_template_text(std::string_view text);
// The DiffusionGemma template `jinja_text` is (by SHA-256 of the normalised text), if any.
std::optional<ChatTemplateKind> recognise_template(std::string_view jinja_text);

}  // namespace dgemma
