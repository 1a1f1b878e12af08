// dgemma: one binary, four jobs (serve, generate, inspect, bench). Each subcommand lives in its own
// file and registers itself here.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // Before anything else: run_app blocks SIGINT / SIGTERM before any thread exists (cli/commands.h).
  dgemma::cli::block_stop_signals();
  CLI::App app{"dgemma — a native inference server for block-diffusion language models (DiffusionGemma)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("dgemma ") + DGEMMA_VERSION);
  dgemma::cli::CommandList commands;
  dgemma::cli::register_commands(app, commands);
  return dgemma::cli::run_app(app, commands, argc, argv);
}
