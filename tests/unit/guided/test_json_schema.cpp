// JSON Schema to automata (src/guided/json_schema.h): the text form, each keyword, Pydantic's shapes,
// and the errors for schemas outside the subset.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "example_schemas.h"
#include "guided_test_util.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

using test::schema_dfa;

struct Case {
  std::string schema;
  std::vector<std::string> yes, no;
};

void expect_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const Dfa dfa = schema_dfa(c.schema);
    for (const std::string& s : c.yes) EXPECT_TRUE(accepts(dfa, s)) << c.schema << " should accept " << s;
    for (const std::string& s : c.no) EXPECT_FALSE(accepts(dfa, s)) << c.schema << " should reject " << s;
  }
}

TEST(GuidedJsonSchema, ScalarsInTheTextForm) {
  expect_cases({
      {R"({"type": "integer"})",
       {"0", "-7", "12345678901234567890", "-99999999999999999999"},
       {"", "01", "-", "1.0", "1e3", "+1", " 1", "--1", "123456789012345678901"}},
      {R"({"type": "number"})",
       {"0", "-0.5", "1e10", "2.5E-3", "10", "1E+2", "-99999999999999999999.000001e-99"},
       {".5", "1.", "1e", "01", "NaN", "Infinity", "1e100", "123456789012345678901"}},
      {R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null"}},
      {R"({"type": "null"})", {"null"}, {"None", ""}},
      {R"({"type": "string"})",
       {R"("")", R"("héllo 漢 😀")", R"("a\"b\\c")", R"("\n\r\t\b\f")", R"("\u0001\u001f")", "\"/\x7F\""},
       {"\"a\nb\"", "\"\t\"", R"("\u0041")", R"("\/")", R"("\x")", R"("\u001F")", "\"\xC3\"", R"(")",
        R"("a)"}},
      {R"({"type": ["string", "null"]})", {"null", R"("x")"}, {"1"}},
      {R"({"type": ["integer", "number"]})", {"1", "1.5"}, {"\"1\""}},
  });
}

