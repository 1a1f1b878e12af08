// One benchmark request: a streaming chat/completions POST, timed chunk by chunk from the raw SSE.
#include <httplib.h>

#include "api/http/sse.h"
#include "cli/bench.h"
#include "util/error.h"
#include "util/timing.h"

namespace dgemma::cli {
namespace {

struct BaseUrl {
  std::string origin;  // scheme://host:port
  std::string prefix;  // path before the endpoint ("" or "/something")
};

BaseUrl split_base_url(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0))
    fail_arg("--base-url must start with http:// or https:// (got '{}')", url);
  const size_t slash = url.find('/', scheme + 3);
  BaseUrl b;
  b.origin = url.substr(0, slash);
  if (slash != std::string::npos) b.prefix = url.substr(slash);
  while (!b.prefix.empty() && b.prefix.back() == '/') b.prefix.pop_back();
  if (b.origin.size() <= scheme + 3) fail_arg("--base-url has no host (got '{}')", url);
  return b;
}

bool is_chat(const std::string& endpoint) { return endpoint.find("chat/completions") != std::string::npos; }

// Whether a data chunk carries output (text, reasoning or a tool call) rather than only a role or a
// finish reason.
bool chunk_has_output(const Json& chunk, bool chat) {
  const auto ch = chunk.find("choices");
  if (ch == chunk.end() || !ch->is_array()) return false;
  for (const auto& c : *ch) {
    if (!chat) {
      const auto t = c.find("text");
      if (t != c.end() && t->is_string() && !t->get<std::string>().empty()) return true;
      continue;
    }
    const auto d = c.find("delta");
    if (d == c.end() || !d->is_object()) continue;
    for (const char* k : {"content", "reasoning_content", "reasoning"}) {
      const auto v = d->find(k);
      if (v != d->end() && v->is_string() && !v->get<std::string>().empty()) return true;
    }
    const auto tc = d->find("tool_calls");
    if (tc != d->end() && tc->is_array() && !tc->empty()) return true;
  }
  return false;
}

void read_usage(const Json& usage, RequestResult& r) {
  if (!usage.is_object()) return;
  if (usage.contains("prompt_tokens") && usage["prompt_tokens"].is_number_integer())
    r.input_tokens = usage["prompt_tokens"].get<int64_t>();
  if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer())
    r.output_tokens = usage["completion_tokens"].get<int64_t>();
  const auto ext = usage.find("dgemma");
  if (ext == usage.end() || !ext->is_object()) return;
  auto get = [&](const char* k, int64_t& out) {
    const auto v = ext->find(k);
    if (v != ext->end() && v->is_number_integer()) out = v->get<int64_t>();
  };
  get("canvases", r.canvases);
  get("denoising_steps", r.denoising_steps);
  get("canvas_length", r.canvas_length);
}

}  // namespace

RequestResult send_bench_request(const BenchOptions& o, const std::string& model, const BenchRequest& req) {
  const BaseUrl base = split_base_url(o.base_url);
  const bool chat = is_chat(o.endpoint);
  Json body{{"model", model},
            {"stream", true},
            {"max_tokens", req.max_tokens},
            {"stream_options", Json{{"include_usage", true}}}};
  if (o.ignore_eos) body["ignore_eos"] = true;
  if (o.previews) body["stream_options"]["include_previews"] = true;
  if (chat) body["messages"] = Json::array({Json{{"role", "user"}, {"content", req.prompt}}});
  else body["prompt"] = req.prompt;

  httplib::Client cli(base.origin);
  cli.set_connection_timeout(static_cast<time_t>(o.timeout_s));
  cli.set_read_timeout(static_cast<time_t>(o.timeout_s));
  cli.set_write_timeout(static_cast<time_t>(o.timeout_s));
  cli.set_keep_alive(false);

  httplib::Request hr;
  hr.method = "POST";
  hr.path = base.prefix + o.endpoint;
  hr.set_header("Content-Type", "application/json");
  hr.set_header("Accept", "text/event-stream");
  if (!o.api_key.empty()) hr.set_header("Authorization", "Bearer " + o.api_key);
  hr.body = json_text(body);

  RequestResult r;
  r.max_tokens = req.max_tokens;
  std::string buf, raw;
  bool done = false, first = true;
  double last_s = 0;
  const double t0 = now_seconds();
  auto on_line = [&](std::string_view line) {
    if (line.empty()) return;
    if (line.front() == ':') {
      if (line.find("dgemma.preview") != std::string_view::npos) ++r.previews;
      return;
    }
    if (line.substr(0, 5) != "data:") return;
    std::string_view payload = line.substr(5);
    while (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
    if (payload == "[DONE]") {
      done = true;
      return;
    }
    Json chunk;
    try {
      chunk = parse_json(payload, "stream chunk", false);
    } catch (const Error& e) {
      if (r.error.empty()) r.error = e.what();
      return;
    }
    if (chunk.contains("error")) {
      if (r.error.empty()) {
        const Json& e = chunk["error"];
        r.error = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                   : json_text(e);
      }
      return;
    }
    if (chunk_has_output(chunk, chat)) {
      const double now = now_seconds() - t0;
      if (first) r.ttft_s = now;
      else r.itl_s.push_back(now - last_s);
      first = false;
      last_s = now;
      ++r.output_chunks;
    }
    if (chunk.contains("usage") && !chunk["usage"].is_null()) read_usage(chunk["usage"], r);
  };
  hr.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    raw.append(data, std::min<size_t>(n, raw.size() < 4096 ? 4096 - raw.size() : 0));  // for error bodies
    buf.append(data, n);
    size_t pos = 0, nl;
    while ((nl = buf.find('\n', pos)) != std::string::npos) {
      std::string_view line(buf.data() + pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      on_line(line);
      pos = nl + 1;
    }
    buf.erase(0, pos);
    return true;
  };
  httplib::Result res = cli.send(hr);
  r.e2el_s = now_seconds() - t0;
  if (!res) {
    r.error = "HTTP request failed: " + httplib::to_string(res.error());
    return r;
  }
  if (res->status != 200) {
    std::string msg = raw;
    try {
      const Json j = parse_json(raw, "error body", false);
      if (j.contains("error") && j["error"].is_object() && j["error"].contains("message"))
        msg = j["error"]["message"].is_string() ? j["error"]["message"].get<std::string>() : json_text(j["error"]);
    } catch (const Error&) {
    }
    r.error = fmt::format("HTTP {}: {}", res->status, msg.substr(0, 300));
    return r;
  }
  if (r.error.empty() && !done) r.error = "the stream ended without [DONE]";
  if (r.error.empty() && first && r.output_tokens > 0) r.error = "usage counts output tokens but no output chunk came";
  if (first) r.ttft_s = r.e2el_s;  // no output at all: the whole wait was the "first token" wait
  r.ok = r.error.empty();
  return r;
}

}  // namespace dgemma::cli
