#include "api/http/http_connections.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "api/http/request_framing.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kStatusPrefix = "HTTP/1.1 ";
constexpr size_t kReadChunk = 16 << 10;
constexpr ssize_t kWouldBlock = -2;

int poll_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
}

void address_of(const sockaddr_storage& ss, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

}  // namespace

// ---- Connection ----

Connection::Connection(int fd, const ConnectionLimits& limits) : fd_(fd), limits_(limits) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) address_of(ss, remote_ip_, remote_port_);
  len = sizeof(ss);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) address_of(ss, local_ip_, local_port_);
  request_started_ = idle_since_ = Clock::now();
}

Connection::~Connection() { close_now(); }

void Connection::close_now() {
  if (fd_ < 0) return;
  if (ssl_) {
    if (handshake_done_ && !socket_error_) SSL_shutdown(ssl_);  // close_notify, best effort (non-blocking)
    SSL_free(ssl_);
    ssl_ = nullptr;
  }
  ::close(fd_);
  fd_ = -1;
}

void Connection::consume(size_t n) {
  in_off_ += std::min(n, buffered());
  if (in_off_ == in_.size()) {
    if (in_.capacity() > (1u << 20)) std::string().swap(in_);  // do not keep a large body's buffer
    in_.clear();
    in_off_ = 0;
  } else if (in_off_ > (64u << 10) && in_off_ * 2 > in_.size()) {
    in_.erase(0, in_off_);
    in_off_ = 0;
  }
}

// One non-blocking receive: > 0 bytes, 0 end of stream, kWouldBlock (wait for want_), -1 error.
ssize_t Connection::raw_recv(char* data, size_t size) {
  if (ssl_) {
    ERR_clear_error();
    const int n = SSL_read(ssl_, data, static_cast<int>(std::min<size_t>(size, INT32_MAX)));
    if (n > 0) return n;
    switch (SSL_get_error(ssl_, n)) {
      case SSL_ERROR_WANT_READ: want_ = POLLIN; return kWouldBlock;
      case SSL_ERROR_WANT_WRITE: want_ = POLLOUT; return kWouldBlock;
      case SSL_ERROR_ZERO_RETURN: return 0;
      default: return -1;
    }
  }
  for (;;) {
    const ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    want_ = POLLIN;
    return errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : -1;
  }
}

// One non-blocking send: > 0 bytes written, kWouldBlock (wait for want_), -1 error.
ssize_t Connection::raw_send(const char* data, size_t size) {
  if (ssl_) {
    ERR_clear_error();
    const int n = SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(size, 1 << 30)));
    if (n > 0) return n;
    switch (SSL_get_error(ssl_, n)) {
      case SSL_ERROR_WANT_READ: want_ = POLLIN; return kWouldBlock;
      case SSL_ERROR_WANT_WRITE: want_ = POLLOUT; return kWouldBlock;
      default: return -1;
    }
  }
  for (;;) {
    const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    want_ = POLLOUT;
    return errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : -1;
  }
}

// Sends everything within the write timeout.
bool Connection::send_all(const char* data, size_t size) {
  const auto deadline = Clock::now() + limits_.write_timeout;
  while (size > 0) {
    if (fd_ < 0) return false;
    const ssize_t n = raw_send(data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n != kWouldBlock || Clock::now() >= deadline) return false;
    pollfd p{fd_, want_, 0};
    if (::poll(&p, 1, poll_ms(deadline)) < 0 && errno != EINTR) return false;
    if (p.revents & (POLLERR | POLLNVAL)) return false;
  }
  return true;
}

bool Connection::handshake() {
  if (!ssl_ || handshake_done_) return true;
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    handshake_done_ = true;
    want_ = POLLIN;
    return true;
  }
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ) want_ = POLLIN;
  else if (e == SSL_ERROR_WANT_WRITE) want_ = POLLOUT;
  else socket_error_ = true;
  return false;
}

