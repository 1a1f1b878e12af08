// The binaries' common main: parse the command line, run the chosen subcommand, map errors to exit codes.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "util/error.h"

namespace dgemma::cli {

int run_app(CLI::App& app, const CommandList& commands, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message; its own codes (104, 106, ...) become the documented 1. --help and
    // --version stay 0.
    return app.exit(e) == 0 ? 0 : 1;
  }
  try {
    for (const auto& c : commands)
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

}  // namespace dgemma::cli
