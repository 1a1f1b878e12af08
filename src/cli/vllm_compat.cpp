#include "cli/vllm_compat.h"

#include <fmt/format.h>

#include "cli/model_source.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mmap_file.h"
#include "util/yaml_config.h"

namespace dgemma::cli {
namespace {

// A scalar as a flag argument (Python's str() of it, as vLLM writes it, for numbers and strings).
std::string argument_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  return v.dump();  // integers; objects and arrays as JSON text
}

}  // namespace

std::string resolve_cli_model(const std::string& model, const std::string& revision,
                              const std::string& download_dir) {
  ModelSourceOptions so;
  so.revision = revision;
  so.download_dir = download_dir;
  so.cache_dirs = default_cache_dirs();
  const ResolvedModel rm = resolve_model(model, so);
  if (!rm.repo_id.empty())
    DG_LOG_INFO("cli", "{}: Hugging Face cache snapshot {} ({})", rm.repo_id, rm.revision, rm.dir);
  return rm.dir;
}

std::vector<std::string> expand_vllm_short_options(int argc, const char* const* argv) {
  static const std::pair<std::string_view, std::string_view> kShort[] = {{"-tp", "--tensor-parallel-size"},
                                                                         {"-dp", "--data-parallel-size"},
                                                                         {"-pp", "--pipeline-parallel-size"}};
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    for (const auto& [s, l] : kShort) {
      if (a == s)
        a = std::string(l);
      else if (a.size() > s.size() && a.compare(0, s.size(), s) == 0 && a[s.size()] == '=')
        a = std::string(l) + a.substr(s.size());
    }
    out.push_back(std::move(a));
  }
  return out;
}

void apply_config_file(CLI::App& command, const std::string& path, const std::string& model_positional) {
  const Json config = parse_yaml_config(read_text_file(path), "--config " + path);
  for (auto it = config.begin(); it != config.end(); ++it) {
    std::string name = it.key();
    for (char& c : name)
      if (c == '_') c = '-';
    while (!name.empty() && name.front() == '-') name.erase(0, 1);
    const Json& v = it.value();
    const auto bad = [&](const std::string& why) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--config {}: '{}': {}", path, it.key(), why));
    };
    if (name == "config") bad("a config file cannot name another one");
    CLI::Option* opt = nullptr;
    if (name == "model") {
      // MODEL or --model on the command line wins.
      CLI::Option* flag = command.get_option_no_throw("--model");
      opt = command.get_option_no_throw(model_positional);
      if ((flag && flag->count() > 0) || (opt && opt->count() > 0)) continue;
    } else {
      opt = command.get_option_no_throw("--" + name);
    }
    if (!opt) bad("not a flag of this command (see --help)");
    if (opt->count() > 0 || v.is_null()) continue;  // the command line wins; null leaves it unset
    try {
      if (opt->get_expected_min() == 0) {  // a flag
        if (!v.is_boolean()) bad("expected true or false");
        const std::string value = opt->get_flag_value(name, v.get<bool>() ? "true" : "false");
        if (!v.get<bool>() && value == "false" && opt->get_fnames().empty())
          continue;  // a plain flag left off
        opt->add_result(value);
      } else if (v.is_array()) {
        std::vector<std::string> items;
        for (const Json& item : v) items.push_back(argument_text(item));
        if (items.empty()) continue;
        opt->add_result(items);
      } else {
        opt->add_result(argument_text(v));
      }
      opt->run_callback();
    } catch (const CLI::Error& e) {
      bad(e.what());
    }
  }
}

}  // namespace dgemma::cli