bool Connection::fill_some() {
  if (!handshake()) return !socket_error_;
  // Read everything there is (TLS too: nothing stays hidden in the library's buffer, where poll()
  // would not see it).
  // At most one request's worth ahead (the framing decides before more is needed), so a client that
  // sends without pause cannot grow the buffer.
  const size_t cap = limits_.max_header_bytes + limits_.max_body_bytes + kReadChunk;
  for (;;) {
    if (buffered() > cap) return true;
    const size_t old = in_.size();
    in_.resize(old + kReadChunk);
    const ssize_t n = raw_recv(in_.data() + old, kReadChunk);
    in_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) continue;
    if (n == 0) {
      peer_eof_ = true;
      return true;
    }
    if (n == kWouldBlock) return true;
    socket_error_ = true;
    return false;
  }
}

ssize_t Connection::read(char* data, size_t size) {
  if (size == 0) return 0;
  const auto deadline = request_started_ + limits_.request_timeout;
  if (buffered() == 0) want_ = POLLIN;  // a write may have left POLLOUT
  while (buffered() == 0) {
    if (peer_eof_ || fd_ < 0) return 0;
    if (socket_error_ || Clock::now() >= deadline) return -1;
    if (ssl_ && SSL_pending(ssl_) > 0) {  // decrypted bytes poll() cannot see
      if (!fill_some()) return -1;
      continue;
    }
    pollfd p{fd_, want_, 0};
    const int r = ::poll(&p, 1, poll_ms(deadline));
    if (r < 0 && errno != EINTR) return -1;
    if (r > 0 && !fill_some()) return -1;
  }
  const size_t n = std::min(size, buffered());
  std::memcpy(data, in_.data() + in_off_, n);
  consume(n);
  return static_cast<ssize_t>(n);
}

ssize_t Connection::write(const char* data, size_t size) {
  const size_t total = size;
  // The status line's first bytes may already be out (a half-close probe): skip them once.
  while (probe_matched_ < probe_sent_ && size > 0) {
    if (*data != kStatusPrefix[probe_matched_]) {
      DG_LOG_ERROR("http", "response does not start with the probed status prefix");
      return -1;
    }
    ++data, --size, ++probe_matched_;
  }
  return send_all(data, size) ? static_cast<ssize_t>(total) : -1;
}

bool Connection::readable() const {
  if (buffered() > 0) return true;
  if (fd_ < 0 || peer_eof_) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, poll_ms(request_started_ + limits_.request_timeout)) > 0;
}

bool Connection::writable() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLOUT, 0};
  const int r = ::poll(&p, 1, static_cast<int>(limits_.write_timeout.count()));
  return r > 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

bool Connection::client_gone() {
  if (fd_ < 0 || socket_error_) return true;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) < 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if (p.revents & POLLRDHUP) peer_eof_ = true;
  if (peer_eof_ && probe_sent_ == 0) {
    // Sent whole (a TLS record must not be left half-written before the response's own bytes).
    if (!send_all(kStatusPrefix.data(), kStatusPrefix.size())) return true;
    probe_sent_ = kStatusPrefix.size();
  }
  return false;
}

bool Connection::peer_closed() {
  if (fd_ < 0 || socket_error_ || peer_eof_) return true;
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) < 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if (p.revents & POLLRDHUP) peer_eof_ = true;
  return peer_eof_;
}

// ---- ConnectionPoller ----

