// The Jinja interpreter against python3-jinja2: every case of tests/fixtures/jinja/corpus.json (made by
// tools/jinja/make_corpus.py with transformers' environment) rendered byte for byte, or failing
// where jinja2 raised.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "text/jinja/template.h"
#include "util/error.h"

namespace dgemma {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

OrderedJson load_corpus() {
  const fs::path path = fs::path(DGEMMA_SOURCE_DIR) / "tests" / "fixtures" / "jinja" / "corpus.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return OrderedJson::parse(ss.str());  // ordered: the templates see the data's key order, as Python does
}

TEST(JinjaCorpus, MatchesJinja2) {
  const OrderedJson corpus = load_corpus();
  int rendered = 0, raised = 0;
  for (const auto& c : corpus.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string source = c.at("template").get<std::string>();
    SCOPED_TRACE(name + ": " + source.substr(0, 300));
    std::vector<std::pair<std::string, jinja::Value>> context;
    for (auto it = c.at("context").begin(); it != c.at("context").end(); ++it)
      context.emplace_back(it.key(), jinja::Value::from_json(it.value()));
    std::string got;
    bool failed = false;
    std::string failure;
    try {
      got = jinja::Template::parse(source).render(context);
    } catch (const Error& e) {
      failed = true;
      failure = e.what();
      EXPECT_TRUE(e.kind() == ErrorKind::kInvalidArgument || e.kind() == ErrorKind::kUnsupported) << failure;
    }
    if (c.contains("error")) {
      EXPECT_TRUE(failed) << "jinja2 raised " << c.at("error").get<std::string>() << "\nwe rendered: " << got;
      raised += failed;
    } else {
      const std::string want = c.at("expected").get<std::string>();
      EXPECT_FALSE(failed) << failure;
      EXPECT_EQ(got, want);
      rendered += !failed && got == want;
    }
  }
  std::printf("[ corpus   ] %zu cases: %d byte-identical renders, %d jinja2 errors reproduced\n", corpus.at("cases").size(),
              rendered, raised);
  EXPECT_GE(rendered, 700);
}

}  // namespace
}  // namespace dgemma
