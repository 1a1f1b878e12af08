// dgemma: one binary, four jobs (serve, generate, inspect, bench). Each subcommand lives in its own
// file and registers itself here.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "util/error.h"
#include "util/log.h"

int main(int argc, char** argv) {
  CLI::App app{"dgemma — a native inference server for block-diffusion language models (DiffusionGemma)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("dgemma ") + DGEMMA_VERSION);
  dgemma::cli::CommandList commands;
  dgemma::cli::register_commands(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message; its own codes (104, 106, ...) become the documented 1. --help and
    // --version stay 0.
    return app.exit(e) == 0 ? 0 : 1;
  }
  try {
    for (auto& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const dgemma::Error& e) {
    std::fprintf(stderr, "dgemma: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dgemma: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