struct ConnectionPoller::Impl {
  ConnectionLimits limits;
  Dispatch dispatch;
  ErrorBody error_body;
  SSL_CTX* tls = nullptr;
  int listen_fd = -1;
  int wake_fd = -1;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};
  std::atomic<size_t> open{0};
  Clock::time_point accept_paused_until{};
  Clock::time_point last_fd_warning{};
  std::list<std::shared_ptr<Connection>> waiting;  // poller thread only
  mutable std::mutex mu;
  std::vector<std::pair<std::shared_ptr<Connection>, bool>> returned;  // under mu
  std::set<Connection*> busy;                                           // under mu

  void wake() const {
    const uint64_t one = 1;
    if (wake_fd >= 0) [[maybe_unused]] auto r = ::write(wake_fd, &one, sizeof(one));
  }

  void answer_error(Connection& c, int status, const std::string& message) {
    const std::string body = error_body ? error_body(status, message) : message + "\n";
    const std::string text = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}", status,
        reason_phrase(status), error_body ? "application/json" : "text/plain", body.size(), body);
    // The request line is not trusted to be printable: the access line says what was refused, not what was sent.
    if (limits.access_log) DG_LOG_INFO("access", "{} - (request refused before routing) {}", c.remote_ip_, status);
    DG_LOG_DEBUG("http", "{}:{} -> {} ({})", c.remote_ip_, c.remote_port_, status, message);
    if (c.ssl_ && !c.handshake_done_) return;  // no channel to answer on yet
    // Best effort: a client that does not read its error is not waited for.
    [[maybe_unused]] auto n = c.raw_send(text.data(), text.size());
    if (!c.ssl_) ::shutdown(c.fd_, SHUT_WR);
  }

  void close_conn(const std::shared_ptr<Connection>& c) {
    c->close_now();
    --open;
  }

  // After an error answer the client may still be sending (a body the 413 refused): reading and
  // dropping it for a moment lets the answer arrive, where closing at once would reset the connection.
  static constexpr auto kLinger = std::chrono::seconds(2);
  void linger(Connection& c) {
    c.lingering_ = true;
    c.linger_until_ = Clock::now() + kLinger;
    c.in_.clear();
    c.in_off_ = 0;
  }

  Clock::time_point deadline_of(const Connection& c) const {
    if (c.lingering_) return c.linger_until_;
    return c.request_in_progress_ ? c.request_started_ + limits.request_timeout : c.idle_since_ + limits.keep_alive_timeout;
  }

  // Looks at what `c` has buffered: dispatches a complete request, answers a bad one. Returns false
  // when the connection left the waiting set (dispatched or closed).
  bool examine(const std::shared_ptr<Connection>& c) {
    if (c->lingering_) {
      c->in_.clear();
      c->in_off_ = 0;
      if (c->peer_eof_ || c->socket_error_) {
        close_conn(c);
        return false;
      }
      return true;
    }
    if (c->buffered() == 0) {
      if (c->peer_eof_ || c->socket_error_) {
        close_conn(c);
        return false;
      }
      return true;
    }
    if (!c->request_in_progress_) {
      c->request_in_progress_ = true;
      c->request_started_ = Clock::now();
    }
    RequestFraming f = frame_request(c->pending(), limits);
    c->consume(f.skip);
    if (f.kind == RequestFraming::Kind::kError) {
      answer_error(*c, f.status, f.message);
      linger(*c);
      return true;
    }
    if (f.kind == RequestFraming::Kind::kIncomplete) {
      if (c->peer_eof_ || c->socket_error_) {
        close_conn(c);
        return false;
      }
      return true;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      busy.insert(c.get());
    }
    dispatch(c);
    return false;
  }

  void accept_all() {
    // A bounded batch, so the connections just accepted get read before more arrive.
    for (int batch = 0; batch < 64; ++batch) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno == EMFILE || errno == ENFILE) {
          // The listening socket stays readable: pause accepting briefly instead of spinning, and
          // make room by closing the longest-waiting connection.
          const bool made_room = evict_one();
          const auto now = Clock::now();
          if (now - last_fd_warning > std::chrono::seconds(10)) {
            last_fd_warning = now;
            DG_LOG_WARN("http", "out of file descriptors ({} connections open); closing the longest-waiting ones",
                        open.load());
          }
          if (made_room) continue;
          accept_paused_until = now + std::chrono::milliseconds(100);  // every connection is busy
        }
        return;
      }
      if (open.load() >= limits.max_connections && !evict_one()) {
        ::close(fd);
        continue;
      }
      const int yes = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      auto c = std::shared_ptr<Connection>(new Connection(fd, limits));
      if (tls) {
        c->ssl_ = SSL_new(tls);
        if (!c->ssl_ || SSL_set_fd(c->ssl_, fd) != 1) {
          DG_LOG_WARN("http", "TLS set-up failed for a connection");
          continue;  // c closes the descriptor
        }
        SSL_set_accept_state(c->ssl_);
        // The handshake counts as the start of the first request (its deadline applies).
        c->request_in_progress_ = true;
        c->request_started_ = Clock::now();
      }
      waiting.push_back(std::move(c));
      ++open;
    }
  }

  // At the connection limit: closes the waiting connection that has been quiet longest (an idle
  // keep-alive first, else the oldest unfinished request). False when every connection is busy.
  bool evict_one() {
    auto victim = waiting.end();
    for (auto it = waiting.begin(); it != waiting.end(); ++it) {
      // Lingering ones first, then idle keep-alives, then by age the unfinished requests and the new
      // connections that have sent nothing yet (so the newest goes last).
      auto key = [](const Connection& c) {
        const bool keep_alive_idle = !c.request_in_progress_ && c.served_ > 0;
        return std::tuple(!c.lingering_, !keep_alive_idle, keep_alive_idle ? c.idle_since_ : c.request_started_);
      };
      if (victim == waiting.end() || key(**it) < key(**victim)) victim = it;
    }
    if (victim == waiting.end()) return false;
    DG_LOG_DEBUG("http", "connection limit ({}) reached: closing {}:{}", limits.max_connections, (*victim)->remote_ip_,
                 (*victim)->remote_port_);
    if ((*victim)->request_in_progress_ && !(*victim)->lingering_) answer_error(**victim, 503, "Too many connections");
    close_conn(*victim);
    waiting.erase(victim);
    return true;
  }

  void take_returned() {
    std::vector<std::pair<std::shared_ptr<Connection>, bool>> back;
    {
      std::lock_guard<std::mutex> lock(mu);
      back.swap(returned);
    }
    for (auto& [c, keep] : back) {
      if (!keep || draining) {
        close_conn(c);
        continue;
      }
      c->request_in_progress_ = false;
      c->idle_since_ = Clock::now();
      c->want_ = POLLIN;
      if (c->ssl_ && SSL_pending(c->ssl_) > 0) c->fill_some();  // decrypted bytes poll() cannot see
      if (examine(c)) waiting.push_back(c);  // pipelined bytes may already hold the next request
    }
  }

  void expire(Clock::time_point now) {
    for (auto it = waiting.begin(); it != waiting.end();) {
      Connection& c = **it;
      if (now < deadline_of(c)) {
        ++it;
        continue;
      }
      if (c.request_in_progress_ && !c.lingering_) {
        answer_error(c, 408, fmt::format("Request not received within {} s", limits.request_timeout.count() / 1000.0));
        linger(c);
        ++it;
        continue;
      }
      close_conn(*it);
      it = waiting.erase(it);
    }
  }

  void run() {
    std::vector<pollfd> fds;
    std::vector<std::list<std::shared_ptr<Connection>>::iterator> where;
    while (!stopping) {
      take_returned();
      if (draining && listen_fd >= 0) {
        ::close(listen_fd);
        listen_fd = -1;
        for (auto& c : waiting) close_conn(c);
        waiting.clear();
      }
      fds.clear();
      where.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      const bool can_accept = listen_fd >= 0 && (open.load() < limits.max_connections || !waiting.empty()) &&
                              Clock::now() >= accept_paused_until;
      if (can_accept) fds.push_back({listen_fd, POLLIN, 0});
      auto next = Clock::now() + std::chrono::seconds(1);
      if (listen_fd >= 0 && !can_accept) next = std::min(next, std::max(accept_paused_until, Clock::now() + std::chrono::milliseconds(1)));
      for (auto it = waiting.begin(); it != waiting.end(); ++it) {
        fds.push_back({(*it)->fd_, (*it)->want_, 0});
        where.push_back(it);
        next = std::min(next, deadline_of(**it));
      }
      const int r = ::poll(fds.data(), fds.size(), poll_ms(next) + 1);
      if (r < 0 && errno != EINTR) {
        DG_LOG_ERROR("http", "poll failed: {}", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (r > 0) {
        if (fds[0].revents) {
          uint64_t v;
          [[maybe_unused]] auto n = ::read(wake_fd, &v, sizeof(v));
        }
        const size_t first_conn = can_accept ? 2 : 1;
        for (size_t i = first_conn; i < fds.size(); ++i) {
          if (!fds[i].revents) continue;
          auto it = where[i - first_conn];
          const std::shared_ptr<Connection>& c = *it;
          c->fill_some();
          if (!examine(c)) waiting.erase(it);
        }
        if (can_accept && fds[1].revents) accept_all();
      }
      expire(Clock::now());
    }
    for (auto& c : waiting) close_conn(c);
    waiting.clear();
    take_returned();
  }
};

namespace {
std::string tls_error() {
  char buf[256] = {0};
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}
}  // namespace

ConnectionPoller::ConnectionPoller(ConnectionLimits limits, Dispatch dispatch, ErrorBody error_body, const TlsFiles& tls)
    : impl_(std::make_unique<Impl>()) {
  if (!tls.certfile.empty() || !tls.keyfile.empty()) {
    if (tls.certfile.empty() || tls.keyfile.empty()) fail_arg("TLS needs both --ssl-certfile and --ssl-keyfile");
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) fail_arg("TLS: {}", tls_error());
    impl_->tls = ctx;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(ctx, tls.certfile.c_str()) != 1)
      fail_arg("--ssl-certfile {}: {}", tls.certfile, tls_error());
    if (SSL_CTX_use_PrivateKey_file(ctx, tls.keyfile.c_str(), SSL_FILETYPE_PEM) != 1)
      fail_arg("--ssl-keyfile {}: {}", tls.keyfile, tls_error());
    if (SSL_CTX_check_private_key(ctx) != 1)
      fail_arg("--ssl-keyfile {} does not match --ssl-certfile {}", tls.keyfile, tls.certfile);
  }
  impl_->limits = limits;
  impl_->dispatch = std::move(dispatch);
  impl_->error_body = std::move(error_body);
  impl_->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->wake_fd < 0) throw Error(ErrorKind::kInternal, fmt::format("eventfd: {}", std::strerror(errno)));
  // Every connection is a descriptor: lift the soft limit to the hard one and keep the connection cap
  // below it (with room for model files, logs and the engine).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
      getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > 128)
      impl_->limits.max_connections = std::min<size_t>(impl_->limits.max_connections, rl.rlim_cur - 96);
  }
}

