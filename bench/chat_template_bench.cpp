// Chat-template render cost per request: the Jinja interpreter running a template file on the test
// matrix's conversations and on a long 64-turn conversation with tools. CPU time of this thread, best
// of five passes. Not part of the CMake build; build and run with:
//   g++ -std=c++20 -O2 -Isrc bench/chat_template_bench.cpp build/libdgemma_text.a build/libdgemma_util.a \
//       -lfmt -pthread -o build/chat_template_bench
//   build/chat_template_bench TEMPLATE.jinja tests/fixtures/chat_template/conversations.json
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/chat/chat_template.h"
#include "util/error.h"
#include "util/json.h"

namespace {

double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("cannot open ") + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Request {
  dgemma::Json messages, tools;
  dgemma::ChatTemplateOptions opts;
};

// Microseconds per render, best of five passes over `requests`.
double us_per_render(const dgemma::ChatTemplate& t, const std::vector<Request>& requests, size_t* bytes) {
  double best = 1e30;
  for (int pass = 0; pass < 5; ++pass) {
    size_t out = 0;
    const double t0 = cpu_now();
    for (const Request& r : requests) out += t.render(r.messages, r.tools, r.opts).size();
    best = std::min(best, cpu_now() - t0);
    *bytes = out;
  }
  return best * 1e6 / static_cast<double>(requests.size());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dgemma;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TEMPLATE.jinja CONVERSATIONS_JSON\n", argv[0]);
    return 2;
  }
  try {
    const std::string text = read_file(argv[1]);
    double t0 = cpu_now();
    const ChatTemplate interpreted = ChatTemplate::from_template_text(text);
    const double parse_ms = (cpu_now() - t0) * 1e3;
    std::printf("template %s: %zu bytes, parsed in %.2f ms\n", interpreted.describe().c_str(), text.size(), parse_ms);

    std::vector<Request> matrix;
    for (const Json& conv : parse_json(read_file(argv[2]), argv[2], true)) {
      Request r;
      r.messages = conv.at("messages");
      if (conv.contains("tools")) r.tools = conv.at("tools");
      if (conv.contains("kwargs")) r.opts.extra_kwargs = conv.at("kwargs");
      r.opts.add_generation_prompt = conv.value("add_generation_prompt", true);
      try {
        interpreted.render(r.messages, r.tools, r.opts);
      } catch (const Error&) {
        continue;  // the template raises: not a request the server would send on
      }
      matrix.push_back(std::move(r));
    }

    // A long agentic conversation: system prompt, 3 tools, 64 turns with tool calls and results.
    Request long_conv;
    long_conv.tools = Json::array();
    for (const char* name : {"get_weather", "search", "calc"})
      long_conv.tools.push_back({{"type", "function"},
                                 {"function",
                                  {{"name", name},
                                   {"description", std::string("Tool ") + name},
                                   {"parameters",
                                    {{"type", "object"},
                                     {"properties", {{"q", {{"type", "string"}, {"description", "query"}}},
                                                     {"n", {{"type", "integer"}}}}},
                                     {"required", {"q"}}}}}}});
    long_conv.messages = Json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}}});
    for (int i = 0; i < 16; ++i) {
      long_conv.messages.push_back({{"role", "user"}, {"content", "Question number " + std::to_string(i) + " about the weather?"}});
      long_conv.messages.push_back(
          {{"role", "assistant"},
           {"tool_calls", {{{"id", "c" + std::to_string(i)}, {"type", "function"},
                            {"function", {{"name", "get_weather"}, {"arguments", {{"q", "Paris"}, {"n", i}}}}}}}}});
      long_conv.messages.push_back({{"role", "tool"}, {"tool_call_id", "c" + std::to_string(i)}, {"content", "Sunny, 21 C"}});
      long_conv.messages.push_back({{"role", "assistant"}, {"content", "It is sunny and 21 C in Paris."}});
    }
    const std::vector<Request> longs(8, long_conv);

    size_t bytes = 0;
    const double m = us_per_render(interpreted, matrix, &bytes);
    std::printf("matrix (%zu requests, %.0f B avg prompt):  %7.1f us/request\n", matrix.size(),
                static_cast<double>(bytes) / static_cast<double>(matrix.size()), m);
    const double l = us_per_render(interpreted, longs, &bytes);
    std::printf("64 turns + 3 tools (%zu B prompt):          %7.1f us/request\n", bytes / longs.size(), l);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
