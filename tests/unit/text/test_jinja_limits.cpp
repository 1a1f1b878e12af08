// The interpreter's bounds: runaway loops, recursion, output growth and nesting end in a clear
// dgemma::Error, never a hang or a stack overflow; and template-level errors name their line.
#include <gtest/gtest.h>

#include <string>

#include "text/jinja/template.h"
#include "util/error.h"

namespace dgemma {
namespace {

std::string error_of(const std::string& source, ErrorKind want_kind = ErrorKind::kInvalidArgument) {
  try {
    jinja::Template::parse(source).render({});
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), want_kind) << e.what();
    return e.what();
  }
  return "no error";
}

TEST(JinjaLimits, LoopIterations) {
  EXPECT_NE(error_of("{% for a in range(2000) %}{% for b in range(2000) %}{% endfor %}{% endfor %}").find("loop iterations"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(100000000) | length }}").find("loop iterations"), std::string::npos);
}

TEST(JinjaLimits, Recursion) {
  EXPECT_NE(error_of("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}").find("nested macro calls"), std::string::npos);
}

TEST(JinjaLimits, OutputSize) {
  const std::string doubling =
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}";
  EXPECT_NE(error_of(doubling).find("exceeds the limit"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("exceeds the limit"), std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}").find("exceeds the limit"), std::string::npos);
}

TEST(JinjaLimits, ParseNesting) {
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", ErrorKind::kUnsupported)
                .find("nested too deeply"),
            std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " ~ 1";
  EXPECT_NE(error_of(chain + " }}", ErrorKind::kUnsupported).find("nested too deeply"), std::string::npos);
  std::string filters = "{{ 'a'";
  for (int i = 0; i < 100000; ++i) filters += " | upper";
  EXPECT_NE(error_of(filters + " }}", ErrorKind::kUnsupported).find("nested too deeply"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_NE(error_of(blocks, ErrorKind::kUnsupported).find("nested too deeply"), std::string::npos);
}

TEST(JinjaLimits, ValueNesting) {
  EXPECT_NE(error_of("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}")
                .find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.me = ns %}").find("namespace"), std::string::npos);
}

TEST(JinjaLimits, RuntimeErrorsNameTheLine) {
  EXPECT_NE(error_of("line one\n{{ 1 }}\n{{ nothing.attr }}").find("chat template line 3: UndefinedError"), std::string::npos);
  // raise_exception's message is the template's own, verbatim.
  EXPECT_EQ(error_of("{{ raise_exception('Only user and assistant roles are supported!') }}"),
            "Only user and assistant roles are supported!");
}

}  // namespace
}  // namespace dgemma
