#pragma once
// Subcommand registry: each src/cli/<name>.cpp provides add_<name>_command().
#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

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
void add_serve_command(CLI::App& app, CommandList& out);
void add_bench_command(CLI::App& app, CommandList& out);

inline void register_commands(CLI::App& app, CommandList& out) {
  add_serve_command(app, out);
  add_generate_command(app, out);
  add_inspect_command(app, out);
  add_bench_command(app, out);
}

}  // namespace dgemma::cli