TEST(GuidedJsonSchema, StringKeywords) {
  expect_cases({
      {R"({"type": "string", "minLength": 2, "maxLength": 3})",
       {R"("ab")", R"("abc")", R"("é漢")", R"("\n\"")", R"("😀😀😀")"},
       {R"("a")", R"("abcd")", R"("")", R"("\n")"}},
      {R"({"type": "string", "pattern": "^[a-z]+-\\d{2}$"})",
       {R"("ab-12")"},
       {R"("ab-1")", R"("Ab-12")", R"("x ab-12")"}},
      {R"({"type": "string", "pattern": "^[\"\\\\]+$"})", {R"("\"")", R"("\\\"")"}, {R"(""")", R"("a")"}},
      {R"({"type": "string", "pattern": "^.{2}$"})",
       {R"("é漢")", R"("a\"")", R"("\t\t")"},
       {R"("a")", R"("abc")"}},
      {R"({"type": "string", "pattern": "^[a-c]+$", "maxLength": 2})", {R"("ab")"}, {R"("abc")", R"("")"}},
      {R"({"type": "string", "format": "date"})",
       {R"("2024-02-29")", R"("2000-02-29")", R"("2023-12-31")", R"("0001-01-01")", R"("2023-04-30")"},
       {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")", R"("0000-01-01")",
        R"("2023-1-01")"}},
      {R"({"type": "string", "format": "date-time"})",
       {R"("2024-01-02T03:04:05Z")", R"("2024-01-02T23:59:59.123456+05:30")",
        R"("2024-01-02T00:00:00-00:00")"},
       {R"("2024-01-02 03:04:05Z")", R"("2024-01-02T24:00:00Z")", R"("2024-01-02T03:04:05")",
        R"("2024-01-02T03:04:05.1234567Z")"}},
      {R"({"type": "string", "format": "uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")", R"("123E4567-E89B-12D3-A456-426614174000")"},
       {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"}},
      {R"({"type": "string", "format": "email"})",
       {R"("a.b+c@example.com")", R"("x@a-b.co.uk")", R"("o'neil@x.io")"},
       {R"("a@b")", R"("@b.com")", R"("a..b@c.com")", R"("a@-b.com")", R"("a b@c.com")", R"("a@b.com.")"}},
  });
}

TEST(GuidedJsonSchema, EnumConstAndCombinators) {
  expect_cases({
      {R"({"enum": ["a", 1, null, [1, "x"], {"k": true}]})",
       {R"("a")", "1", "null", R"([1, "x"])", R"({"k": true})"},
       {R"("b")", "1.0", R"([1,"x"])", R"({"k":true})"}},
      {R"({"const": "a\nb"})", {R"("a\nb")"}, {"\"a\nb\""}},
      {R"({"type": "string", "enum": ["a", 1, "b"]})", {R"("a")", R"("b")"}, {"1"}},
      {R"({"anyOf": [{"type": "integer"}, {"type": "null"}]})", {"1", "null"}, {"1.5"}},
      {R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})", {"1.5", "1e3"}, {"1", "-2"}},
      {R"({"allOf": [{"type": "string", "minLength": 2}, {"type": "string", "maxLength": 2}]})",
       {R"("ab")"},
       {R"("a")", R"("abc")"}},
      {R"(true)", {"1", R"({"a": [1, {"b": null}]})"}, {"", "{a}"}},
      {R"({})", {"1", R"("x")", "[]"}, {"[1,2]"}},
      {R"({"description": "annotations only", "title": "T", "examples": [1], "default": 2})", {"1"}, {}},
  });
}

TEST(GuidedJsonSchema, ObjectsInDeclarationOrder) {
  const std::string schema = R"({
    "type": "object",
    "properties": {"b": {"type": "integer"}, "a": {"type": "string"}, "c": {"type": "boolean"}},
    "required": ["a"]
  })";
  expect_cases({
      {schema,
       {R"({"a": "x"})", R"({"b": 1, "a": "x"})", R"({"a": "x", "c": true})",
        R"({"b": 1, "a": "x", "c": false})"},
       {R"({})", R"({"b": 1})", R"({"a": "x", "b": 1})", R"({"a":"x"})", R"({ "a": "x"})",
        R"({"a": "x", "d": 1})", R"({"a": "x",})"}},
      {R"({"type": "object", "properties": {"x": {"type": "integer"}}})",
       {"{}", R"({"x": 1})"},
       {R"({"x": 1, "y": 2})"}},
      {R"({"type": "object", "additionalProperties": false})", {"{}"}, {R"({"a": 1})"}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}})",
       {"{}", R"({"a": 1})", R"({"a": 1, "b\n": 2})"},
       {R"({"a": "x"})"}},
      {R"({"type": "object"})", {"{}", R"({"a": {"b": [1, "x", null]}})"}, {"[]"}},
      {R"({"type": "object", "required": ["z"], "properties": {"a": {"type": "null"}}})",
       {R"({"a": null, "z": 1})", R"({"z": "q"})"},
       {R"({"a": null})"}},
      {R"({"type": "object", "properties": {"k\"ey": {"const": 1}}, "required": ["k\"ey"]})",
       {R"({"k\"ey": 1})"},
       {}},
  });
}

TEST(GuidedJsonSchema, Arrays) {
  expect_cases({
      {R"({"type": "array", "items": {"type": "integer"}})",
       {"[]", "[1]", "[1, 2, 3]"},
       {"[1,2]", "[1, ]", "[ 1]", "[\"a\"]"}},
      {R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})",
       {"[1]", "[1, 2]"},
       {"[]", "[1, 2, 3]"}},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
           "minItems": 2, "maxItems": 2})",
       {R"([1, "a"])"},
       {"[1]", R"([1, "a", 2])", R"(["a", 1])"}},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}})",
       {"[]", "[1]", R"([1, "a", "b"])"},
       {R"(["a"])", "[1, 2]"}},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}], "items": false})",
       {"[]", "[1]"},
       {"[1, 2]"}},
      {R"({"type": "array"})", {"[]", R"([1, "a", [null]])"}, {}},
      {R"({"type": "array", "uniqueItems": false, "items": {"type": "null"}})", {"[null, null]"}, {}},
  });
}

TEST(GuidedJsonSchema, PydanticModel) {
  const Dfa dfa = schema_dfa(test::kPydanticOrder);
  const std::string good = test::kPydanticOrderText;
  EXPECT_TRUE(accepts(dfa, good));
  std::string with_gift = good;
  with_gift.insert(with_gift.find(R"(, "kind")"), R"(, "gift": null)");
  EXPECT_TRUE(accepts(dfa, with_gift));
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {R"("shipped")", R"("lost")"},
           {R"("items": [{"sku": "A-1", "quantity": 2, "price": 9.5}])", R"("items": [])"},
           {R"("zip": "75001")", R"("zip": "7500")"},
           {R"("customer": "Ada")", R"("customer": "")"},
           {R"("kind": "order")", R"("kind": "Order")"},
           {R"("sku": "A-1")", R"("sku": "A-123456789012")"},
           {R"("quantity": 2)", R"("quantity": 2.0)"},
           {"2024-05-06T07:08:09Z", "2024-05-06"}}) {
    std::string bad = good;
    bad.replace(bad.find(from), from.size(), to);
    EXPECT_FALSE(accepts(dfa, bad)) << bad;
  }
  EXPECT_LT(dfa.num_states, 2000);
}

TEST(GuidedJsonSchema, RefsAndRecursion) {
  expect_cases({
      {R"({"$defs": {"a~b/c": {"type": "integer"}}, "$ref": "#/$defs/a~0b~1c"})", {"1"}, {"\"1\""}},
      {R"({"definitions": {"A": {"type": "null"}}, "type": "array", "items": {"$ref": "#/definitions/A"}})",
       {"[null, null]"},
       {"[1]"}},
      {R"({"$defs": {"A": {"type": "integer"}}, "$ref": "#/$defs/A", "enum": [1, 2, "x"]})",
       {"1", "2"},
       {"\"x\"", "3"}},
      {R"({"$defs": {"P": {"type": "array", "items": {"$ref": "#/$defs/Q"}}, "Q": {"type": "string"}},
          "type": "object", "properties": {"p": {"$ref": "#/$defs/P"}, "q": {"$ref": "#/$defs/P"}},
          "required": ["p"]})",
       {R"({"p": ["a"], "q": []})"},
       {R"({"q": []})"}},
  });
  for (const std::string schema :
       {R"({"type": "object", "properties": {"child": {"$ref": "#"}}})",
        R"({"$defs": {"Node": {"type": "object",
            "properties": {"next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}}}},
            "$ref": "#/$defs/Node"})",
        R"({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"})"}) {
    try {
      schema_dfa(schema);
      ADD_FAILURE() << "recursive schema compiled: " << schema;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("recursive $ref"), std::string::npos) << e.what();
    }
  }
}

TEST(GuidedJsonSchema, KeywordsOutsideTheSubsetAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type": "integer", "minimum": 0})", "'minimum'"},
      {R"({"type": "object", "properties": {"x": {"type": "number", "multipleOf": 2}}})", "'multipleOf'"},
      {R"({"type": "object", "patternProperties": {"^a": {}}})", "'patternProperties'"},
      {R"({"type": "object", "properties": {"a": {}}, "additionalProperties": {"maximum": 1}})", "'maximum'"},
      {R"({"type": "object", "minProperties": 1})", "'minProperties'"},
      {R"({"not": {"type": "null"}})", "'not'"},
      {R"({"if": {}, "then": {}})", "'if'"},
      {R"({"type": "array", "contains": {}})", "'contains'"},
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems: true"},
      {R"({"type": "string", "format": "ipv4"})", "format \"ipv4\""},
      {R"({"$ref": "other.json#/a"})", "another document"},
      {R"({"type": "object", "properties": {"a": {"$id": "x", "type": "null"}}})", "'$id'"},
      {R"x({"type": "string", "pattern": "(?=a)"})x", "lookahead"},
      {R"({"$dynamicRef": "#a"})", "'$dynamicRef'"},
  };
  for (const auto& [schema, word] : cases) {
    for (bool compile : {false, true}) {
      try {
        if (compile)
          schema_dfa(schema);
        else
          check_constraint(ConstraintSpec::json_schema(schema));
        ADD_FAILURE() << schema << " passed";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << schema << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << schema << ": " << e.what();
      }
    }
  }
}

TEST(GuidedJsonSchema, MalformedSchemasAreInvalidArguments) {
  for (const std::string schema :
       {"", "[", "{\"type\": 1}", R"({"type": "text"})", R"({"type": []})", R"({"type": ["null", "null"]})",
        R"({"enum": []})", R"({"enum": 1})", R"({"required": "a"})", R"({"required": ["a", "a"]})",
        R"({"properties": []})", R"({"minLength": -1})", R"({"maxItems": 1.5})", R"({"minLength": 100000})",
        R"({"anyOf": []})", R"({"$ref": "#/$defs/missing"})", R"({"additionalProperties": 1})", "1",
        R"({"pattern": 1})", R"({"type": "string", "pattern": "("})",
        // Admits nothing:
        R"({"type": "string", "minLength": 3, "maxLength": 2})", R"({"type": "integer", "enum": ["a"]})",
        R"({"type": "object", "additionalProperties": false, "required": ["a"]})", R"(false)",
        R"({"oneOf": [{"type": "integer"}, {"type": "integer"}]})"}) {
    try {
      schema_dfa(schema);
      ADD_FAILURE() << schema << " compiled";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << schema << ": " << e.what();
    }
  }
}

TEST(GuidedJsonSchema, JsonObjectAndChoices) {
  const Dfa obj = compile_constraint(ConstraintSpec::json_object());
  for (const char* yes : {"{}", R"({"a": 1})", R"({"a": {"b": {"c": {"d": [1]}}}, "e": "x"})"})
    EXPECT_TRUE(accepts(obj, yes)) << yes;
  for (const char* no : {"[]", "1", R"({"a": 1,})", R"({"a": {"b": {"c": {"d": {"e": [1]}}}}})", "{ }"})
    EXPECT_FALSE(accepts(obj, no)) << no;

  const Dfa choice = compile_constraint(ConstraintSpec::choice({"yes", "no", "maybe so", "", "漢"}));
  for (const char* yes : {"yes", "no", "maybe so", "", "漢"}) EXPECT_TRUE(accepts(choice, yes)) << yes;
  for (const char* no : {"ye", "\"yes\"", "yes ", "maybe"}) EXPECT_FALSE(accepts(choice, no)) << no;
  EXPECT_THROW(compile_constraint(ConstraintSpec::choice({})), Error);
  EXPECT_THROW(compile_constraint(ConstraintSpec::choice({"\xC3"})), Error);
}

}  // namespace
}  // namespace dgemma::guided
