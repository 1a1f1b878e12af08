#pragma once
#include <string_view>

#include "text/jinja/ast.h"

namespace dgemma::jinja {

// Parses a template; throws Error(kUnsupported) "chat template line N: ..." naming the construct for
// syntax errors and for Jinja features the interpreter does not implement.
Program parse_template(std::string_view source);

}  // namespace dgemma::jinja
