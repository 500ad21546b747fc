#include "server/http/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdio>
#include <list>
#include <thread>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/strings.h"

namespace cart::server::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void SetTimeout(int fd, int option, absl::Duration timeout) {
  timeval tv{};
  const int64_t us = absl::ToInt64Microseconds(timeout);
  tv.tv_sec = static_cast<time_t>(us / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  setsockopt(fd, SOL_SOCKET, option, &tv, sizeof(tv));
}

Request ToRequest(const bhttp::request<bhttp::string_body>& in) {
  Request out;
  out.method = std::string(in.method_string());
  const std::string_view target(in.target().data(), in.target().size());
  const size_t q = target.find('?');
  out.path = PercentDecode(target.substr(0, q), false);
  if (q != std::string_view::npos) {
    for (const std::string& part : Split(target.substr(q + 1), '&')) {
      if (part.empty()) continue;
      const size_t eq = part.find('=');
      const std::string key = PercentDecode(part.substr(0, eq), true);
      out.query[key] =
          eq == std::string_view::npos ? std::string() : PercentDecode(part.substr(eq + 1), true);
    }
  }
  for (const auto& field : in) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(field.value());
  }
  out.body = in.body();
  return out;
}

// Headers every response carries: no sniffing, no framing, no referrer, and a content policy
// that lets the pages load scripts and styles from cartd only.
void SecurityHeaders(bhttp::fields& fields) {
  fields.set("X-Content-Type-Options", "nosniff");
  fields.set("X-Frame-Options", "DENY");
  fields.set("Referrer-Policy", "no-referrer");
  fields.set("Content-Security-Policy",
             "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
             "object-src 'none'; base-uri 'none'; frame-ancestors 'none'");
}

template <class Stream>
void WriteSimple(Stream& stream, bhttp::status status, const std::string& text) {
  bhttp::response<bhttp::string_body> res{status, 11};
  res.set(bhttp::field::content_type, "application/json");
  res.set(bhttp::field::connection, "close");
  SecurityHeaders(res.base());
  res.body() = text;
  res.prepare_payload();
  beast::error_code ec;
  bhttp::write(stream, res, ec);
}

// The parser every request is read with: the connection's header and body limits.
void Limit(bhttp::request_parser<bhttp::string_body>& parser, const HttpServerOptions& options) {
  parser.body_limit(static_cast<uint64_t>(options.max_body_bytes));
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
}

// The answer to a request the parser refused for a limit (414, 431 or 413); nullopt for other
// errors, which close the connection without an answer (nothing usable was sent).
std::optional<Response> LimitRefusal(const beast::error_code& ec, std::string_view seen,
                                     const HttpServerOptions& options) {
  Response r;
  if (ec == bhttp::error::header_limit) {
    // The request line alone past the limit is a URI too long (414); else the headers (431).
    const bool line_too_long = seen.find("\r\n") == std::string_view::npos;
    r.status = line_too_long ? 414 : 431;
    r.body = StrCat("{\"error\":\"", line_too_long ? "request line" : "request line and headers",
                    " longer than ", options.max_header_bytes, " bytes\",\"code\":\"",
                    line_too_long ? "URI_TOO_LONG" : "HEADERS_TOO_LARGE", "\"}");
    return r;
  }
  if (ec == bhttp::error::body_limit) {
    r.status = 413;
    r.body = StrCat("{\"error\":\"request body larger than ", options.max_body_bytes,
                    " bytes\",\"code\":\"PAYLOAD_TOO_LARGE\"}");
    return r;
  }
  return std::nullopt;
}

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Sets the connection's deadline `d` from now (it holds until the next call or Clear).
void Arm(std::atomic<int64_t>& deadline_us, absl::Duration d) {
  deadline_us.store(SteadyMicros() + absl::ToInt64Microseconds(d));
}

}  // namespace

std::string PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      const int hi = HexValue(text[i + 1]);
      const int lo = HexValue(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += (plus_is_space && c == '+') ? ' ' : c;
  }
  return out;
}

