#pragma once
// Gemma 4 tool-call argument syntax -> JSON. The model writes arguments as
//   {key:<|"|>text<|"|>,n:42,flag:true,obj:{...},arr:[...]}
// (bare keys, strings delimited by the <|"|> token on both sides, bare numbers/true/false/null).
// Lenient on the malformed forms DiffusionGemma emits (SERVING.md §2.1): JSON double quotes or single
// quotes instead of <|"|>, quoted keys, '=' instead of ':', python-ish literals (True/False/None),
// parenthesised keyword bodies "(a='x', n=3)", trailing commas, bare words as strings.
#include <string_view>

#include "util/json.h"

namespace dgemma {

// Parses an argument object ("{...}" or "(...)") into a JSON object. Throws Error(kInvalidArgument)
// if the text is not a complete, parseable argument body.
Json gemma4_args_to_json(std::string_view args);

// Parses one value in gemma4 argument syntax starting at text[pos]; on success advances pos past it.
// Throws Error(kInvalidArgument) on malformed or incomplete input.
Json gemma4_parse_value(std::string_view text, size_t& pos);

// Serialises like Python's json.dumps(ensure_ascii=False): ", " and ": " separators, non-ASCII kept.
std::string gemma4_dump_json(const Json& value);

}  // namespace dgemma
