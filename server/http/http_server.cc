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
#include <nlohmann/json.hpp>
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

using Parser = bhttp::request_parser<bhttp::string_body>;

// The parser every request is read with: the connection's header and body limits.
void Limit(Parser& parser, const HttpServerOptions& options) {
  parser.body_limit(static_cast<uint64_t>(options.max_body_bytes));
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  parser.eager(true);  // the body as it comes, not one chunk per call
}

Response Refusal(int status, std::string_view error, std::string_view code) {
  Response r;
  r.status = status;
  r.body = nlohmann::json{{"error", error}, {"code", code}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

// The answer to a request the parser refused: 414 or 431 past the header limit, 413 past the
// body limit, 400 for anything else that is not a well-formed request (Beast's reason named).
// `consumed`: the bytes of this request the parser has taken (Beast takes the request line, then
// each header field, as each completes); `seen`: what it had not taken.
Response ParseRefusal(const beast::error_code& ec, int64_t consumed, std::string_view seen,
                      const HttpServerOptions& options) {
  if (ec == bhttp::error::header_limit) {
    // The request line alone past the limit is a URI too long (414); else the headers (431). A
    // line Beast has taken was complete, and a long field after it is a header's.
    const bool line_too_long =
        consumed == 0 &&
        seen.substr(0, static_cast<size_t>(options.max_header_bytes)).find("\r\n") ==
            std::string_view::npos;
    return Refusal(line_too_long ? 414 : 431,
                   StrCat(line_too_long ? "request line" : "request line and headers",
                          " longer than ", options.max_header_bytes, " bytes"),
                   line_too_long ? "URI_TOO_LONG" : "HEADERS_TOO_LARGE");
  }
  if (ec == bhttp::error::body_limit) {
    return Refusal(413, StrCat("request body larger than ", options.max_body_bytes, " bytes"),
                   "PAYLOAD_TOO_LARGE");
  }
  return Refusal(400, StrCat("not a well-formed HTTP/1.1 request: ", ec.message()),
                 "INVALID_ARGUMENT");
}

// What reading one request ended with: a whole request in the parser, an answer that refuses
// it (the connection closes after it), or nothing to answer (the client closed or went silent
// before sending a byte of it, or the socket failed).
struct ReadOutcome {
  enum Kind { kRequest, kRefused, kGone } kind = kGone;
  Response refusal;  // kRefused
};

ReadOutcome Refused(Response refusal) { return ReadOutcome{ReadOutcome::kRefused, refusal}; }

// The header's own rules that Beast leaves to the server (RFC 9112 §3.2): an HTTP/1.1 request
// names exactly one Host, an HTTP/1.0 one at most.
std::optional<Response> HeaderRefusal(const Parser& parser) {
  const auto& fields = parser.get();
  const size_t hosts = fields.count(bhttp::field::host);
  if (hosts > 1 || (hosts == 0 && fields.version() >= 11)) {
    return Refusal(400, StrCat("a request must name one Host; this one names ", hosts),
                   "INVALID_ARGUMENT");
  }
  return std::nullopt;
}

size_t FieldCount(const Parser& parser) {
  return static_cast<size_t>(std::distance(parser.get().begin(), parser.get().end()));
}

// Reads one request into `parser` from what `buffer` holds and what `fill(buffer, room, ec)`
// appends (at most `room` bytes; ec set at the end of the input or on a socket error). The one
// reading path of the port and of ParseRequest (so the fuzz target runs it):
// - `buffer` never holds more than max_header_bytes unread: Beast parses the header, each chunk
//   line and the trailer section (RFC 9112 §7.1.2) only once all of it has arrived, so this bound
//   is what keeps a chunk line or a trailer from growing without limit (a trailer field of 64 KiB
//   once made Beast throw std::length_error and end cartd);
// - the trailer fields count against max_header_bytes together with the header (431);
// - no exception leaves it: one (an allocation, a field Beast cannot store) refuses the request
//   with 400, as the rest of the connection's work cannot be trusted to be in step.
template <class Fill>
ReadOutcome ReadRequest(Fill&& fill, beast::flat_buffer& buffer, Parser& parser,
                        const HttpServerOptions& options) {
  const size_t window = static_cast<size_t>(std::max<int64_t>(options.max_header_bytes, 64));
  try {
    std::optional<size_t> header_fields;  // set once the header is parsed
    int64_t consumed = 0;                 // bytes of this request the parser has taken
    int64_t header_bytes = 0;             // the request line and header
    while (!parser.is_done()) {
      beast::error_code ec;
      if (buffer.size() > 0) {
        const size_t used = parser.put(buffer.data(), ec);
        if (ec && ec != bhttp::error::need_more) {
          const std::string_view seen(static_cast<const char*>(buffer.data().data()),
                                      buffer.size());
          return Refused(ParseRefusal(ec, consumed, seen, options));
        }
        buffer.consume(used);
        consumed += static_cast<int64_t>(used);
        if (!header_fields && parser.is_header_done()) {
          header_fields = FieldCount(parser);
          header_bytes = consumed;
          if (std::optional<Response> refusal = HeaderRefusal(parser)) {
            return Refused(*std::move(refusal));
          }
        }
        if (parser.is_done()) break;
        if (used > 0 && !ec) continue;  // progress: offer the rest before reading more
      }
      if (buffer.size() >= window) {
        // Only a chunk line or the trailer section can fill the window: the header would have
        // met Beast's header limit first, and body bytes are consumed as they come.
        return Refused(Refusal(431,
                               StrCat("a chunk line or the trailer fields longer than ",
                                      options.max_header_bytes, " bytes"),
                               "HEADERS_TOO_LARGE"));
      }
      ec = {};
      fill(buffer, window - buffer.size(), ec);
      if (ec) {
        if (!parser.got_some() && buffer.size() == 0) return {};  // nothing begun: gone
        if (ec != asio::error::eof && ec != asio::ssl::error::stream_truncated) return {};
        beast::error_code eof_ec;
        if (buffer.size() == 0) parser.put_eof(eof_ec);  // a request without a length ends here
        if (parser.is_done()) break;
        return Refused(
            Refusal(400, "the request ended before it was complete", "INVALID_ARGUMENT"));
      }
    }
    // The trailer's fields (those after the header's) count against the header limit.
    int64_t trailer_bytes = 0;
    size_t index = 0;
    for (const auto& field : parser.get()) {
      if (index++ < header_fields.value_or(0)) continue;
      trailer_bytes += static_cast<int64_t>(field.name_string().size() + field.value().size() + 4);
    }
    if (header_bytes + trailer_bytes > options.max_header_bytes) {
      return Refused(Refusal(431,
                             StrCat("request line, headers and trailer fields longer than ",
                                    options.max_header_bytes, " bytes"),
                             "HEADERS_TOO_LARGE"));
    }
    return ReadOutcome{ReadOutcome::kRequest, {}};
  } catch (const std::exception& e) {
    return Refused(
        Refusal(400, StrCat("the request cannot be read: ", e.what()), "INVALID_ARGUMENT"));
  }
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

Parsed ParseRequest(std::string_view bytes, const HttpServerOptions& options, size_t read_size) {
  Parsed out;
  Parser parser;
  Limit(parser, options);
  beast::flat_buffer buffer;
  size_t used = 0;
  // Fed as a socket would deliver it: at most read_size bytes per read, then the end.
  auto fill = [&](beast::flat_buffer& into, size_t room, beast::error_code& ec) {
    const size_t n = std::min({room, std::max<size_t>(read_size, 1), bytes.size() - used});
    if (n == 0) {
      ec = asio::error::eof;
      return;
    }
    asio::buffer_copy(into.prepare(n), asio::buffer(bytes.data() + used, n));
    into.commit(n);
    used += n;
  };
  ReadOutcome read = ReadRequest(fill, buffer, parser, options);
  if (read.kind == ReadOutcome::kRequest) {
    out.request = ToRequest(parser.get());
  } else if (read.kind == ReadOutcome::kRefused) {
    out.refusal = std::move(read.refusal);
  } else {
    out.refusal = Refusal(400, "no request was sent", "INVALID_ARGUMENT");
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
    // The watchdog shut it down: its reads end at once and its client has seen the close. Set
    // under mu; read by the connection's own thread too, to skip lingering on a dead socket.
    std::atomic<bool> cut{false};
    // Whether a byte of the current request's answer may have gone out (the connection's thread
    // only): an error before that is answered 500, after it the connection just closes.
    bool answer_started = false;
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
  // A connection the watchdog cut has nothing left to drain, and the watchdog would not cut a
  // second time a read that waited.
  if (self.cut.load()) return;
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
  auto fill = [&](beast::flat_buffer& into, size_t room, beast::error_code& ec) {
    const size_t n = stream.read_some(into.prepare(std::min<size_t>(room, 65536)), ec);
    into.commit(n);
  };
  while (!stopping.load()) {
    Parser parser;
    Limit(parser, options);
    Arm(self.deadline_us, options.idle_timeout);  // the whole request, not each byte
    ReadOutcome read = ReadRequest(fill, buffer, parser, options);
    Arm(self.deadline_us, options.send_timeout);
    if (read.kind == ReadOutcome::kGone) return;  // closed, timed out, or silent
    if (read.kind == ReadOutcome::kRefused) {
      self.answer_started = true;
      WriteSimple(stream, static_cast<bhttp::status>(read.refusal.status), read.refusal.body);
      LingeringClose(stream, self);
      return;
    }
    beast::error_code ec;
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
      self.answer_started = true;
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
    self.answer_started = true;
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
    self.answer_started = false;
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
  // The one handler of whatever a connection's work throws: it ends this connection (with a 500
  // when no answer had begun) and never the process.
  auto guarded = [&](auto& stream) {
    try {
      Serve(stream, *self);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cartd: http connection from %s ended by an error: %s\n",
                   self->client.c_str(), e.what());
      if (!self->answer_started) {
        Arm(self->deadline_us, options.send_timeout);
        WriteSimple(stream, bhttp::status::internal_server_error,
                    R"({"error":"internal error","code":"INTERNAL"})");
      }
    } catch (...) {
      std::fprintf(stderr, "cartd: http connection from %s ended by an unknown error\n",
                   self->client.c_str());
    }
  };
  if (ssl) {
    asio::ssl::stream<tcp::socket> stream(std::move(socket), *ssl);
    beast::error_code ec;
    stream.handshake(asio::ssl::stream_base::server, ec);
    if (!ec) guarded(stream);
    finish(stream.next_layer());
  } else {
    guarded(socket);
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
      if (!c.done.load() && !c.cut.load() && c.client == client) ++from_client;
    }
    // The same for the port's limit: connections the watchdog cut are ending, and a flood of
    // them (all cut at once on a busy box, their threads at a lower priority) must not keep
    // refusing new clients while their threads wind down.
    int live = 0;
    for (const Connection& c : connections) {
      if (!c.done.load() && !c.cut.load()) ++live;
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
    if (live >= options.max_connections) {
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
    try {
      connection->thread = std::thread(
          [this, connection, s = std::move(socket)]() mutable { Run(std::move(s), connection); });
    } catch (const std::system_error& e) {
      // No thread to be had (the process's limit): this connection is dropped, not the port.
      // The socket moved into the lambda and closed with it.
      std::fprintf(stderr, "cartd: http connection refused, no thread: %s\n", e.what());
      connections.pop_back();
    }
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
      if (!c.done.load() && !c.cut.load() && deadline != 0 && now > deadline) {
        ::shutdown(c.fd, SHUT_RDWR);  // ends the blocked read or write; the thread then exits
        c.cut.store(true);
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