Parsed ParseRequest(std::string_view bytes, const HttpServerOptions& options) {
  Parsed out;
  bhttp::request_parser<bhttp::string_body> parser;
  Limit(parser, options);
  parser.eager(true);
  beast::error_code ec;
  size_t used = 0;
  // Fed as a socket would deliver it: the parser consumes what it can, the rest follows.
  while (!ec && used < bytes.size() && !parser.is_done()) {
    const size_t n = parser.put(asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec == bhttp::error::need_more) {
      ec = {};
      break;
    }
    if (n == 0 && !ec) break;
    used += n;
  }
  if (!ec && !parser.is_done()) {
    parser.put_eof(ec);  // the client closed: a request without length ends here, or is partial
  }
  if (!ec && parser.is_done()) {
    out.request = ToRequest(parser.get());
    return out;
  }
  const std::string_view seen = bytes.substr(0, static_cast<size_t>(options.max_header_bytes));
  if (std::optional<Response> refusal = LimitRefusal(ec, seen, options)) {
    out.refusal = *std::move(refusal);
  } else {
    out.refusal.status = 400;
    out.refusal.body = R"({"error":"not an HTTP/1.1 request","code":"INVALID_ARGUMENT"})";
  }
  return out;
}

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::unique_ptr<asio::ssl::context> ssl;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread accept_thread;
  std::thread watchdog_thread;

  struct Connection {
    std::thread thread;
    int fd = -1;
    std::string client;  // the peer's address, for the per-client bound
    std::atomic<bool> done{false};
    // When the current read or write must be over (microseconds of the steady clock; 0: none
    // pending). The watchdog shuts the socket down past it, which ends the blocking call: a
    // socket timeout (SO_RCVTIMEO) does not, as Asio retries a read that timed out.
    std::atomic<int64_t> deadline_us{0};
    bool cut = false;  // the watchdog shut it down (guarded by mu)
  };
  absl::Mutex mu;
  std::list<Connection> connections ABSL_GUARDED_BY(mu);
  bool shut_down ABSL_GUARDED_BY(mu) = false;

  void AcceptLoop();
  void Watchdog();
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);  // joins finished connection threads
  template <class Stream>
  void Serve(Stream& stream, Connection& self);
  template <class Stream>
  void LingeringClose(Stream& stream, Connection& self);
  void Run(tcp::socket socket, Connection* self);
};

// After a refusal sent while the client may still be sending (a body past the limit): stop
// sending, then read and drop what still comes for a moment (at most 2 s and 8 MiB) before the
// socket closes. Closing with unread bytes makes the kernel reset the connection, and a reset
// can discard the answer before the client reads it (RFC 9112 §9.6).
template <class Stream>
void HttpServer::Impl::LingeringClose(Stream& stream, Connection& self) {
  if constexpr (std::is_same_v<Stream, tcp::socket>) {
    beast::error_code ec;
    stream.shutdown(tcp::socket::shutdown_send, ec);
    Arm(self.deadline_us, std::min(options.idle_timeout, absl::Seconds(2)));
    char sink[16384];
    for (size_t drained = 0; !ec && drained < (8u << 20);) {
      drained += stream.read_some(asio::buffer(sink), ec);
    }
    self.deadline_us.store(0);
  }
}

