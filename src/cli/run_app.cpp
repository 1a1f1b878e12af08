// The binaries' common main: stop signals blocked in every thread, vLLM's short options expanded, the
// command line parsed, the chosen subcommand run, errors mapped to exit codes.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/vllm_compat.h"
#include "util/error.h"

namespace dgemma::cli {
namespace {

sigset_t stop_signal_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

}  // namespace

void block_stop_signals() {
  const sigset_t s = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

int run_app(CLI::App& app, const CommandList& commands, int argc, char** argv) {
  // SIGINT and SIGTERM stay blocked (block_stop_signals, before any thread exists: the CUDA runtime
  // starts its own), so every thread inherits the mask and only `serve`'s signal thread receives them
  // (sigwait). The other commands unblock them again and keep the default action.
  block_stop_signals();
  std::vector<std::string> args = expand_vllm_short_options(argc, argv);
  std::vector<char*> args_argv{argv[0]};
  for (auto& a : args) args_argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(args_argv.size()), args_argv.data());
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message; its own codes (104, 106, ...) become the documented 1. --help and
    // --version stay 0.
    return app.exit(e) == 0 ? 0 : 1;
  }
  try {
    for (const auto& c : commands) {
      if (!c.app->parsed()) continue;
      if (!c.handles_stop_signals) {
        const sigset_t s = stop_signal_set();
        pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
      }
      return c.run();
    }
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
