#include "cli/commands.h"

namespace dgemma::cli {

void add_serve_command(CLI::App& app, CommandList& out) {
  auto* sub = app.add_subcommand("serve", "(not yet implemented)");
  out.push_back({sub, [] { return 1; }});
}

}  // namespace dgemma::cli
