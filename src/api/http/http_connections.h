#pragma once
// The sockets under HttpServer. One poller thread owns the listening socket and every connection that
// is between requests: it reads each request whole (its headers within one total deadline, a
// Content-Length body too) before a worker thread sees it, and enforces the connection limit. A slow
// or idle client therefore costs a file descriptor and a buffer, never a worker, so /health and
// /metrics stay responsive under slow-header floods. Workers answer one buffered request at a time and
// hand the connection back; bytes that arrived after the request (pipelining) stay buffered for the
// next one, so pipelined requests are answered in order.
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace dgemma {

struct ConnectionLimits {
  size_t max_connections = 4096;      // open connections at most (the oldest waiting one is evicted)
  size_t max_header_bytes = 64 << 10; // request line + headers (431 beyond)
  size_t max_body_bytes = 32u << 20;  // a larger Content-Length is a 413 before any body is read
  std::chrono::milliseconds request_timeout{30000};    // first byte to last byte of one request (408)
  std::chrono::milliseconds keep_alive_timeout{5000};  // an idle connection between requests is closed
  std::chrono::milliseconds write_timeout{30000};      // a client that stops reading is dropped
  bool access_log = true;  // an access line for each error the poller answers itself
};

// TLS for every connection (vLLM's --ssl-keyfile / --ssl-certfile), with OpenSSL.
struct TlsFiles {
  std::string certfile;  // PEM certificate chain
  std::string keyfile;   // PEM private key
};

class ConnectionPoller;

// One accepted connection. While a worker owns it, the worker does blocking I/O through it.
class Connection {
 public:
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Buffered bytes first, then the socket until the request deadline. 0 at end of stream, -1 on error.
  ssize_t read(char* data, size_t size);
  // Writes everything or fails (-1) after the write timeout.
  ssize_t write(const char* data, size_t size);
  bool readable() const;  // bytes buffered or arriving before the request deadline
  bool writable() const;  // the socket accepts bytes within the write timeout

  // True once the client has certainly gone, found without writing a status line: a hang-up or error
  // on the socket. A FIN alone may be a half-close (shutdown(SHUT_WR)) from a client that still waits
  // for its answer, so it is probed by sending the response's first bytes ("HTTP/1.1 ", which commit
  // nothing); a client that really closed answers with a reset, seen on the next call.
  bool client_gone();
  // For a response already under way (no probe may be written): true once the client has sent FIN or
  // the socket failed. Whether it only half-closed shows at the next write the caller makes.
  bool peer_closed();

  const std::string& remote_ip() const { return remote_ip_; }
  int remote_port() const { return remote_port_; }
  const std::string& local_ip() const { return local_ip_; }
  int local_port() const { return local_port_; }
  bool peer_finished() const { return peer_eof_; }  // the client sent FIN (no further requests)
  int served() const { return served_; }

 private:
  friend class ConnectionPoller;
  Connection(int fd, const ConnectionLimits& limits);
  bool fill_some();  // non-blocking read of what is there (after the TLS handshake); false on failure
  bool handshake();  // TLS: advances the handshake; true once done (always true without TLS)
  ssize_t raw_recv(char* data, size_t size);
  ssize_t raw_send(const char* data, size_t size);
  bool send_all(const char* data, size_t size);
  size_t buffered() const { return in_.size() - in_off_; }
  std::string_view pending() const { return std::string_view(in_).substr(in_off_); }
  void consume(size_t n);
  void close_now();

  int fd_;
  const ConnectionLimits& limits_;
  SSL* ssl_ = nullptr;
  bool handshake_done_ = false;
  short want_ = 0x001;  // POLLIN, or POLLOUT when TLS waits to write
  std::string in_;
  size_t in_off_ = 0;
  bool peer_eof_ = false;
  bool socket_error_ = false;
  size_t probe_sent_ = 0;  // bytes of "HTTP/1.1 " already sent ahead of the response
  size_t probe_matched_ = 0;
  int served_ = 0;
  std::chrono::steady_clock::time_point request_started_;
  std::chrono::steady_clock::time_point idle_since_;
  bool request_in_progress_ = false;
  bool lingering_ = false;  // answered with an error; input is dropped until linger_until_
  std::chrono::steady_clock::time_point linger_until_;
  std::string remote_ip_, local_ip_;
  int remote_port_ = 0, local_port_ = 0;
};

class ConnectionPoller {
 public:
  // Called on the poller thread with a connection holding one complete request (or its headers); the
  // callee answers it on another thread and then calls release().
  using Dispatch = std::function<void(std::shared_ptr<Connection>)>;
  // The body of the errors the poller answers itself (400, 408, 413, 431, 501).
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;

  // tls: empty certfile for plain HTTP; otherwise throws Error (kInvalidArgument) for unusable files.
  ConnectionPoller(ConnectionLimits limits, Dispatch dispatch, ErrorBody error_body, const TlsFiles& tls = {});
  ~ConnectionPoller();
  ConnectionPoller(const ConnectionPoller&) = delete;
  ConnectionPoller& operator=(const ConnectionPoller&) = delete;

  // Binds and listens (exclusively: no SO_REUSEPORT, so a port another process listens on is an
  // error). Returns the bound port. Throws Error.
  int bind(const std::string& host, int port);
  // Runs the poller until shutdown().
  void run();
  // Closes the listening socket and every connection waiting for a request; busy connections are
  // closed once their response is written. Safe from any thread.
  void stop_accepting();
  // Shuts down the sockets of connections still being answered (their writes fail at once).
  void abort_busy();
  // Ends run(). Safe from any thread.
  void shutdown();
  // A worker is done with `c`: keep_open hands it back for the next request, otherwise it is closed.
  void release(std::shared_ptr<Connection> c, bool keep_open);
  bool draining() const;
  size_t open_connections() const;
  // Connections a worker is answering: their response is not yet fully written.
  size_t busy_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgemma
