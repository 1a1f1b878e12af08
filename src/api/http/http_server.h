#pragma once
// A thin HTTP/1.1 server interface: handlers take and return plain structs, so
// they can be unit-tested without sockets and the library underneath (cpp-httplib 0.11.4 today) can be
// swapped. The implementation lives behind a pimpl in http_server.cpp.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dgemma {

struct HttpRequest {
  std::string method;
  std::string path;  // without the query string
  std::string body;
  std::string http_version;  // "HTTP/1.1"
  std::string remote_addr;
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  // Set by the server while the handler runs: true once the client has certainly hung up, found
  // without writing anything that commits the status (a half-closed client is not "gone").
  std::function<bool()> client_gone;

  // First value of a header (case-insensitive name), or "" when absent.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// The sink of a streamed response body.
class BodyWriter {
 public:
  virtual ~BodyWriter() = default;
  // Returns false once the client is gone; the producer should stop and clean up.
  virtual bool write(std::string_view data) = 0;
  // True once the client has closed its side or the connection failed, found without writing. A client
  // that only half-closed still reads: a producer that sees this writes something harmless (an SSE
  // comment) to learn which, as a write to a closed connection fails soon after.
  virtual bool peer_closed() { return false; }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  // Streaming: when set, the body is produced (with chunked transfer encoding) by calling `stream`
  // repeatedly on the connection's thread until it returns false (finished). A failed write means the
  // client left: `stream` should return false soon after.
  std::function<bool(BodyWriter&)> stream;
  // For streamed responses: called exactly once when the response is over; completed == false when
  // the client went away, a write failed or the server shut down first.
  std::function<void(bool completed)> on_close;
  // Extra words for the access log line (token counts, ...), asked for when the response is over.
  std::function<std::string()> access_note;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// Cross-origin requests (vLLM's --allowed-origins & co., with Starlette's CORS rules): preflight
// OPTIONS requests are answered, and responses to an allowed Origin carry Access-Control-* headers.
struct CorsPolicy {
  std::vector<std::string> allowed_origins;  // "*": any; empty: CORS off
  std::vector<std::string> allowed_methods{"*"};
  std::vector<std::string> allowed_headers{"*"};
  bool allow_credentials = false;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                        // 0: any free port (see HttpServer::port())
  size_t max_body_bytes = 32u << 20;      // larger request bodies get 413
  size_t min_threads = 4;                 // request workers kept alive
  size_t max_threads = 256;               // requests being answered at once (more wait in FIFO order)
  size_t max_connections = 4096;          // open connections (kept below the descriptor limit)
  std::chrono::seconds read_timeout{30};  // receiving one request, first byte to last (then 408)
  std::chrono::seconds write_timeout{30}; // a client that stops reading its stream is dropped after this
  int keep_alive_timeout_s = 5;
  int keep_alive_max_requests = 100;
  std::string root_path;  // e.g. "/llm": every route is also served under it
  std::string ssl_certfile, ssl_keyfile;  // both set: HTTPS only
  bool access_log = true;  // an access line for the errors no handler answers (404, 405, 400 ...)
  CorsPolicy cors;
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers a handler for an exact path, or for every path starting with what precedes a final '*'.
  // A path registered for some methods answers 405 to others.
  void route(const std::string& method, const std::string& path, HttpHandler handler);
  // Turns an exception escaping a handler into a response (default: 500 with a plain message).
  void set_exception_mapper(std::function<HttpResponse(std::exception_ptr)> mapper);
  // Builds the body of errors the server produces itself (unknown path 404, method 405, body too large
  // 413, malformed request 400, ...): given the status and a short message.
  void set_error_body(std::function<std::string(int status, const std::string& message)> make_body);

  // Binds the listening socket; throws Error if the address is unusable. Returns the bound port.
  int bind();
  int port() const;
  // Accepts connections until stop(); call bind() first.
  void serve();
  // Stops accepting: closes the listening socket and idle connections; requests being answered go
  // on, and their connections close after the response. Returns immediately; safe from any thread.
  void stop_accepting();
  // Cuts responses still being written (their sockets are shut down; streams end at once).
  void abort_responses();
  // stop_accepting() + abort_responses(), and serve() returns once the workers are done.
  void stop();
  size_t open_connections() const;
  // Requests whose response is not yet fully written (a handler that has returned may still be
  // writing): a drain waits for these, not only for the handlers.
  size_t responses_in_progress() const;

  // The registered routes as (method, path) pairs, sorted; a path ending in '*' is a prefix.
  std::vector<std::pair<std::string, std::string>> routes() const;

  // Worker threads currently alive / busy (for logs and tests).
  size_t threads_alive() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Matches a header name case-insensitively.
bool header_name_equals(std::string_view a, std::string_view b);

}  // namespace dgemma
