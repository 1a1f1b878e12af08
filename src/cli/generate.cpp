#include "cli/commands.h"

namespace dgemma::cli {

void add_generate_command(CLI::App& app, CommandList& out) {
  auto* sub = app.add_subcommand("generate", "(not yet implemented)");
  out.push_back({sub, [] { return 1; }});
}

}  // namespace dgemma::cli
