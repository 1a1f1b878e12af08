#pragma once
// Command-line compatibility with `vllm serve` that CLI11 does not give by itself:
//   - vLLM's two-letter short options (-tp N, -dp N, -pp N, also -tp=N) become their long forms before
//     parsing (CLI11 short options are one letter; unrewritten, "-tp 1" would leave "1" to MODEL);
//   - MODEL of any command may be a Hugging Face repo id found in the local cache, as vLLM takes it;
//   - `--config FILE.yaml`: vLLM's YAML config file (util/yaml_config.h), keys being the long flag
//     names (with '-' or '_'); a flag given on the command line wins over the file, and the file over
//     the defaults, as in vLLM. Values become flag arguments the way vLLM turns them into arguments:
//     true sets a flag (false clears a --x/--no-x flag, else leaves it unset), a list gives one
//     argument per item, a mapping is passed as its JSON text, null leaves the flag unset.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace dgemma::cli {

// MODEL: a local directory, or a repo id in the local cache (cli/model_source.h), as the directory
// holding config.json (logged when it is a cache snapshot).
std::string resolve_cli_model(const std::string& model, const std::string& revision,
                              const std::string& download_dir);

// argv[1..] with vLLM's two-letter short options written out.
std::vector<std::string> expand_vllm_short_options(int argc, const char* const* argv);

// Applies the YAML file to the options of `command` that the command line did not set; `model_positional`
// is the name of the positional MODEL option, which the key `model` sets unless the command line
// gave MODEL or --model. Throws Error(kInvalidArgument) naming the file, and the key, for a malformed
// file, an unknown key or a bad value.
void apply_config_file(CLI::App& command, const std::string& path, const std::string& model_positional);

}  // namespace dgemma::cli
