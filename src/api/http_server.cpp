// cpp-httplib 0.11.4 behind the HttpServer interface. Pitfalls handled here: Debian
// ships the library compiled, so the thread pool is replaced through new_task_queue (the default one
// is fixed at max(8, cores-1) threads and every open connection, streaming or keep-alive, pins one);
// the payload cap defaults to unlimited; streamed responses must write to notice a gone client.
#include "api/http_server.h"

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

// Connection workers: grows on demand up to max_threads, shrinks back to min_threads after idling.
// Jobs beyond max_threads wait in FIFO order (the listening loop never blocks).
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
  explicit SinkWriter(httplib::DataSink& sink) : sink_(sink) {}
  bool write(std::string_view data) override {
    if (!ok_) return false;
    if (data.empty()) return true;
    ok_ = sink_.write(data.data(), data.size());
    return ok_;
  }
  bool ok() const { return ok_; }

 private:
  httplib::DataSink& sink_;
  bool ok_ = true;
};

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

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  httplib::Server server;
  std::map<std::string, std::map<std::string, HttpHandler>> routes;  // path -> method -> handler
  std::function<HttpResponse(std::exception_ptr)> exception_mapper;
  std::function<std::string(int, const std::string&)> error_body;
  std::atomic<size_t> threads_alive{0};
  int bound_port = -1;
  bool registered = false;

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
          SinkWriter writer(sink);
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
    r.body = req.body;
    r.http_version = req.version;
    r.remote_addr = req.remote_addr;
    r.headers.reserve(req.headers.size());
    for (const auto& [k, v] : req.headers) r.headers.emplace_back(k, v);

    HttpResponse out;
    const auto& methods = routes.at(path);
    auto it = methods.find(req.method);
    if (it == methods.end()) {
      out = plain_error(405, fmt::format("Method {} not allowed for {}", req.method, path));
      std::string allow;
      for (const auto& [m, h] : methods) allow += (allow.empty() ? "" : ", ") + m;
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

  void register_routes() {
    if (registered) return;
    registered = true;
    for (const auto& [path, methods] : routes) {
      const std::string pattern = regex_escape(path);
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
  s.new_task_queue = [impl] {
    return new DynamicThreadPool(impl->options.min_threads, impl->options.max_threads, impl->threads_alive);
  };
  s.set_payload_max_length(o.max_body_bytes);
  s.set_read_timeout(o.read_timeout);
  s.set_write_timeout(o.write_timeout);
  s.set_keep_alive_timeout(o.keep_alive_timeout_s);
  s.set_keep_alive_max_count(static_cast<size_t>(std::max(1, o.keep_alive_max_requests)));
  s.set_tcp_nodelay(true);
  // Errors the library produces itself (404, 413, 400 on a malformed request, ...) and handler
  // responses that carry no body get a proper error body.
  s.set_error_handler(httplib::Server::HandlerWithResponse([impl](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = status_message(res.status);
    if (res.status == 404) message = fmt::format("Not found: {} {}", req.method, req.path);
    if (res.status == 413)
      message = fmt::format("Request body too large (limit {} bytes)", impl->options.max_body_bytes);
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
  s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    DG_LOG_DEBUG("http", "{} {} {} -> {}", req.remote_addr, req.method, req.path, res.status);
  });
}

HttpServer::~HttpServer() { stop(); }

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
  if (o.port == 0) {
    const int p = impl_->server.bind_to_any_port(o.host);
    if (p <= 0) fail_arg("cannot listen on {} (any port): {}", o.host, std::strerror(errno));
    impl_->bound_port = p;
  } else {
    if (!impl_->server.bind_to_port(o.host, o.port))
      fail_arg("cannot listen on {}:{}: {}", o.host, o.port, std::strerror(errno));
    impl_->bound_port = o.port;
  }
  return impl_->bound_port;
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::serve() {
  DG_CHECK(impl_->bound_port > 0);
  impl_->server.listen_after_bind();
}

void HttpServer::stop() { impl_->server.stop(); }

size_t HttpServer::threads_alive() const { return impl_->threads_alive.load(); }

}  // namespace dgemma
