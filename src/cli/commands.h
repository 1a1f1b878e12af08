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
  // The command waits for SIGINT/SIGTERM itself (sigwait): main() keeps them blocked in every thread.
  // Otherwise they are unblocked before run() and keep their default action.
  bool handles_stop_signals = false;
};
using CommandList = std::vector<Command>;

void add_inspect_command(CLI::App& app, CommandList& out);
void add_generate_command(CLI::App& app, CommandList& out);
// A `--load-format PREFIX<argument>` of `serve` beyond the model formats, whose engine the caller
// builds: the test server's scripted runner and fault-injected tensor parallelism
// (tests/support/test_server.cpp). The product has none.
struct ServeLoadFormat {
  std::string prefix;  // e.g. "scripted:"; empty: none
  std::string help;    // what it is, for --help and the log
  std::function<std::unique_ptr<EngineInterface>(const EngineConfig&, const std::string& argument,
                                                 std::shared_ptr<const Tokenizer>)>
      create;
};
void add_serve_command(CLI::App& app, CommandList& out, std::vector<ServeLoadFormat> extras = {});
void add_bench_command(CLI::App& app, CommandList& out);

// Blocks SIGINT and SIGTERM in the calling thread (and so in every thread it starts later): a binary's
// main calls it first, before anything can start a thread.
void block_stop_signals();
// Expands vLLM's short options (-tp N, ...), parses the command line and runs the chosen subcommand
// (SIGINT / SIGTERM unblocked first unless it handles them itself): its exit code, 1 for a bad command
// line or an Error, 2 for any other exception.
int run_app(CLI::App& app, const CommandList& commands, int argc, char** argv);

inline void register_commands(CLI::App& app, CommandList& out) {
  add_serve_command(app, out);
  add_generate_command(app, out);
  add_inspect_command(app, out);
  add_bench_command(app, out);
}

}  // namespace dgemma::cli