template <class Stream>
void HttpServer::Impl::Serve(Stream& stream, Connection& self) {
  beast::flat_buffer buffer;
  while (!stopping.load()) {
    bhttp::request_parser<bhttp::string_body> parser;
    Limit(parser, options);
    beast::error_code ec;
    Arm(self.deadline_us, options.idle_timeout);  // the whole request, not each byte
    bhttp::read(stream, buffer, parser, ec);
    Arm(self.deadline_us, options.send_timeout);
    // What the parser has not consumed: on a header-limit error it starts at the line or field
    // it could not finish (Beast consumes the request line and each field as they complete).
    const std::string_view seen(static_cast<const char*>(buffer.data().data()),
                                buffer.data().size());
    if (std::optional<Response> refusal = LimitRefusal(ec, seen, options)) {
      WriteSimple(stream, static_cast<bhttp::status>(refusal->status), refusal->body);
      LingeringClose(stream, self);
      return;
    }
    if (ec) return;  // closed, timed out, or not HTTP
    const bhttp::request<bhttp::string_body>& in = parser.get();
    Response response;
    self.deadline_us.store(0);  // the handler's time is not the client's
    try {
      Request request = ToRequest(in);
      request.peer = self.client;
      response = handler(request);
    } catch (const std::exception& e) {
      response.status = 500;
      response.body = R"({"error":"internal error","code":"INTERNAL"})";
      std::fprintf(stderr, "cartd: http handler threw: %s\n", e.what());
    }
    if (response.stream) {
      bhttp::response<bhttp::empty_body> head{static_cast<bhttp::status>(response.status), 11};
      head.set(bhttp::field::content_type, response.content_type);
      head.set(bhttp::field::cache_control, "no-cache");
      head.set(bhttp::field::connection, "close");
      head.set("X-Accel-Buffering", "no");
      SecurityHeaders(head.base());
      for (const auto& [name, value] : response.headers) head.set(name, value);
      bhttp::response_serializer<bhttp::empty_body> serializer{head};
      Arm(self.deadline_us, options.send_timeout);
      bhttp::write_header(stream, serializer, ec);
      if (ec) return;
      self.deadline_us.store(0);  // a stream waits for news as long as it likes
      response.stream([&](std::string_view chunk) {
        if (stopping.load()) return false;
        beast::error_code write_ec;
        Arm(self.deadline_us, options.send_timeout);
        asio::write(stream, asio::buffer(chunk.data(), chunk.size()), write_ec);
        self.deadline_us.store(0);
        return !write_ec;
      });
      return;
    }
    bhttp::response<bhttp::string_body> out{static_cast<bhttp::status>(response.status),
                                            in.version()};
    out.set(bhttp::field::content_type, response.content_type);
    SecurityHeaders(out.base());
    for (const auto& [name, value] : response.headers) out.set(name, value);
    out.keep_alive(in.keep_alive());
    if (out.keep_alive()) {
      // How long this connection may wait for the next request before the watchdog cuts it.
      // Clients that honour the hint (undici, Firefox, curl) retire the connection first, so a
      // busy client never sends its next request into a connection that is closing.
      out.set(bhttp::field::keep_alive,
              StrCat("timeout=", std::max<int64_t>(1, absl::ToInt64Seconds(options.idle_timeout))));
    }
    out.body() = std::move(response.body);
    out.prepare_payload();
    Arm(self.deadline_us, options.send_timeout);
    if (in.method() == bhttp::verb::head) {
      // HEAD: the headers a GET would carry, Content-Length included, and no body.
      bhttp::response<bhttp::empty_body> head{out.result(), out.version()};
      for (const auto& field : out) head.set(field.name_string(), field.value());
      bhttp::response_serializer<bhttp::empty_body> serializer{head};
      bhttp::write_header(stream, serializer, ec);
    } else {
      bhttp::write(stream, out, ec);
    }
    if (ec || !out.keep_alive()) return;
  }
}

void HttpServer::Impl::Run(tcp::socket socket, Connection* self) {
  // Dashboard work yields to the gRPC side on a busy box: this thread runs at a lower priority
  // (Linux applies a nice value per thread).
  if (options.thread_nice > 0) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), options.thread_nice);
  }
  // Deadlines are the watchdog's (Connection::deadline_us): the TLS handshake gets the idle one.
  Arm(self->deadline_us, options.idle_timeout);
  // Marked done before the socket closes, so that Shutdown never touches a descriptor number
  // that may already belong to another connection.
  auto finish = [&](tcp::socket& s) {
    {
      absl::MutexLock lock(&mu);
      self->done.store(true);
    }
    beast::error_code ec;
    s.shutdown(tcp::socket::shutdown_both, ec);
    s.close(ec);
  };
  if (ssl) {
    asio::ssl::stream<tcp::socket> stream(std::move(socket), *ssl);
    beast::error_code ec;
    stream.handshake(asio::ssl::stream_base::server, ec);
    if (!ec) Serve(stream, *self);
    finish(stream.next_layer());
  } else {
    Serve(socket, *self);
    finish(socket);
  }
}

void HttpServer::Impl::Reap() {
  for (auto it = connections.begin(); it != connections.end();) {
    if (it->done.load()) {
      it->thread.join();
      it = connections.erase(it);
    } else {
      ++it;
    }
  }
}

