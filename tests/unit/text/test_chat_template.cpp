// The chat templates against python3-jinja2 rendering the real DiffusionGemma templates
// (tests/fixtures/chat_template/, made by tools/chat_template/render_expectations.py): the Jinja
// interpreter running the reference template files themselves and the embedded model's own template
// (models/tiny-code/chat_template.jinja, the DiffusionGemma July format); plus template recognition.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "../reference_data.h"
#include "text/chat/chat_template.h"
#include "util/error.h"
#include "util/json.h"

namespace dgemma {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(DGEMMA_SOURCE_DIR) / "tests" / "fixtures" / "chat_template";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json read_json(const fs::path& path) { return parse_json(read_file(path), path.string(), true); }

struct MatrixResult {
  int rendered = 0;  // byte-identical renders
  int errors = 0;    // template raised and we threw
  int rejected = 0;  // jinja renders something we refuse on purpose (cpp_rejects)
};

MatrixResult run_matrix(const ChatTemplate& tmpl, const std::string& conversations_file, const std::string& expected_file) {
  const Json conversations = read_json(kFixtures / conversations_file);
  const Json expected = read_json(kFixtures / expected_file);
  MatrixResult result;
  for (const Json& conv : conversations) {
    const std::string name = conv.at("name").get<std::string>();
    SCOPED_TRACE(name);
    if (!expected.contains(name)) {
      ADD_FAILURE() << "no expectation for " << name << ": regenerate the expectations";
      continue;
    }
    const Json& want = expected.at(name);
    ChatTemplateOptions opts;
    opts.add_generation_prompt = conv.value("add_generation_prompt", true);
    if (conv.contains("kwargs")) opts.extra_kwargs = conv.at("kwargs");
    const Json tools = conv.contains("tools") ? conv.at("tools") : Json();
    const Json& messages = conv.at("messages");
    if (want.is_object() || conv.contains("cpp_rejects")) {
      try {
        const std::string got = tmpl.render(messages, tools, opts);
        ADD_FAILURE() << "expected an error (" << (want.is_object() ? want.at("error").dump() : conv.at("cpp_rejects").dump())
                      << "), rendered:\n" << got;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
        EXPECT_FALSE(e.param().empty()) << e.what();
        ++(want.is_object() ? result.errors : result.rejected);
      }
      continue;
    }
    if (!want.is_string()) {
      ADD_FAILURE() << "malformed expectation";
      continue;
    }
    try {
      const std::string got = tmpl.render(messages, tools, opts);
      EXPECT_EQ(got, want.get<std::string>());
      if (got == want.get<std::string>()) ++result.rendered;
    } catch (const Error& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
  EXPECT_EQ(result.rendered + result.errors + result.rejected, static_cast<int>(conversations.size()));
  std::printf("[ matrix   ] %s, %s: %zu conversations: %d rendered byte-identical, %d template errors reproduced, "
              "%d rejected on purpose\n",
              tmpl.describe().c_str(), conversations_file.c_str(), conversations.size(),
              result.rendered, result.errors, result.rejected);
  return result;
}

const fs::path kTinyCodeTemplate =
    fs::path(DGEMMA_SOURCE_DIR) / "models" / "tiny-code" / "chat_template.jinja";

ChatTemplate tiny_code_template() {
  return ChatTemplate::from_template_text(read_file(kTinyCodeTemplate));
}

// The embedded model's template renders the July format byte for byte, on every conversation of both
// matrices (and raises where the July template raises).
TEST(ChatTemplate, TinyCodeTemplateMatchesJinjaJuly) {
  const ChatTemplate tmpl = tiny_code_template();
  EXPECT_GE(run_matrix(tmpl, "conversations.json", "expected_2026-07.json").rendered, 30);
  EXPECT_GE(run_matrix(tmpl, "random_conversations.json", "expected_2026-07.json").rendered, 100);
}

// The prompts the embedded model was served with before its template existed (recorded from the
// former built-in renderer in tiny_code_prompts.json): the same bytes.
TEST(ChatTemplate, TinyCodeTemplateKeepsTheEmbeddedModelsPrompts) {
  const ChatTemplate tmpl = tiny_code_template();
  const Json cases = read_json(kFixtures / "tiny_code_prompts.json");
  ASSERT_GE(cases.size(), 10u);
  for (const Json& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    ChatTemplateOptions opts;
    opts.add_generation_prompt = c.value("add_generation_prompt", true);
    if (c.contains("kwargs")) opts.extra_kwargs = c.at("kwargs");
    const Json tools = c.contains("tools") ? c.at("tools") : Json();
    EXPECT_EQ(tmpl.render(c.at("messages"), tools, opts), c.at("prompt").get<std::string>());
  }
}

TEST(ChatTemplate, TinyCodeTemplateReadsTheThinkingKwargs) {
  const ChatTemplate tmpl = tiny_code_template();
  EXPECT_TRUE(tmpl.accepts_kwarg("enable_thinking"));
  EXPECT_TRUE(tmpl.accepts_kwarg("preserve_thinking"));
  EXPECT_FALSE(tmpl.accepts_kwarg("messages"));
  EXPECT_FALSE(tmpl.accepts_kwarg("bos_token"));
  EXPECT_FALSE(tmpl.accepts_kwarg(""));
  EXPECT_FALSE(tmpl.kind().has_value());  // our own text, not a published template
}

// A model directory without chat_template.jinja has no template: a chat is a request error naming
// --chat-template (what vLLM answers too), never a silent default.
TEST(ChatTemplate, NoTemplateIsARequestErrorNamingTheFlag) {
  const ChatTemplate none = ChatTemplate::none();
  EXPECT_FALSE(none.present());
  EXPECT_EQ(none.describe(), "none");
  EXPECT_FALSE(none.accepts_kwarg("enable_thinking"));
  try {
    none.render(Json::parse(R"([{"role":"user","content":"hi"}])"), Json(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.param(), "messages");
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
  }
  const fs::path dir = fs::temp_directory_path() / ("dgemma-no-template-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir.string()).present());
  fs::copy_file(kTinyCodeTemplate, dir / "chat_template.jinja");
  { std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": "<s>"}})"; }
  const ChatTemplate loaded = ChatTemplate::from_model_dir(dir.string());
  EXPECT_TRUE(loaded.present());
  EXPECT_EQ(loaded.render(Json::parse(R"([{"role":"user","content":"hi"}])"), Json(), {}),
            "<s><|turn>user\nhi<turn|>\n<|turn>model\n");  // the directory's special tokens
  fs::remove_all(dir);
}

// Every conversation has an expectation for both templates and no stale expectations are left over.
TEST(ChatTemplate, ExpectationsAreCurrent) {
  std::set<std::string> names;
  for (const char* file : {"conversations.json", "random_conversations.json"})
    for (const Json& conv : read_json(kFixtures / file)) EXPECT_TRUE(names.insert(conv.at("name").get<std::string>()).second);
  EXPECT_GE(names.size(), 30u + 100u);
  for (const char* file : {"expected_2026-07.json", "expected_2026-06.json"}) {
    const Json expectations = read_json(kFixtures / file);
    std::set<std::string> expected;
    for (const auto& [name, value] : expectations.items()) expected.insert(name);
    EXPECT_EQ(expected, names) << file << " is stale: run tools/chat_template/render_expectations.py";
  }
}

// The fixtures must exercise both templates' own error paths, not only our stricter checks.
TEST(ChatTemplate, FixturesCoverTemplateErrors) {
  const Json july = read_json(kFixtures / "expected_2026-07.json");
  int raise_exception = 0;
  for (const auto& [name, value] : july.items())
    if (value.is_object() && value.at("error").get<std::string>().find("Deserialize arguments") != std::string::npos)
      ++raise_exception;
  EXPECT_GE(raise_exception, 2);
}

TEST(ChatTemplate, StringToolArgumentsAreATemplateError) {
  const Json messages = Json::parse(R"([{"role":"user","content":"q"},
    {"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}])");
  try {
    tiny_code_template().render(messages, Json(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.param(), "messages");
    EXPECT_NE(std::string(e.what()).find("must be a JSON object"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, RejectsBadShapesWithClearErrors) {
  const ChatTemplate tmpl = tiny_code_template();
  auto error_of = [&](const char* messages_json, Json kwargs = Json::object()) -> std::string {
    ChatTemplateOptions opts;
    opts.extra_kwargs = std::move(kwargs);
    try {
      tmpl.render(Json::parse(messages_json), Json(), opts);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of(R"({"role":"user"})").find("must be an array"), std::string::npos);
  EXPECT_NE(error_of(R"([1])").find("messages[0] must be an object"), std::string::npos);
  EXPECT_NE(error_of(R"([{"content":"x"}])").find("role must be a string"), std::string::npos);
  EXPECT_NE(error_of(R"([{"role":"model","content":"x"}])").find("'model' is not supported"), std::string::npos);
  EXPECT_NE(error_of(R"([{"role":"user","content":{"a":1}}])").find("content must be"), std::string::npos);
  EXPECT_NE(error_of(R"([{"role":"user","content":"x"}])", Json::array()).find("chat_template_kwargs"),
            std::string::npos);
}

TEST(ChatTemplate, DeepArgumentsFailCleanly) {
  // Built in code (parse_json would refuse this depth): rendering must not recurse without bound.
  Json deep = Json::array();
  for (int i = 0; i < 1000; ++i) deep = Json::array({std::move(deep)});
  Json messages = Json::array({{{"role", "user"}, {"content", "q"}},
                               {{"role", "assistant"},
                                {"tool_calls", Json::array({{{"function", {{"name", "f"}, {"arguments", {{"a", deep}}}}}}})}}});
  try {
    tiny_code_template().render(messages, Json(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested too deeply"), std::string::npos) << e.what();
  }
}

// ---- Recognition of the reference templates (read from ../shared, never copied) ----

// The reference templates are not part of the project (tests/unit/reference_data.h).
const std::string kJuly = testing::reference_path("chat_templates/diffusiongemma-2026-07.jinja");
const std::string kJune = testing::reference_path("chat_templates/diffusiongemma-2026-06.jinja");

TEST(ChatTemplate, RecognisesReferenceTemplates) {
  DG_NEED_REFERENCE(kJuly);
  DG_NEED_REFERENCE(kJune);
  const std::string july = read_file(kJuly);
  const std::string june = read_file(kJune);
  EXPECT_EQ(ChatTemplate::from_template_text(july).kind(), ChatTemplateKind::kDiffusionGemma2026_07);
  EXPECT_EQ(ChatTemplate::from_template_text(june).kind(), ChatTemplateKind::kDiffusionGemma2026_06);
  // A trailing newline (editors add one) and CRLF line endings do not change what jinja renders.
  EXPECT_EQ(ChatTemplate::from_template_text(july + "\n").kind(), ChatTemplateKind::kDiffusionGemma2026_07);
  std::string crlf;
  for (char c : june) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  EXPECT_EQ(ChatTemplate::from_template_text(crlf).kind(), ChatTemplateKind::kDiffusionGemma2026_06);
}

// The matrices through the Jinja interpreter running the reference template files.
TEST(ChatTemplate, InterpreterMatchesJinjaJuly) {
  DG_NEED_REFERENCE(kJuly);
  const ChatTemplate tmpl = ChatTemplate::from_template_text(read_file(kJuly));
  EXPECT_GE(run_matrix(tmpl, "conversations.json", "expected_2026-07.json").rendered, 30);
  EXPECT_GE(run_matrix(tmpl, "random_conversations.json", "expected_2026-07.json").rendered, 100);
}

TEST(ChatTemplate, InterpreterMatchesJinjaJune) {
  DG_NEED_REFERENCE(kJune);
  const ChatTemplate tmpl = ChatTemplate::from_template_text(read_file(kJune));
  EXPECT_GE(run_matrix(tmpl, "conversations.json", "expected_2026-06.json").rendered, 30);
  EXPECT_GE(run_matrix(tmpl, "random_conversations.json", "expected_2026-06.json").rendered, 100);
}

TEST(ChatTemplate, InterpreterKwargsAreTheTemplatesVariables) {
  DG_NEED_REFERENCE(kJuly);
  const ChatTemplate july = ChatTemplate::from_template_text(read_file(kJuly));
  EXPECT_TRUE(july.accepts_kwarg("enable_thinking"));
  EXPECT_TRUE(july.accepts_kwarg("preserve_thinking"));
  EXPECT_FALSE(july.accepts_kwarg("messages"));
  EXPECT_FALSE(july.accepts_kwarg("bos_token"));
  EXPECT_FALSE(july.accepts_kwarg("add_vision_id"));
  const ChatTemplate custom = ChatTemplate::from_template_text("{{ bos_token }}{% if add_vision_id %}v{% endif %}");
  EXPECT_TRUE(custom.accepts_kwarg("add_vision_id"));
  EXPECT_FALSE(custom.accepts_kwarg("enable_thinking"));
  EXPECT_FALSE(custom.kind().has_value());
  EXPECT_NE(custom.describe().find("jinja, sha256 "), std::string::npos) << custom.describe();
}

// A modified template runs on the interpreter, modification included.
TEST(ChatTemplate, ModifiedTemplateRunsOnTheInterpreter) {
  DG_NEED_REFERENCE(kJuly);
  std::string modified = read_file(kJuly);
  const size_t pos = modified.find("<|turn>model\\n");
  ASSERT_NE(pos, std::string::npos);
  modified[pos + 2] = 'T';  // "<|Turn>model": one byte changed
  const ChatTemplate tmpl = ChatTemplate::from_template_text(modified);
  EXPECT_FALSE(tmpl.kind().has_value());
  const std::string out = tmpl.render(Json::parse(R"([{"role":"user","content":"hi"}])"), Json(), {});
  EXPECT_EQ(out, "<bos><|turn>user\nhi<turn|>\n<|Turn>model\n");
}

TEST(ChatTemplate, UnsupportedConstructsAreStartupErrorsNamingTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"a\nb\n{% include 'other.jinja' %}", "line 3: unsupported construct '{% include %}'"},
      {"{{ x | frobnicate }}", "line 1: unsupported construct: filter 'frobnicate'"},
      {"\n{% if x is prime %}{% endif %}", "line 2: unsupported construct: test 'prime'"},
      {"{% for x in y recursive %}{% endfor %}", "unsupported construct 'recursive' loops"},
      {"{% if x %}", "line 1: unexpected end of template, expected '{% elif %}'"},
      {"{{ f(*args) }}", "unsupported construct '*args'"},
  };
  for (const auto& [text, want] : cases) {
    try {
      ChatTemplate::from_template_text(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(ChatTemplate, Names) {
  EXPECT_EQ(ChatTemplate::name(ChatTemplateKind::kDiffusionGemma2026_07), "diffusiongemma-2026-07");
  EXPECT_EQ(ChatTemplate::name(ChatTemplateKind::kDiffusionGemma2026_06), "diffusiongemma-2026-06");
}

}  // namespace
}  // namespace dgemma
