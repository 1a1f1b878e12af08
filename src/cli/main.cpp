// dgemma: one binary, four jobs (serve, generate, inspect, bench). Each subcommand lives in its own
// file and registers itself here.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/vllm_compat.h"
#include "util/error.h"
#include "util/log.h"

int main(int argc, char** argv) {
  // SIGINT and SIGTERM are blocked before any thread exists (the CUDA runtime starts its own), so every
  // thread inherits the mask and only `dgemma serve`'s signal thread receives them (sigwait). The
  // other commands unblock them again and keep the default action.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  CLI::App app{"dgemma — a native inference server for block-diffusion language models (DiffusionGemma)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("dgemma ") + DGEMMA_VERSION);
  dgemma::cli::CommandList commands;
  dgemma::cli::register_commands(app, commands);
  std::vector<std::string> args = dgemma::cli::expand_vllm_short_options(argc, argv);
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
    for (auto& c : commands) {
      if (!c.app->parsed()) continue;
      if (!c.handles_stop_signals) pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
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