ConnectionPoller::~ConnectionPoller() {
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
  for (auto& c : impl_->waiting) c->close_now();
  impl_->waiting.clear();
  if (impl_->wake_fd >= 0) ::close(impl_->wake_fd);
  // Busy connections hold an SSL of this context; OpenSSL counts references, so freeing here is safe.
  if (impl_->tls) SSL_CTX_free(impl_->tls);
}

int ConnectionPoller::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (gai != 0) fail_arg("cannot listen on {}:{}: {}", host, port, gai_strerror(gai));
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR only lets a restart bind over connections still in TIME_WAIT; without SO_REUSEPORT
    // a second listener on the same port fails with EADDRINUSE instead of sharing the traffic.
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (ai->ai_family == AF_INET6) {
      const int no = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      last_error = errno == EADDRINUSE ? "the address is already in use (is another server running on this port?)"
                                       : std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) fail_arg("cannot listen on {}:{}: {}", host, port, last_error);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  std::string ip;
  int bound = port;
  address_of(ss, ip, bound);
  impl_->listen_fd = fd;
  return bound;
}

void ConnectionPoller::run() { impl_->run(); }

void ConnectionPoller::stop_accepting() {
  impl_->draining = true;
  impl_->wake();
}

void ConnectionPoller::abort_busy() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (Connection* c : impl_->busy)
    if (c->fd_ >= 0) ::shutdown(c->fd_, SHUT_RDWR);
}

void ConnectionPoller::shutdown() {
  impl_->stopping = true;
  impl_->wake();
}

void ConnectionPoller::release(std::shared_ptr<Connection> c, bool keep_open) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->busy.erase(c.get());
    ++c->served_;
    c->probe_sent_ = c->probe_matched_ = 0;  // per response
    impl_->returned.emplace_back(std::move(c), keep_open && !impl_->stopping);
  }
  impl_->wake();
}

bool ConnectionPoller::draining() const { return impl_->draining; }
size_t ConnectionPoller::open_connections() const { return impl_->open.load(); }
size_t ConnectionPoller::busy_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->busy.size();
}

}  // namespace dgemma
