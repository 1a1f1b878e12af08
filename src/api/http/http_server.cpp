// cpp-httplib 0.11.4 behind the HttpServer interface, used for what it does well: parsing a request,
// routing, writing a response. The sockets are ours (api/http/http_connections.h): the library's own loop
// pins a worker per connection, times reads out per recv (slow headers are never cut), drops bytes
// that follow a request (pipelining) and binds with SO_REUSEPORT (a second server shares the port).
// Each buffered request goes to Server::process_request over a Stream on our connection. Other
// pitfalls: the payload cap defaults to unlimited; streamed responses must write
// to notice a gone client.
#include "api/http/http_server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include <httplib.h>

#include "api/http/http_connections.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma {

bool header_name_equals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (header_name_equals(k, name)) return v;
  return {};
}

bool HttpRequest::has_header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (header_name_equals(k, name)) return true;
  return false;
}

namespace {

// Request workers: grows on demand up to max_threads, shrinks back to min_threads after idling.
// Jobs beyond max_threads wait in FIFO order (the poller never blocks).
class DynamicThreadPool : public httplib::TaskQueue {
 public:
  DynamicThreadPool(size_t min_threads, size_t max_threads, std::atomic<size_t>& alive)
      : min_(std::max<size_t>(1, min_threads)), max_(std::max(min_, max_threads)), alive_(alive) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < min_; ++i) spawn_locked();
  }
  ~DynamicThreadPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    reap_locked();
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size() && threads_.size() < max_) spawn_locked();
    cv_.notify_one();
  }

  void shutdown() override {
    std::list<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_) return;
      shut_ = true;
      cv_.notify_all();
      threads.swap(threads_);
      threads.splice(threads.end(), dead_);
    }
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }

 private:
  static constexpr auto kIdleExit = std::chrono::seconds(30);

  void spawn_locked() {
    threads_.emplace_back();
    auto it = std::prev(threads_.end());
    *it = std::thread([this, it] { run(it); });
    ++alive_;
  }

  // Joins workers that exited on idleness (called with the lock held; they no longer need it).
  void reap_locked() {
    for (auto& t : dead_)
      if (t.joinable()) t.join();
    dead_.clear();
  }

  void run(std::list<std::thread>::iterator self) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      const bool woke = cv_.wait_for(lock, kIdleExit, [&] { return shut_ || !jobs_.empty(); });
      --idle_;
      if (shut_ && jobs_.empty()) break;
      if (!woke) {
        if (threads_.size() > min_) {  // idle too long and above the floor: leave
          dead_.splice(dead_.end(), threads_, self);
          break;
        }
        continue;
      }
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
    --alive_;
  }

  const size_t min_, max_;
  std::atomic<size_t>& alive_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<std::thread> threads_;
  std::list<std::thread> dead_;
  size_t idle_ = 0;
  bool shut_ = false;
};

