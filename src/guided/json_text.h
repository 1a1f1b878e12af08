#pragma once
// The JSON text form a JSON constraint accepts (src/guided/guided.h describes it), as building blocks
// of the syntax tree, and the canonical text of a JSON value in that form.
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "guided/regex_ast.h"

namespace dgemma::guided {

using OrderedJson = nlohmann::ordered_json;

// json.dumps(value, ensure_ascii=False) of Python: ", " and ": " separators, no other white space;
// strings escape only '"', '\\' and U+0000..U+001F (\b \f \n \r \t, else \u00xx in lower case).
// Throws Error(kInvalidArgument) for a number that has no JSON text (infinite).
std::string canonical_json(const OrderedJson& value);

class JsonText {
 public:
  explicit JsonText(Ast& ast) : ast_(ast) {}

  // One character of `chars` as it appears inside a JSON string (raw, or its escape).
  NodeId string_char(const CodeSet& chars);
  // A tree over characters (a regex, a length bound) rewritten to the encodings of its characters.
  NodeId encode_content(NodeId content);
  NodeId quoted(NodeId encoded_content);  // "\"" content "\""
  NodeId any_string();
  NodeId integer();  // -?(0|[1-9][0-9]{0,19})
  NodeId number();   // the JSON number grammar, at most 20 integer digits and 2 exponent digits
  NodeId boolean();
  NodeId null();
  NodeId literal(const OrderedJson& value);  // the canonical text of one value
  // Any JSON value whose containers nest at most `depth` deep (0: scalars only).
  NodeId any_value(int depth);
  // Any object (depth >= 1 counts the object itself).
  NodeId any_object(int depth);
  NodeId any_array(int depth);
  // "{" key ": " value (", " key ": " value)* "}" with any string keys.
  NodeId map_of(NodeId value);

 private:
  Ast& ast_;
  NodeId any_char_ = -1, any_string_ = -1, integer_ = -1, number_ = -1, boolean_ = -1;
  std::unordered_map<int, NodeId> any_value_, any_object_, any_array_;
};

}  // namespace dgemma::guided
