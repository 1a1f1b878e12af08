#pragma once
// Reads the subset of YAML that configuration files use (vLLM's `serve --config FILE.yaml`) into JSON:
//   - a top-level mapping of `key: value` lines, `#` comments, an optional leading `---`;
//   - values: plain or quoted scalars ("..." with JSON's escapes, '...' with '' for a quote), flow
//     collections ([a, b], {k: v}, JSON itself; they may run over several lines), block sequences
//     ("- item", items may be mappings), nested block mappings, block scalars (| and >, with - or +);
//   - plain scalars are typed as PyYAML's safe_load types them in such files: true/false/yes/no/on/off
//     (any case form YAML 1.1 lists) are booleans, null/~/nothing is null, [-+]digits an integer,
//     digits with a '.' (and an optional exponent) a float, anything else a string.
// Anchors, aliases, tags, several documents, complex keys, duplicate keys, tabs in indentation and
// nesting deeper than 64 levels are errors: Error(kInvalidArgument) "WHAT line N: ...".
#include <string_view>

#include "util/json.h"

namespace dgemma {

Json parse_yaml_config(std::string_view text, std::string_view what);

}  // namespace dgemma
