#pragma once
// Subcommand registry: each src/cli/<name>.cpp provides add_<name>_command().
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dgemma {
class EngineInterface;
class Tokenizer;
struct EngineConfig;
}  // namespace dgemma

namespace dgemma::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};
using CommandList = std::vector<Command>;

void add_inspect_command(CLI::App& app, CommandList& out);
void add_generate_command(CLI::App& app, CommandList& out);
// A `--load-format PREFIX<argument>` of `serve` beyond the model formats, whose engine the caller
// builds: the test server's scripted runner (tests/support/test_server.cpp). The product has none.
struct ServeLoadFormat {
  std::string prefix;  // e.g. "scripted:"; empty: none
  std::string help;    // what it is, for --help and the log
  std::function<std::unique_ptr<EngineInterface>(const EngineConfig&, const std::string& argument,
                                                 std::shared_ptr<const Tokenizer>)>
      create;
};
void add_serve_command(CLI::App& app, CommandList& out, ServeLoadFormat extra = {});
void add_bench_command(CLI::App& app, CommandList& out);

// Parses the command line and runs the chosen subcommand: its exit code, 1 for a bad command line or an
// Error, 2 for any other exception.
int run_app(CLI::App& app, const CommandList& commands, int argc, char** argv);

inline void register_commands(CLI::App& app, CommandList& out) {
  add_serve_command(app, out);
  add_generate_command(app, out);
  add_inspect_command(app, out);
  add_bench_command(app, out);
}

}  // namespace dgemma::cli