void HttpServer::Impl::AcceptLoop() {
  while (!stopping.load()) {
    tcp::socket socket(io);
    beast::error_code ec;
    acceptor.accept(socket, ec);
    if (stopping.load()) return;
    if (ec) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // e.g. EMFILE: back off
      continue;
    }
    std::string client;
    {
      beast::error_code peer_ec;
      const tcp::endpoint peer = socket.remote_endpoint(peer_ec);
      if (!peer_ec) client = peer.address().to_string();
    }
    absl::MutexLock lock(&mu);
    Reap();
    if (shut_down) return;
    int from_client = 0;
    for (const Connection& c : connections) {
      // A connection the watchdog cut is ending (its client has seen the close, its thread may
      // not have finished yet): it no longer holds the client's share.
      if (!c.done.load() && !c.cut && c.client == client) ++from_client;
    }
    if (from_client >= options.max_connections_per_client) {
      SetTimeout(socket.native_handle(), SO_SNDTIMEO, absl::Seconds(1));
      if (!ssl) {
        WriteSimple(socket, bhttp::status::too_many_requests,
                    StrCat("{\"error\":\"too many connections from ", client, " (limit ",
                           options.max_connections_per_client,
                           " per client address)\",\"code\":\"RESOURCE_EXHAUSTED\"}"));
      }
      socket.close(ec);
      continue;
    }
    if (static_cast<int>(connections.size()) >= options.max_connections) {
      SetTimeout(socket.native_handle(), SO_SNDTIMEO, absl::Seconds(1));
      if (!ssl) {
        WriteSimple(socket, bhttp::status::service_unavailable,
                    StrCat("{\"error\":\"too many connections (limit ", options.max_connections,
                           ")\",\"code\":\"UNAVAILABLE\"}"));
      }
      socket.close(ec);
      continue;
    }
    connections.emplace_back();
    Connection* connection = &connections.back();
    connection->fd = socket.native_handle();
    connection->client = std::move(client);
    connection->thread = std::thread(
        [this, connection, s = std::move(socket)]() mutable { Run(std::move(s), connection); });
  }
}

void HttpServer::Impl::Watchdog() {
  // Looks four times per shortest timeout (at least every 5 ms, at most every 250 ms).
  const int64_t shortest_us =
      absl::ToInt64Microseconds(std::min(options.idle_timeout, options.send_timeout));
  const auto tick = std::chrono::microseconds(std::clamp<int64_t>(shortest_us / 4, 5'000, 250'000));
  absl::MutexLock lock(&mu);
  while (!shut_down) {
    const int64_t now = SteadyMicros();
    for (Connection& c : connections) {
      const int64_t deadline = c.deadline_us.load();
      if (!c.done.load() && !c.cut && deadline != 0 && now > deadline) {
        ::shutdown(c.fd, SHUT_RDWR);  // ends the blocked read or write; the thread then exits
        c.cut = true;
      }
    }
    mu.AwaitWithTimeout(
        absl::Condition(&shut_down),
        absl::Microseconds(std::chrono::duration_cast<std::chrono::microseconds>(tick).count()));
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("HTTP address '", options.listen, "' is not host:port"));
  }
  std::string host = options.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  std::optional<int64_t> port = ParseInt64(options.listen.substr(colon + 1));
  if (!port || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        StrCat("HTTP address '", options.listen, "': the port must be 0..65535"));
  }
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        StrCat("HTTP address '", options.listen, "': '", host, "' is not an IP address"));
  }
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    impl->ssl = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    impl->ssl->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                           asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                           asio::ssl::context::no_tlsv1_1);
    impl->ssl->use_certificate_chain_file(options.tls_cert_file, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          StrCat("TLS certificate ", options.tls_cert_file, ": ", ec.message()));
    }
    impl->ssl->use_private_key_file(options.tls_key_file, asio::ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          StrCat("TLS key ", options.tls_key_file, ": ", ec.message()));
    }
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(*port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        StrCat("cannot serve HTTP on ", options.listen, ": ", ec.message()));
  }
  impl->port = impl->acceptor.local_endpoint().port();
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  impl->watchdog_thread = std::thread([raw] { raw->Watchdog(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }
bool HttpServer::tls() const { return impl_->ssl != nullptr; }
bool HttpServer::stopping() const { return impl_->stopping.load(); }

void HttpServer::Shutdown() {
  impl_->stopping.store(true);
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
    // Wakes the blocking accept() and every blocked read or write.
    ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
    for (Impl::Connection& c : impl_->connections) {
      if (!c.done.load()) ::shutdown(c.fd, SHUT_RDWR);
    }
  }
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  if (impl_->watchdog_thread.joinable()) impl_->watchdog_thread.join();
  beast::error_code ec;
  impl_->acceptor.close(ec);
  // Joined outside the lock: a finishing connection takes it to mark itself done. The nodes
  // move without being copied, so the threads' pointers to them stay valid.
  std::list<Impl::Connection> connections;
  {
    absl::MutexLock lock(&impl_->mu);
    connections.splice(connections.begin(), impl_->connections);
  }
  for (Impl::Connection& c : connections) {
    if (c.thread.joinable()) c.thread.join();
  }
}

}  // namespace cart::server::http
