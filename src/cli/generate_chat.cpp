// dgemma generate --chat: the terminal chat. Prompts are rendered with the model's chat template
// (PromptBuilder), answers come from the engine's RequestStream with previews on, and the output goes
// through the same pipeline as the server's (ChoiceOutput: reasoning split, UTF-8-safe text).
#include "cli/generate_chat.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "api/openai/choice_output.h"
#include "engine/engine_config.h"
#include "text/chat/chat_template.h"
#include "text/chat/prompt_builder.h"
#include "text/tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/mmap_file.h"
#include "util/timing.h"

namespace dgemma::cli {
namespace {

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kItalic = "\x1b[3m";
constexpr const char* kReset = "\x1b[0m";

int terminal_columns() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// Columns a code point takes: 2 for East Asian wide ranges and emoji, 0 for combining marks, else 1.
// An approximation of wcwidth() that needs no locale.
int columns_of(uint32_t cp) {
  if ((cp >= 0x300 && cp <= 0x36F) || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0xFE00 && cp <= 0xFE0F)) return 0;
  if ((cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
      (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
      (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1FAFF) || (cp >= 0x20000 && cp <= 0x3FFFD))
    return 2;
  return 1;
}

// What the terminal cursor does with printed text: the column it ends in and the lines it moved down
// (explicit newlines and wraps).
struct Cursor {
  int col = 0;
  int cols = 80;
  int advance(std::string_view s) {
    int down = 0;
    for (size_t i = 0; i < s.size();) {
      const auto b = static_cast<unsigned char>(s[i]);
      const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
      uint32_t cp = len == 1 ? b : b & (0x3F >> (len - 1));
      for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      i += static_cast<size_t>(len);
      if (cp == '\n') {
        ++down;
        col = 0;
        continue;
      }
      const int w = columns_of(cp);
      if (w > 0 && col + w > cols) {
        ++down;
        col = 0;
      }
      col += w;
    }
    return down;
  }
};

// Control characters would move the cursor behind our back: show them as spaces.
std::string printable(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n' && keep_newlines) out += c;
    else if (u < 0x20 || u == 0x7f) out += ' ';
    else out += c;
  }
  return out;
}

class Screen {
 public:
  explicit Screen(bool tty) : tty_(tty) { cur_.cols = terminal_columns(); }

  // Committed text: erases the live canvas, prints the text for good.
  void commit(std::string_view text, bool reasoning) {
    erase_live();
    if (text.empty()) return;
    const std::string t = tty_ ? printable(text, true) : std::string(text);
    if (reasoning && tty_) std::fputs(kItalic, stdout);
    std::fwrite(t.data(), 1, t.size(), stdout);
    if (reasoning && tty_) std::fputs(kReset, stdout);
    cur_.advance(t);
    std::fflush(stdout);
  }

  // The canvas being denoised, drawn dim after the committed text and replaced at every step.
  void live(std::string_view canvas_text, int canvas, int step) {
    if (!tty_) return;
    erase_live();
    live_start_col_ = cur_.col;
    const std::string t = printable(canvas_text, true);
    const std::string tag = fmt::format("  [canvas {} · step {}]", canvas, step);
    Cursor c = cur_;
    live_down_ = c.advance(t) + c.advance(tag);
    std::fputs(kDim, stdout);
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fputs(tag.c_str(), stdout);
    std::fputs(kReset, stdout);
    std::fflush(stdout);
    live_shown_ = true;
  }

  void erase_live() {
    if (!live_shown_) return;
    std::fputs("\r", stdout);
    if (live_down_ > 0) std::fprintf(stdout, "\x1b[%dA", live_down_);
    if (live_start_col_ > 0) std::fprintf(stdout, "\x1b[%dC", live_start_col_);
    std::fputs("\x1b[J", stdout);
    live_shown_ = false;
  }

  void newline() {
    erase_live();
    std::fputs("\n", stdout);
    cur_.col = 0;
    std::fflush(stdout);
  }

