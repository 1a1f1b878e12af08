#pragma once
// JSON Schema to the language of its instances in the JSON text form (guided.h), for the subset of
// the schema language clients send:
//   type (a name or a list), enum, const, anyOf, oneOf, allOf, $ref into the same document ($defs,
//   definitions, any "#/..." pointer; a recursive reference is an error), boolean schemas;
//   objects: properties, required, additionalProperties (false, true or a schema);
//   arrays: items (a schema or a boolean), prefixItems, minItems, maxItems, uniqueItems: false;
//   strings: minLength, maxLength, pattern (regex_parser.h; matched against the whole string), format
//   date / date-time / uuid / email (json_formats.h);
//   annotations (ignored): title, description, default, examples, $schema, $comment, deprecated,
//   readOnly, writeOnly, discriminator, contentEncoding, contentMediaType, $defs, definitions, $id at
//   the root.
// Any other keyword is Error(kUnsupported) naming it and where it is; a malformed schema is
// Error(kInvalidArgument). The language is a subset of the schema's instances (every accepted text
// validates), equal to it except where guided.h says otherwise.
#include <string_view>

#include "guided/dfa.h"
#include "guided/json_text.h"
#include "guided/limits.h"

namespace dgemma::guided {

// Parses schema text keeping the order of object members (properties are written in declaration
// order). Throws Error(kInvalidArgument) on bad JSON, nesting past limits.max_nesting or text past
// limits.max_source_bytes.
OrderedJson parse_schema_text(std::string_view text, const CompileLimits& limits);

// Checks that `schema` lies in the subset (keywords, $ref targets, patterns, formats) without building
// automata. Throws as compile_json_schema would for those reasons.
void check_json_schema(const OrderedJson& schema, const CompileLimits& limits);

// The automaton of the schema's instances in the text form. Throws Error(kInvalidArgument) when no
// text satisfies it, or past a limit.
Dfa compile_json_schema(const OrderedJson& schema, const CompileLimits& limits);

// Any JSON object whose containers nest at most limits.json_object_depth deep.
Dfa compile_json_object(const CompileLimits& limits);

}  // namespace dgemma::guided
