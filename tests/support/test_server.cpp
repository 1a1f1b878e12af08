// dgemma_test_server: `dgemma serve` (the same code and flags) with two more load formats:
// `--load-format scripted:FILE`, the real engine over a scripted model runner (support/scripted_runner.h),
// so the end-to-end suites exercise the server with replies a random model never produces; and
// `--load-format tp-fault:SPEC`, the CPU simulation of tensor parallelism with one rank made to die
// (support/tp_fault.h), so they exercise what the server does when a rank dies.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "support/scripted_runner.h"
#include "support/tp_fault.h"
#include "text/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using namespace dgemma;
  cli::block_stop_signals();
  CLI::App app{
      "dgemma_test_server — dgemma serve with --load-format scripted:FILE or tp-fault:SPEC (tests only)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("dgemma ") + DGEMMA_VERSION);
  cli::ServeLoadFormat scripted;
  scripted.prefix = "scripted:";
  scripted.help = "a scripted model runner, tests only";
  scripted.create = [](const EngineConfig& config, const std::string& file,
                       std::shared_ptr<const Tokenizer> tokenizer) {
    ScriptTokenizer st;
    st.encode = [tokenizer](std::string_view t) { return tokenizer->encode(t, true); };
    st.decode = [tokenizer](const std::vector<int32_t>& ids) { return tokenizer->decode(ids, false); };
    return create_scripted_engine(config, file, std::move(st));
  };
  cli::ServeLoadFormat tp_fault;
  tp_fault.prefix = "tp-fault:";
  tp_fault.help = "tensor parallelism on the CPU with one rank made to die, tests only";
  tp_fault.create = [](const EngineConfig& config, const std::string& spec,
                       std::shared_ptr<const Tokenizer>) {
    return create_tp_fault_engine(config, parse_tp_fault_spec(spec));
  };
  cli::CommandList commands;
  cli::add_serve_command(app, commands, {std::move(scripted), std::move(tp_fault)});
  return cli::run_app(app, commands, argc, argv);
}
