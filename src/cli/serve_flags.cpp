#include "cli/serve_flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "util/error.h"
#include "util/mmap_file.h"

namespace dgemma::cli {

ImageInputPolicy image_input_policy(const ServeFlags& f) {
  ImageInputPolicy p;
  if (!f.allowed_local_media_path.empty()) {
    if (!std::filesystem::is_directory(f.allowed_local_media_path))
      fail_arg("--allowed-local-media-path {} is not a directory", f.allowed_local_media_path);
    p.allowed_local_media_path = f.allowed_local_media_path;
  }
  p.limits.max_bytes = parse_byte_count(f.max_image_bytes, "--max-image-bytes");
  if (p.limits.max_bytes < 64 || p.limits.max_bytes > (uint64_t{1} << 30))
    fail_arg("--max-image-bytes must be between 64 bytes and 1 GiB");
  if (f.max_image_pixels < 1 || f.max_image_pixels > 178956970)
    fail_arg("--max-image-pixels must be between 1 and 178956970");
  p.limits.max_pixels = f.max_image_pixels;
  if (!f.media_io_kwargs.empty()) {
    const Json m = parse_flag_json(f.media_io_kwargs, "--media-io-kwargs");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() != "image" || !it->is_object())
        fail_arg("--media-io-kwargs: only an \"image\" object is accepted");
      for (auto k = it->begin(); k != it->end(); ++k) {
        const Json& c = *k;
        if (k.key() != "rgba_background_color" || !c.is_array() || c.size() != 3 ||
            !std::all_of(c.begin(), c.end(), [](const Json& v) {
              return v.is_number_integer() && v.get<int>() >= 0 && v.get<int>() <= 255;
            }))
          fail_arg("--media-io-kwargs: image accepts rgba_background_color: [r, g, b] (0..255)");
        p.background = Rgb{static_cast<uint8_t>(c[0].get<int>()), static_cast<uint8_t>(c[1].get<int>()),
                           static_cast<uint8_t>(c[2].get<int>())};
      }
    }
  }
  return p;
}

Json parse_flag_json(const std::string& text, const std::string& flag) {
  Json j;
  try {
    j = parse_json(text, flag, /*is_file=*/false);
  } catch (const Error& e) {
    fail_arg("{}: not valid JSON: {}", flag, e.what());
  }
  if (!j.is_object()) fail_arg("{}: expected a JSON object, got {}", flag, text);
  return j;
}

// "32768", "32k", "32K" (x1000 / x1024 as vLLM: lower-case decimal, upper-case binary), "1m", "1M".
// Bytes with an optional K/M/G/T (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024) suffix.
uint64_t parse_byte_count(const std::string& s, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    fail_arg("{}: '{}' is not a byte count (e.g. 8GiB, 20G, 1073741824)", flag, s);
  }
  std::string unit = s.substr(used);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double m = 1;
  if (unit.empty() || unit == "B") m = 1;
  else if (unit == "K" || unit == "KB") m = 1e3;
  else if (unit == "M" || unit == "MB") m = 1e6;
  else if (unit == "G" || unit == "GB") m = 1e9;
  else if (unit == "T" || unit == "TB") m = 1e12;
  else if (unit == "KIB") m = 1024.0;
  else if (unit == "MIB") m = 1024.0 * 1024;
  else if (unit == "GIB") m = 1024.0 * 1024 * 1024;
  else if (unit == "TIB") m = 1024.0 * 1024 * 1024 * 1024;
  else fail_arg("{}: unknown unit in '{}' (use B, K, M, G, T, KiB, MiB, GiB or TiB)", flag, s);
  const double bytes = v * m;
  if (!(bytes >= 1) || bytes > 1e15) fail_arg("{}: '{}' is out of range", flag, s);
  return static_cast<uint64_t>(bytes);
}

int64_t parse_token_count(const std::string& s, const std::string& flag) {
  if (s.empty()) fail_arg("{}: empty value", flag);
  int64_t mult = 1;
  std::string num = s;
  const char last = s.back();
  if (last == 'k') mult = 1000;
  else if (last == 'K') mult = 1024;
  else if (last == 'm') mult = 1000000;
  else if (last == 'M') mult = 1048576;
  if (mult != 1) num.pop_back();
  if (num.empty() || num.size() > 12 || num.find_first_not_of("0123456789") != std::string::npos)
    fail_arg("{}: '{}' is not a token count (e.g. 32768, 32k, 128K)", flag, s);
  const int64_t v = std::stoll(num) * mult;
  if (v < 1) fail_arg("{}: must be at least 1", flag);
  return v;
}

LogLevel parse_log_level(const std::string& s) {
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn" || s == "warning") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  if (s == "off") return LogLevel::kOff;
  fail_arg("--log-level: '{}' is not one of debug, info, warn, error, off", s);
}

// --chat-template as vLLM's: a file, else (when it contains '{', '}' or a newline) the template itself.
// Default: the model's chat_template.jinja, else none (chat requests then fail with a 400 naming
// --chat-template, as vLLM's do).
ChatTemplate choose_chat_template(const ServeFlags& f, const std::string& tokenizer_dir) {
  if (f.chat_template.empty()) {
    ChatTemplate t = ChatTemplate::from_model_dir(tokenizer_dir);
    if (t.present())
      DG_LOG_INFO("serve", "chat template: model's chat_template.jinja ({})", t.describe());
    else
      DG_LOG_WARN("serve",
                  "the model has no chat_template.jinja: chat requests will be refused until the server "
                  "is started with --chat-template FILE");
    return t;
  }
  const ChatTemplateSpecialTokens tokens = ChatTemplate::special_tokens_from_model_dir(tokenizer_dir);
  auto load = [&](const std::string& text, const std::string& origin) {
    ChatTemplate t = ChatTemplate::from_template_text(text, tokens);
    DG_LOG_INFO("serve", "chat template: {} ({})", origin, t.describe());
    return t;
  };
  if (std::filesystem::is_regular_file(f.chat_template))
    return load(read_text_file(f.chat_template), f.chat_template);
  if (f.chat_template.find_first_of("{}\n") != std::string::npos)
    return load(f.chat_template, "--chat-template text");
  fail_arg("--chat-template: '{}' looks like a file path but cannot be opened", f.chat_template);
}

}  // namespace dgemma::cli