  void line(const std::string& text, bool dim) {
    if (cur_.col != 0) newline();
    if (dim && tty_) std::fputs(kDim, stdout);
    std::fputs(text.c_str(), stdout);
    if (dim && tty_) std::fputs(kReset, stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }

 private:
  bool tty_;
  Cursor cur_;
  bool live_shown_ = false;
  int live_start_col_ = 0, live_down_ = 0;
};

struct CanvasStat {
  int steps = 0;
  size_t tokens = 0;
  double denoise_ms = 0;
};

}  // namespace

int run_generate_chat(const ChatOptions& o) {
  if (o.max_tokens < 1) fail_arg("--max-tokens must be at least 1");
  const std::string tok_path = (std::filesystem::path(o.model) / "tokenizer.json").string();
  if (!std::filesystem::exists(tok_path)) fail_arg("--chat needs {}", tok_path);
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_file(tok_path);
  ChatTemplate tmpl = ChatTemplate::from_model_dir(o.model);
  if (!tmpl.present())
    fail_arg("--chat needs the model's chat template: {} has no chat_template.jinja", o.model);
  PromptBuilder prompts(*tok, std::move(tmpl));

  EngineConfig ec;
  ec.model_dir = o.model;
  ec.load_format = o.load_format;
  ec.device = o.device;
  ec.max_num_seqs = 1;
  ec.seed = o.seed;
  std::unique_ptr<EngineInterface> engine = create_model_engine(ec);

  const bool tty_out = isatty(STDOUT_FILENO);
  const bool tty_in = isatty(STDIN_FILENO);
  std::fprintf(stderr, "dgemma chat: %s, canvas %d, context %lld tokens. Type a message; /clear forgets, Ctrl-D quits.\n",
               o.model.c_str(), engine->stats().canvas_length, static_cast<long long>(engine->max_model_len()));
  Screen screen(tty_out);
  Json messages = Json::array();
  ChatTemplateOptions topts;
  topts.extra_kwargs = Json{{"enable_thinking", o.thinking}};
  uint64_t turn = 0;
  std::string line;
  for (;;) {
    if (tty_in) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line == "/clear") {
      messages = Json::array();
      screen.line("(conversation cleared)", true);
      continue;
    }
    messages.push_back(Json{{"role", "user"}, {"content", line}});

    GenerationRequest g;
    std::shared_ptr<RequestStream> stream;
    try {
      g.prompt = prompts.chat(messages, Json::array(), topts);
      const int64_t room = engine->max_model_len() - static_cast<int64_t>(g.prompt.size());
      if (room < 1) fail_arg("the conversation ({} tokens) fills the context; /clear to start over", g.prompt.size());
      g.params.max_tokens = std::min<int64_t>(o.max_tokens, room);
      g.params.previews = true;
      g.params.seed = o.seed + turn++;
      g.params.max_denoising_steps = o.max_denoising_steps;
      g.params.entropy_bound = o.entropy_bound;
      stream = engine->submit(std::move(g));
    } catch (const Error& e) {
      messages.erase(messages.size() - 1);
      screen.line(std::string("error: ") + e.what(), false);
      continue;
    }

    ChoiceOutputOptions co;
    co.reasoning = true;
    co.thinking_enabled = o.thinking;
    ChoiceOutput out(*tok, co);
    std::string content, reasoning;
    std::vector<CanvasStat> canvases;
    std::string failure;
    FinishReason finish = FinishReason::kNone;
    Stopwatch clock;
    bool in_reasoning = false;
    auto show = [&](OutputDelta&& d) {
      if (!d.reasoning.empty()) {
        if (!in_reasoning && !tty_out) screen.commit("[thinking] ", false);
        in_reasoning = true;
        reasoning += d.reasoning;
        screen.commit(d.reasoning, true);
      }
      if (!d.content.empty()) {
        if (in_reasoning) screen.newline();
        in_reasoning = false;
        content += d.content;
        screen.commit(d.content, false);
      }
    };
    for (bool done = false; !done;) {
      RequestEvent ev;
      if (!stream->pop(ev, std::chrono::milliseconds(200))) continue;
      switch (ev.kind) {
        case RequestEvent::Kind::kPreview:
          screen.live(tok->decode(ev.tokens, /*skip_special=*/true), static_cast<int>(canvases.size()),
                      ev.steps);
          break;
        case RequestEvent::Kind::kCanvas:
          canvases.push_back({ev.steps, ev.tokens.size(), ev.denoise_ms});
          show(out.feed(ev.tokens, {}));
          break;
        case RequestEvent::Kind::kFinished:
          finish = ev.reason;
          if (ev.reason == FinishReason::kError || ev.reason == FinishReason::kAbort) failure = ev.message;
          show(out.finish());
          done = true;
          break;
        case RequestEvent::Kind::kError:
          failure = ev.message.empty() ? "engine error" : ev.message;
          done = true;
          break;
      }
    }
    screen.newline();
    const double secs = clock.seconds();
    int steps = 0;
    for (const auto& c : canvases) steps += c.steps;
    const int64_t n = out.completion_tokens();
    if (!failure.empty()) screen.line("error: " + failure, false);
    screen.line(fmt::format("[{} tokens, {} canvas{}, {} steps ({:.1f} per canvas), {:.2f} s, {:.1f} tok/s, finish {}]", n,
                            canvases.size(), canvases.size() == 1 ? "" : "es", steps,
                            canvases.empty() ? 0.0 : static_cast<double>(steps) / canvases.size(), secs,
                            secs > 0 ? static_cast<double>(n) / secs : 0.0, finish_reason_name(finish)),
                true);
    for (size_t k = 0; k < canvases.size(); ++k)
      screen.line(fmt::format("  canvas {}: {} steps, {} tokens, {:.2f} tokens/step, {:.1f} ms/step", k, canvases[k].steps,
                              canvases[k].tokens,
                              canvases[k].steps ? static_cast<double>(canvases[k].tokens) / canvases[k].steps : 0.0,
                              canvases[k].steps ? canvases[k].denoise_ms / canvases[k].steps : 0.0),
                  true);
    if (!failure.empty()) {
      messages.erase(messages.size() - 1);
      continue;
    }
    Json reply{{"role", "assistant"}, {"content", content}};
    if (!reasoning.empty()) reply["reasoning_content"] = reasoning;
    messages.push_back(std::move(reply));
  }
  if (tty_in) std::fputs("\n", stdout);
  return 0;
}

}  // namespace dgemma::cli