std::string regex_escape(const std::string& s) {
  static const std::string kSpecial = R"(\^$.|?*+()[]{}-)";
  std::string out;
  for (char c : s) {
    if (kSpecial.find(c) != std::string::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

const char* status_message(int status) {
  switch (status) {
    case 400: return "Bad request";
    case 401: return "Unauthorized";
    case 404: return "Not found";
    case 405: return "Method not allowed";
    case 408: return "Request timeout";
    case 413: return "Request body too large";
    case 414: return "Request URI too long";
    case 415: return "Unsupported media type";
    case 416: return "Range not satisfiable";
    case 431: return "Request header fields too large";
    case 500: return "Internal server error";
    case 503: return "Service unavailable";
    default: return "HTTP error";
  }
}

class SinkWriter : public BodyWriter {
 public:
  SinkWriter(httplib::DataSink& sink, Connection* connection) : sink_(sink), connection_(connection) {}
  bool write(std::string_view data) override {
    if (!ok_) return false;
    if (data.empty()) return true;
    ok_ = sink_.write(data.data(), data.size());
    return ok_;
  }
  bool peer_closed() override { return !ok_ || (connection_ && connection_->peer_closed()); }
  bool ok() const { return ok_; }

 private:
  httplib::DataSink& sink_;
  Connection* connection_;
  bool ok_ = true;
};

// The library's server with its request processor opened up; "live" is what its streamed responses
// poll to learn that the server stops (it compares the listening socket with INVALID_SOCKET).
class LibServer : public httplib::Server {
 public:
  using httplib::Server::process_request;
  void set_live(bool live) { svr_sock_ = live ? 0 : INVALID_SOCKET; }
};

// A Connection seen as the library's Stream.
class ConnectionStream : public httplib::Stream {
 public:
  explicit ConnectionStream(Connection& c) : c_(c) {}
  bool is_readable() const override { return c_.readable(); }
  bool is_writable() const override { return c_.writable(); }
  ssize_t read(char* ptr, size_t size) override { return c_.read(ptr, size); }
  ssize_t write(const char* ptr, size_t size) override { return c_.write(ptr, size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.remote_ip();
    port = c_.remote_port();
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.local_ip();
    port = c_.local_port();
  }
  // The library reads this only for its select() guard (descriptors >= FD_SETSIZE get a 500); our
  // I/O uses poll(), which has no such limit, so no descriptor is reported.
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  Connection& c_;
};

// The connection whose request this worker thread is answering (for HttpRequest::client_gone).
thread_local Connection* tl_connection = nullptr;

// Shared between the provider and the releaser of one streamed response.
struct StreamState {
  std::function<bool(BodyWriter&)> stream;
  std::function<void(bool)> on_close;
  bool finished = false;
  std::once_flag closed;
  void close(bool completed) {
    std::call_once(closed, [&] {
      if (on_close) on_close(completed && finished);
    });
  }
  ~StreamState() { close(false); }
};

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

bool cors_origin_allowed(const CorsPolicy& c, const std::string& origin) {
  return contains(c.allowed_origins, "*") || contains(c.allowed_origins, origin);
}

// The Access-Control-Allow-Origin/-Credentials headers for an allowed origin.
void add_cors_origin(const CorsPolicy& c, const std::string& origin, httplib::Response& res) {
  const bool any = contains(c.allowed_origins, "*");
  if (any && !c.allow_credentials) {
    res.set_header("Access-Control-Allow-Origin", "*");
  } else {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  if (c.allow_credentials) res.set_header("Access-Control-Allow-Credentials", "true");
}

// A request path as it may appear in a log line (no control characters, bounded).
std::string loggable_path(const std::string& path) {
  std::string p = path.size() > 200 ? path.substr(0, 200) + "..." : path;
  for (char& ch : p)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == ' ' || ch == 0x7f) ch = '?';
  return p;
}

bool safe_header_value(const std::string& v) { return v.find_first_of("\r\n") == std::string::npos && v.size() < 4096; }

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  LibServer server;
  std::unique_ptr<ConnectionPoller> poller;
  std::unique_ptr<DynamicThreadPool> pool;
  std::map<std::string, std::map<std::string, HttpHandler>> routes;  // path -> method -> handler
  std::function<HttpResponse(std::exception_ptr)> exception_mapper;
  std::function<std::string(int, const std::string&)> error_body;
  std::atomic<size_t> threads_alive{0};
  int bound_port = -1;
  bool registered = false;

  void log_unrouted(const httplib::Request& req, int status, const std::string& message) const {
    const std::string path = loggable_path(req.path);
    if (options.access_log)
      DG_LOG_INFO("access", "{} {} {} {}", req.remote_addr.empty() ? "-" : req.remote_addr,
                  loggable_path(req.method), path, status);
    DG_LOG_DEBUG("http", "{} {} -> {}: {}", loggable_path(req.method), path, status, loggable_path(message));
  }

  HttpResponse plain_error(int status, const std::string& message) const {
    HttpResponse r;
    r.status = status;
    if (error_body) {
      r.body = error_body(status, message);
    } else {
      r.content_type = "text/plain";
      r.body = message + "\n";
    }
    return r;
  }

  void apply(HttpResponse&& out, httplib::Response& res) {
    res.status = out.status;
    for (auto& [k, v] : out.headers) res.set_header(k, v);
    if (!out.stream) {
      res.set_content(out.body, out.content_type);
      return;
    }
    auto state = std::make_shared<StreamState>();
    state->stream = std::move(out.stream);
    state->on_close = std::move(out.on_close);
    res.set_chunked_content_provider(
        out.content_type,
        [state](size_t, httplib::DataSink& sink) {
          SinkWriter writer(sink, tl_connection);
          bool more = false;
          try {
            more = state->stream(writer);
          } catch (const std::exception& e) {
            DG_LOG_ERROR("http", "stream producer failed: {}", e.what());
            return false;
          }
          if (!writer.ok()) return false;  // client gone: abort the response
          if (!more) {
            state->finished = true;
            sink.done();
          }
          return true;
        },
        [state](bool success) { state->close(success); });
  }

  void dispatch(const std::string& path, const httplib::Request& req, httplib::Response& res) {
    HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    // Handlers (and the API-key check) see the path without the --root-path prefix.
    const std::string& root = options.root_path;
    if (!root.empty() && r.path.size() > root.size() && r.path.compare(0, root.size(), root) == 0 && r.path[root.size()] == '/')
      r.path.erase(0, root.size());
    // The library is done with the body: take it instead of copying (a prompt may be 30 MB).
    r.body = std::move(const_cast<std::string&>(req.body));
    r.http_version = req.version;
    r.remote_addr = req.remote_addr;
    if (Connection* c = tl_connection) r.client_gone = [c] { return c->client_gone(); };
    r.headers.reserve(req.headers.size());
    for (const auto& [k, v] : req.headers) r.headers.emplace_back(k, v);

    HttpResponse out;
    const auto& methods = routes.at(path);
    auto it = methods.find(req.method);
    // HEAD is GET without the body (the library sends the headers only) wherever no HEAD route is set.
    if (it == methods.end() && req.method == "HEAD") it = methods.find("GET");
    if (it == methods.end()) {
      out = plain_error(405, fmt::format("Method {} not allowed for {}", req.method, path));
      log_unrouted(req, 405, "method not allowed");
      std::string allow;
      for (const auto& [m, h] : methods) allow += (allow.empty() ? "" : ", ") + m;
      if (methods.count("GET") && !methods.count("HEAD")) allow += ", HEAD";
      out.headers.emplace_back("Allow", allow);
    } else {
      try {
        out = it->second(r);
      } catch (...) {
        if (exception_mapper) {
          try {
            out = exception_mapper(std::current_exception());
          } catch (...) {
            out = plain_error(500, "internal error");
          }
        } else {
          out = plain_error(500, "internal error");
        }
      }
    }
    apply(std::move(out), res);
  }

  // A worker answers the one request `c` has buffered, then hands the connection back.
  void answer(std::shared_ptr<Connection> c) {
    ConnectionStream strm(*c);
    const bool last = c->served() + 1 >= std::max(1, options.keep_alive_max_requests) || poller->draining();
    bool closed = false, ok = false;
    tl_connection = c.get();
    try {
      ok = server.process_request(strm, last, closed, nullptr);
    } catch (const std::exception& e) {
      DG_LOG_ERROR("http", "request processing failed: {}", e.what());
    }
    tl_connection = nullptr;
    const bool keep = ok && !closed && !last;
    poller->release(std::move(c), keep);
  }

  // A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method), answered for any path.
  void preflight(const httplib::Request& req, httplib::Response& res) {
    const CorsPolicy& c = options.cors;
    std::string origin = req.get_header_value("Origin");
    if (!safe_header_value(origin)) origin.clear();
    const std::string method = req.get_header_value("Access-Control-Request-Method");
    if (c.allowed_origins.empty() || origin.empty() || method.empty()) {
      HttpResponse out = plain_error(405, fmt::format("Method OPTIONS not allowed for {}", req.path));
      res.status = 405;
      res.set_content(out.body, out.content_type);
      return;
    }
    std::string problem;
    if (!cors_origin_allowed(c, origin)) problem = "Disallowed CORS origin";
    else if (!contains(c.allowed_methods, "*") && !contains(c.allowed_methods, method)) problem = "Disallowed CORS method";
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    if (problem.empty() && !asked.empty() && !contains(c.allowed_headers, "*")) {
      size_t pos = 0;
      while (pos <= asked.size()) {
        size_t comma = asked.find(',', pos);
        if (comma == std::string::npos) comma = asked.size();
        std::string h = asked.substr(pos, comma - pos);
        while (!h.empty() && h.front() == ' ') h.erase(0, 1);
        while (!h.empty() && h.back() == ' ') h.pop_back();
        bool ok = h.empty();
        for (const auto& a : c.allowed_headers) ok = ok || header_name_equals(a, h);
        for (const char* simple : {"Accept", "Accept-Language", "Content-Language", "Content-Type"})
          ok = ok || header_name_equals(simple, h);
        if (!ok) problem = "Disallowed CORS headers";
        pos = comma + 1;
      }
    }
    res.status = problem.empty() ? 200 : 400;
    if (problem.empty() || cors_origin_allowed(c, origin)) add_cors_origin(c, origin, res);
    res.set_header("Access-Control-Allow-Methods",
                   contains(c.allowed_methods, "*") ? "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT" : join(c.allowed_methods));
    if (contains(c.allowed_headers, "*")) {
      if (!asked.empty() && safe_header_value(asked)) res.set_header("Access-Control-Allow-Headers", asked);
    } else {
      res.set_header("Access-Control-Allow-Headers", join(c.allowed_headers));
    }
    res.set_header("Access-Control-Max-Age", "600");
    res.set_content(problem.empty() ? "OK" : problem, "text/plain; charset=utf-8");
  }

  void register_routes() {
    if (registered) return;
    registered = true;
    server.Options(".*", [this](const httplib::Request& req, httplib::Response& res) { preflight(req, res); });
    for (const auto& [path, methods] : routes) {
      // With --root-path the route also answers under the prefix (a proxy that does not strip it).
      // A path ending in '*' matches any non-empty rest.
      const bool prefix = !path.empty() && path.back() == '*';
      const std::string exact = prefix ? regex_escape(path.substr(0, path.size() - 1)) + ".+" : regex_escape(path);
      const std::string pattern =
          options.root_path.empty() ? exact : "(?:" + regex_escape(options.root_path) + ")?" + exact;
      auto handler = [this, path = path](const httplib::Request& req, httplib::Response& res) {
        dispatch(path, req, res);
      };
      server.Get(pattern, handler);
      server.Post(pattern, handler);
      server.Put(pattern, handler);
      server.Delete(pattern, handler);
      server.Patch(pattern, handler);
    }
  }
};

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  auto& o = impl_->options;
  auto& s = impl_->server;
  Impl* impl = impl_.get();
  s.set_payload_max_length(o.max_body_bytes);  // chunked bodies (Content-Length ones are framed by the poller)
  s.set_keep_alive_timeout(o.keep_alive_timeout_s);
  s.set_keep_alive_max_count(static_cast<size_t>(std::max(1, o.keep_alive_max_requests)));
  s.set_live(true);
  ConnectionLimits limits;
  limits.max_connections = o.max_connections;
  limits.max_body_bytes = o.max_body_bytes;
  limits.request_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(o.read_timeout);
  limits.keep_alive_timeout = std::chrono::seconds(o.keep_alive_timeout_s);
  limits.write_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(o.write_timeout);
  limits.access_log = o.access_log;
  impl_->poller = std::make_unique<ConnectionPoller>(
      limits, [impl](std::shared_ptr<Connection> c) { impl->pool->enqueue([impl, c] { impl->answer(c); }); },
      [impl](int status, const std::string& message) { return impl->plain_error(status, message).body; },
      TlsFiles{o.ssl_certfile, o.ssl_keyfile});
  // Errors the library produces itself (404, 413, 400 on a malformed request, ...) and handler
  // responses that carry no body get a proper error body.
  s.set_error_handler(httplib::Server::HandlerWithResponse([impl](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = status_message(res.status);
    if (res.status == 404) message = fmt::format("Not found: {} {}", req.method, req.path);
    if (res.status == 413)
      message = fmt::format("Request body too large (limit {} bytes)", impl->options.max_body_bytes);
    // Errors no handler saw still get their access line, and their reason at debug level.
    impl->log_unrouted(req, res.status, message);
    HttpResponse out = impl->plain_error(res.status, message);
    res.set_content(out.body, out.content_type);
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([impl](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    HttpResponse out = impl->plain_error(500, "internal error");
    res.status = 500;
    res.set_content(out.body, out.content_type);
  });
  // cpp-httplib parses application/x-www-form-urlencoded bodies itself and refuses those over 8 KiB
  // with 413. `curl -d` sends that type by default, and our bodies are JSON whatever the label says, so
  // relabel it before the body is read (the request object is not really const at this point).
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    auto& headers = const_cast<httplib::Headers&>(req.headers);
    for (auto& [name, value] : headers)
      if (header_name_equals(name, "Content-Type") && value.rfind("application/x-www-form-urlencoded", 0) == 0)
        value = "application/octet-stream";
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // CORS headers on every response to an allowed Origin (errors included, so browsers can read them).
  s.set_post_routing_handler([impl](const httplib::Request& req, httplib::Response& res) {
    const CorsPolicy& c = impl->options.cors;
    if (c.allowed_origins.empty() || req.method == "OPTIONS") return;
    const std::string origin = req.get_header_value("Origin");
    if (!origin.empty() && safe_header_value(origin) && cors_origin_allowed(c, origin)) add_cors_origin(c, origin, res);
  });
  s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    DG_LOG_DEBUG("http", "{} {} {} -> {}", req.remote_addr, req.method, req.path, res.status);
  });
}

HttpServer::~HttpServer() { stop(); }

std::vector<std::pair<std::string, std::string>> HttpServer::routes() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [path, methods] : impl_->routes)
    for (const auto& [method, handler] : methods) out.emplace_back(method, path);
  std::sort(out.begin(), out.end());
  return out;
}

void HttpServer::route(const std::string& method, const std::string& path, HttpHandler handler) {
  DG_CHECK(!impl_->registered);
  impl_->routes[path][method] = std::move(handler);
}

void HttpServer::set_exception_mapper(std::function<HttpResponse(std::exception_ptr)> mapper) {
  impl_->exception_mapper = std::move(mapper);
}

void HttpServer::set_error_body(std::function<std::string(int, const std::string&)> make_body) {
  impl_->error_body = std::move(make_body);
}

int HttpServer::bind() {
  impl_->register_routes();
  const auto& o = impl_->options;
  if (o.port < 0 || o.port > 65535) fail_arg("invalid port {}", o.port);
  impl_->bound_port = impl_->poller->bind(o.host, o.port);
  return impl_->bound_port;
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::serve() {
  DG_CHECK(impl_->bound_port > 0);
  impl_->pool = std::make_unique<DynamicThreadPool>(impl_->options.min_threads, impl_->options.max_threads,
                                                    impl_->threads_alive);
  impl_->poller->run();
  impl_->pool->shutdown();  // waits for responses being written (stop() cut their sockets)
}

void HttpServer::stop_accepting() { impl_->poller->stop_accepting(); }

void HttpServer::abort_responses() {
  impl_->server.set_live(false);
  impl_->poller->abort_busy();
}

void HttpServer::stop() {
  impl_->poller->stop_accepting();
  abort_responses();
  impl_->poller->shutdown();
}

size_t HttpServer::open_connections() const { return impl_->poller->open_connections(); }
size_t HttpServer::responses_in_progress() const { return impl_->poller->busy_connections(); }

size_t HttpServer::threads_alive() const { return impl_->threads_alive.load(); }

}  // namespace dgemma
