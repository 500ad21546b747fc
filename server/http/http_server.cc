#include "server/http/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdio>
#include <list>
#include <nlohmann/json.hpp>
#include <sstream>
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

// Reads one request into its parser, step by step, from the bytes a connection delivers: the one
// reading path of the port and of ParseRequest (so the fuzz target runs it).
// - the buffer never holds more than max_header_bytes unread (Room): Beast parses the header,
//   each chunk line and the trailer section (RFC 9112 §7.1.2) only once all of it has arrived, so
//   this bound is what keeps a chunk line or a trailer from growing without limit (a trailer
//   field of 64 KiB once made Beast throw std::length_error and end cartd);
// - the trailer fields count against max_header_bytes together with the header (431);
// - no exception leaves it: one (an allocation, a field Beast cannot store) refuses the request
//   with 400, as the rest of the connection's work cannot be trusted to be in step.
class RequestReader {
 public:
  enum Step {
    kNeedMore,  // read at most Room() more bytes into the buffer, then Offer (or End)
    kRequest,   // a whole request is in parser()
    kRefused,   // refusal() is the answer; the connection closes after it
    kGone,      // nothing to answer: the client closed or failed before a byte of this request
  };

  explicit RequestReader(const HttpServerOptions& options)
      : options_(options),
        window_(static_cast<size_t>(std::max<int64_t>(options.max_header_bytes, 64))) {
    Limit(parser_, options);
  }

  // Offers what `buffer` holds to the parser, consuming what it takes.
  Step Offer(beast::flat_buffer& buffer) {
    try {
      while (!parser_.is_done()) {
        if (buffer.size() == 0) return kNeedMore;
        beast::error_code ec;
        const size_t used = parser_.put(buffer.data(), ec);
        if (ec && ec != bhttp::error::need_more) {
          const std::string_view seen(static_cast<const char*>(buffer.data().data()),
                                      buffer.size());
          return Refuse(ParseRefusal(ec, consumed_, seen, options_));
        }
        buffer.consume(used);
        consumed_ += static_cast<int64_t>(used);
        if (!header_fields_ && parser_.is_header_done()) {
          header_fields_ = FieldCount(parser_);
          header_bytes_ = consumed_;
          if (std::optional<Response> refusal = HeaderRefusal(parser_)) {
            return Refuse(*std::move(refusal));
          }
        }
        if (parser_.is_done()) break;
        if (used > 0 && !ec) continue;  // progress: offer the rest before reading more
        if (buffer.size() >= window_) {
          // Only a chunk line or the trailer section can fill the window: the header would have
          // met Beast's header limit first, and body bytes are consumed as they come.
          return Refuse(Refusal(431,
                                StrCat("a chunk line or the trailer fields longer than ",
                                       options_.max_header_bytes, " bytes"),
                                "HEADERS_TOO_LARGE"));
        }
        return kNeedMore;
      }
      return Finish();
    } catch (const std::exception& e) {
      return Refuse(
          Refusal(400, StrCat("the request cannot be read: ", e.what()), "INVALID_ARGUMENT"));
    }
  }

  // The input ended: `ec` is the end of the stream or a socket error; `buffer` what is unread.
  Step End(const beast::error_code& ec, const beast::flat_buffer& buffer) {
    if (!parser_.got_some() && buffer.size() == 0) return kGone;  // nothing begun
    if (ec != asio::error::eof && ec != asio::ssl::error::stream_truncated) return kGone;
    try {
      beast::error_code eof_ec;
      if (buffer.size() == 0) parser_.put_eof(eof_ec);  // a request without a length ends here
      if (parser_.is_done()) return Finish();
    } catch (const std::exception& e) {
      return Refuse(
          Refusal(400, StrCat("the request cannot be read: ", e.what()), "INVALID_ARGUMENT"));
    }
    return Refuse(Refusal(400, "the request ended before it was complete", "INVALID_ARGUMENT"));
  }

  // How many bytes the next read may add to `buffer`.
  size_t Room(const beast::flat_buffer& buffer) const {
    return buffer.size() >= window_ ? 0 : window_ - buffer.size();
  }
  // Whether a byte of this request has arrived.
  bool begun(const beast::flat_buffer& buffer) const {
    return parser_.got_some() || buffer.size() > 0;
  }
  Parser& parser() { return parser_; }
  Response& refusal() { return refusal_; }

 private:
  Step Refuse(Response refusal) {
    refusal_ = std::move(refusal);
    return kRefused;
  }

  // A whole request is parsed: its trailer's fields (those after the header's) count against
  // the header limit.
  Step Finish() {
    int64_t trailer_bytes = 0;
    size_t index = 0;
    for (const auto& field : parser_.get()) {
      if (index++ < header_fields_.value_or(0)) continue;
      trailer_bytes += static_cast<int64_t>(field.name_string().size() + field.value().size() + 4);
    }
    if (header_bytes_ + trailer_bytes > options_.max_header_bytes) {
      return Refuse(Refusal(431,
                            StrCat("request line, headers and trailer fields longer than ",
                                   options_.max_header_bytes, " bytes"),
                            "HEADERS_TOO_LARGE"));
    }
    return kRequest;
  }

  const HttpServerOptions& options_;
  const size_t window_;
  Parser parser_;
  Response refusal_;
  std::optional<size_t> header_fields_;  // set once the header is parsed
  int64_t consumed_ = 0;                 // bytes of this request the parser has taken
  int64_t header_bytes_ = 0;             // the request line and header
};

// The bytes of `message` as they go on the wire. Throws what Beast throws for a message it
// cannot write (the caller answers 500 instead).
template <class Message>
std::string Wire(const Message& message) {
  std::ostringstream out;
  out << message;
  return std::move(out).str();
}

// A short answer that closes the connection: a refusal, or the 500 of a failure.
std::string SimpleWire(int status, const std::string& text) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.set(bhttp::field::connection, "close");
  SecurityHeaders(res.base());
  res.body() = text;
  res.prepare_payload();
  return Wire(res);
}

constexpr char kInternalError[] = R"({"error":"internal error","code":"INTERNAL"})";

// Lowers the calling thread's priority (Linux applies a nice value per thread).
void Nice(int nice) {
  if (nice > 0) setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice);
}

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::microseconds(
      absl::ToInt64Microseconds(std::clamp(d, absl::ZeroDuration(), absl::Hours(24 * 365))));
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
  RequestReader reader(options);
  beast::flat_buffer buffer;
  size_t used = 0;
  RequestReader::Step step = reader.Offer(buffer);
  while (step == RequestReader::kNeedMore) {
    // Fed as a socket would deliver it: at most read_size bytes per read, then the end.
    const size_t n =
        std::min({reader.Room(buffer), std::max<size_t>(read_size, 1), bytes.size() - used});
    if (n == 0) {
      step = reader.End(asio::error::eof, buffer);
      break;
    }
    asio::buffer_copy(buffer.prepare(n), asio::buffer(bytes.data() + used, n));
    buffer.commit(n);
    used += n;
    step = reader.Offer(buffer);
  }
  if (step == RequestReader::kRequest) {
    out.request = ToRequest(reader.parser().get());
  } else if (step == RequestReader::kRefused) {
    out.refusal = std::move(reader.refusal());
  } else {
    out.refusal = Refusal(400, "no request was sent", "INVALID_ARGUMENT");
  }
  return out;
}

namespace {

// A connection as the port's bookkeeping sees it. The I/O thread's only.
class Connection {
 public:
  explicit Connection(std::string client) : client_(std::move(client)) {}
  virtual ~Connection() = default;
  // Closes the socket: what is pending on it ends, and the connection is gone once the last of
  // its work (a handler running for it) lets go of it.
  virtual void Close() = 0;

  const std::string& client() const { return client_; }
  bool closed() const { return closed_; }
  // Since when (steady clock, µs) it waits for a request to arrive; 0 while one is answered.
  int64_t waiting_since_us() const { return waiting_since_us_; }

 protected:
  const std::string client_;  // the peer's address, for the per-client bound
  bool closed_ = false;
  int64_t waiting_since_us_ = 0;
};

// What the port's connections share: the options, the handler, the two executors and the
// bookkeeping of who is connected.
struct Port {
  HttpServerOptions options;
  Handler handler;
  asio::io_context io{1};  // the I/O thread's: sockets, deadlines, accepting
  asio::io_context work;   // the handler threads': handlers and stream polls
  asio::executor_work_guard<asio::io_context::executor_type> io_guard = asio::make_work_guard(io);
  asio::executor_work_guard<asio::io_context::executor_type> work_guard =
      asio::make_work_guard(work);
  tcp::acceptor acceptor{io};
  asio::steady_timer backoff{io};
  std::unique_ptr<asio::ssl::context> ssl;
  int port = 0;
  int max_connections = 0;  // options.max_connections within the open-file limit
  std::atomic<bool> stopping{false};
  std::thread io_thread;
  std::vector<std::thread> handler_threads;
  std::list<std::weak_ptr<Connection>> connections;  // the I/O thread's only

  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;

  void Accept();
  void Admit(tcp::socket socket);
  void TurnAway(tcp::socket& socket, int status, const std::string& text);
  // The handler, with what it throws turned into a 500.
  Response Call(const Request& request);
};

// Runs `context` until it has no more work; an exception from a completion handler ends only
// the work it belonged to.
void RunLoop(asio::io_context& context, int nice) {
  Nice(nice);
  while (true) {
    try {
      context.run();
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cartd: http: a connection ended by an error: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "cartd: http: a connection ended by an unknown error\n");
    }
  }
}

template <class Stream>
constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

template <class Stream>
Stream MakeStream(tcp::socket&& socket, asio::ssl::context* ssl) {
  if constexpr (kTls<Stream>) {
    return Stream(std::move(socket), *ssl);
  } else {
    return std::move(socket);
  }
}

// One connection: reads requests, has the handler pool answer them, writes the answers, and
// polls a live response's source, all asynchronously. Every step that waits on the client runs
// under a deadline (idle_timeout for a whole request, send_timeout for each write) that closes
// the socket when it passes.
template <class Stream>
class Session : public Connection, public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Port& port, tcp::socket socket, std::string client)
      : Connection(std::move(client)),
        port_(port),
        stream_(MakeStream<Stream>(std::move(socket), port.ssl.get())),
        deadline_(port.io),
        wake_(port.io) {}

  void Start() {
    waiting_since_us_ = SteadyMicros();
    if constexpr (kTls<Stream>) {
      Arm(port_.options.idle_timeout);  // the handshake gets the idle deadline
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](const beast::error_code& ec) {
                                if (self->closed_) return;
                                if (ec) return self->Close();
                                self->ReadRequest();
                              });
    } else {
      ReadRequest();
    }
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    waiting_since_us_ = 0;
    ++armed_;
    deadline_.cancel();
    wake_.cancel();
    beast::error_code ec;
    socket().shutdown(tcp::socket::shutdown_both, ec);
    socket().close(ec);
  }

 private:
  enum class Then { kReadNext, kClose, kLinger, kPoll, kWait };

  tcp::socket& socket() {
    if constexpr (kTls<Stream>) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  // Closes the connection `d` from now unless Arm or Disarm is called before.
  void Arm(absl::Duration d) {
    const uint64_t armed = ++armed_;
    deadline_.expires_after(ToChrono(d));
    deadline_.async_wait([self = this->shared_from_this(), armed](const beast::error_code& ec) {
      if (!ec && armed == self->armed_) self->Close();
    });
  }
  void Disarm() {
    ++armed_;
    deadline_.cancel();
  }

  // Begins reading the next request (bytes of it may be in the buffer already: pipelining).
  void ReadRequest() {
    waiting_since_us_ = SteadyMicros();
    reader_.emplace(port_.options);
    reads_ = 0;
    Arm(port_.options.idle_timeout);  // the whole request, not each byte
    Continue(reader_->Offer(buffer_));
  }

  void Continue(RequestReader::Step step) {
    if (closed_) return;
    switch (step) {
      case RequestReader::kNeedMore:
        return ReadMore();
      case RequestReader::kRequest:
        return OnRequest();
      case RequestReader::kRefused: {
        waiting_since_us_ = 0;
        const Response& refusal = reader_->refusal();
        return Write(SimpleWire(refusal.status, refusal.body), Then::kLinger);
      }
      case RequestReader::kGone:
        return Close();
    }
  }

  void ReadMore() {
    if constexpr (!kTls<Stream>) {
      if (buffer_.size() == 0 && !reader_->begun(buffer_)) {
        // Waits for the request's first bytes before the connection gets a buffer: an idle
        // connection holds none.
        buffer_.shrink_to_fit();
        socket().async_wait(tcp::socket::wait_read,
                            [self = this->shared_from_this()](const beast::error_code& ec) {
                              if (self->closed_) return;
                              if (ec) return self->Continue(self->reader_->End(ec, self->buffer_));
                              self->ReadSome();
                            });
        return;
      }
    }
    ReadSome();
  }

  void ReadSome() {
    // 1 KiB first (most requests are smaller), doubling up to 16 KiB for a long one: a crowd of
    // half-sent requests holds small buffers.
    const size_t room = std::min<size_t>(reader_->Room(buffer_), size_t{1024} << reads_);
    reads_ = std::min(reads_ + 1, 4);
    stream_.async_read_some(buffer_.prepare(room), [self = this->shared_from_this()](
                                                       const beast::error_code& ec, size_t n) {
      if (self->closed_) return;
      self->buffer_.commit(n);
      if (ec) return self->Continue(self->reader_->End(ec, self->buffer_));
      self->Continue(self->reader_->Offer(self->buffer_));
    });
  }

  // A whole request is read: the handler pool answers it, the answer comes back here.
  void OnRequest() {
    waiting_since_us_ = 0;
    Disarm();  // the handler's time is not the client's
    const auto& in = reader_->parser().get();
    keep_alive_ = in.keep_alive();
    version_ = in.version();
    head_ = in.method() == bhttp::verb::head;
    Request request;
    try {
      request = ToRequest(in);
    } catch (const std::exception& e) {  // an allocation: this connection ends, not the port
      std::fprintf(stderr, "cartd: http request from %s cannot be read: %s\n", client_.c_str(),
                   e.what());
      return Write(SimpleWire(500, kInternalError), Then::kClose);
    }
    request.peer = client_;
    reader_.reset();  // the request holds what it needs
    // The session goes back with the answer, so that its last owner is on the I/O thread.
    asio::post(port_.work,
               [self = this->shared_from_this(), request = std::move(request)]() mutable {
                 Response response = self->port_.Call(request);
                 asio::io_context& io = self->port_.io;
                 asio::post(io, [self = std::move(self), response = std::move(response)]() mutable {
                   self->Answer(std::move(response));
                 });
               });
  }

  void Answer(Response response) {
    if (closed_) return;
    std::string bytes;
    Then then = Then::kClose;
    try {
      const auto status = static_cast<bhttp::status>(response.status);
      if (response.stream) {
        bhttp::response<bhttp::empty_body> head{status, 11};
        head.set(bhttp::field::content_type, response.content_type);
        head.set(bhttp::field::cache_control, "no-cache");
        head.set(bhttp::field::connection, "close");
        head.set("X-Accel-Buffering", "no");
        SecurityHeaders(head.base());
        for (const auto& [name, value] : response.headers) head.set(name, value);
        bytes = Wire(head.base());
        source_ = std::move(response.stream);
        then = Then::kPoll;
      } else {
        bhttp::response<bhttp::string_body> out{status, version_};
        out.set(bhttp::field::content_type, response.content_type);
        SecurityHeaders(out.base());
        for (const auto& [name, value] : response.headers) out.set(name, value);
        out.keep_alive(keep_alive_);
        if (out.keep_alive()) {
          // How long this connection may wait for the next request before it is closed.
          // Clients that honour the hint (undici, Firefox, curl) retire the connection first,
          // so a busy client never sends its next request into a connection that is closing.
          out.set(bhttp::field::keep_alive,
                  StrCat("timeout=",
                         std::max<int64_t>(1, absl::ToInt64Seconds(port_.options.idle_timeout))));
        }
        out.body() = std::move(response.body);
        out.prepare_payload();
        // HEAD: the headers a GET would carry, Content-Length included, and no body.
        bytes = head_ ? Wire(out.base()) : Wire(out);
        then = out.keep_alive() ? Then::kReadNext : Then::kClose;
      }
    } catch (const std::exception& e) {
      // An answer Beast cannot write (a header field past its limit): a 500 instead.
      std::fprintf(stderr, "cartd: http answer to %s cannot be written: %s\n", client_.c_str(),
                   e.what());
      bytes = SimpleWire(500, kInternalError);
      source_ = nullptr;
      then = Then::kClose;
    }
    Write(std::move(bytes), then);
  }

  void Write(std::string bytes, Then then) {
    out_ = std::move(bytes);
    Arm(port_.options.send_timeout);
    asio::async_write(stream_, asio::buffer(out_),
                      [self = this->shared_from_this(), then](const beast::error_code& ec, size_t) {
                        if (self->closed_) return;
                        self->Disarm();
                        std::string().swap(self->out_);
                        if (ec) return self->Close();
                        switch (then) {
                          case Then::kReadNext:
                            return self->ReadRequest();
                          case Then::kClose:
                            return self->Close();
                          case Then::kLinger:
                            return self->Linger();
                          case Then::kPoll:
                            return self->Poll();
                          case Then::kWait:
                            return self->Wait();
                        }
                      });
  }

  // After a refusal sent while the client may still be sending (a body past the limit): stop
  // sending, then read and drop what still comes for a moment (at most 2 s and 8 MiB) before
  // the socket closes. Closing with unread bytes makes the kernel reset the connection, and a
  // reset can discard the answer before the client reads it (RFC 9112 §9.6).
  void Linger() {
    if constexpr (kTls<Stream>) {
      Close();
    } else {
      beast::error_code ec;
      socket().shutdown(tcp::socket::shutdown_send, ec);
      Arm(std::min(port_.options.idle_timeout, absl::Seconds(2)));
      buffer_.consume(buffer_.size());
      lingered_ = 0;
      Drain();
    }
  }
  void Drain() {
    socket().async_read_some(buffer_.prepare(16384), [self = this->shared_from_this()](
                                                         const beast::error_code& ec, size_t n) {
      if (self->closed_) return;
      self->lingered_ += n;
      if (ec || self->lingered_ >= (8u << 20)) return self->Close();
      self->Drain();
    });
  }

  // One poll of the live response's source, on the handler pool; its chunk comes back here.
  void Poll() {
    if (port_.stopping.load()) return Close();
    asio::post(port_.work, [self = this->shared_from_this()]() mutable {
      StreamPoll poll;
      try {
        poll = self->source_();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cartd: http stream to %s ended by an error: %s\n",
                     self->client_.c_str(), e.what());
        poll = StreamPoll{};
        poll.last = true;
      }
      asio::io_context& io = self->port_.io;
      asio::post(io, [self = std::move(self), poll = std::move(poll)]() mutable {
        self->OnPoll(std::move(poll));
      });
    });
  }
  void OnPoll(StreamPoll poll) {
    if (closed_) return;
    again_ = poll.again;
    const Then then = poll.last ? Then::kClose : Then::kWait;
    if (!poll.chunk.empty()) return Write(std::move(poll.chunk), then);
    if (poll.last) return Close();
    Wait();
  }
  void Wait() {
    wake_.expires_after(ToChrono(again_));
    wake_.async_wait([self = this->shared_from_this()](const beast::error_code& ec) {
      if (ec || self->closed_) return;
      self->Poll();
    });
  }

  Port& port_;
  Stream stream_;
  asio::steady_timer deadline_;  // Arm's
  asio::steady_timer wake_;      // a live response's wait between polls
  uint64_t armed_ = 0;           // which Arm the deadline belongs to
  beast::flat_buffer buffer_;
  std::optional<RequestReader> reader_;  // while a request is read
  int reads_ = 0;                        // reads of the request so far (they grow)
  std::string out_;                      // what is being written
  bool keep_alive_ = false;
  unsigned version_ = 11;
  bool head_ = false;
  StreamSource source_;
  absl::Duration again_;
  size_t lingered_ = 0;
};

void Port::Accept() {
  acceptor.async_accept([this](const beast::error_code& ec, tcp::socket socket) {
    if (stopping.load() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // E.g. EMFILE: back off a moment rather than spin.
      backoff.expires_after(std::chrono::milliseconds(10));
      backoff.async_wait([this](const beast::error_code& wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    Admit(std::move(socket));
    Accept();
  });
}

void Port::TurnAway(tcp::socket& socket, int status, const std::string& text) {
  if (!ssl) {
    // One try, without waiting: a new connection's send buffer is empty, and the answer small.
    const std::string bytes = SimpleWire(status, text);
    [[maybe_unused]] const ssize_t sent =
        ::send(socket.native_handle(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  beast::error_code ec;
  socket.close(ec);
}

void Port::Admit(tcp::socket socket) {
  std::string client;
  {
    beast::error_code ec;
    const tcp::endpoint peer = socket.remote_endpoint(ec);
    if (!ec) client = peer.address().to_string();
  }
  int live = 0;
  int from_client = 0;
  std::shared_ptr<Connection> longest_waiting;
  for (auto it = connections.begin(); it != connections.end();) {
    std::shared_ptr<Connection> c = it->lock();
    if (c == nullptr || c->closed()) {
      it = connections.erase(it);
      continue;
    }
    ++live;
    if (c->client() == client) ++from_client;
    if (c->waiting_since_us() != 0 &&
        (longest_waiting == nullptr ||
         c->waiting_since_us() < longest_waiting->waiting_since_us())) {
      longest_waiting = c;
    }
    ++it;
  }
  if (from_client >= options.max_connections_per_client) {
    return TurnAway(socket, 429,
                    StrCat("{\"error\":\"too many connections from ", client, " (limit ",
                           options.max_connections_per_client,
                           " per client address)\",\"code\":\"RESOURCE_EXHAUSTED\"}"));
  }
  if (live >= max_connections) {
    if (longest_waiting == nullptr) {
      return TurnAway(socket, 503,
                      StrCat("{\"error\":\"too many connections being answered (limit ",
                             max_connections, ")\",\"code\":\"UNAVAILABLE\"}"));
    }
    // The newcomer takes the place of the connection that has waited longest for a request:
    // idle between requests, or sending one too slowly (a crowd of half-sent requests, however
    // many addresses it comes from, cannot keep a client out).
    longest_waiting->Close();
  }
  if (ssl) {
    auto session =
        std::make_shared<Session<asio::ssl::stream<tcp::socket>>>(*this, std::move(socket), client);
    connections.push_back(session);
    session->Start();
  } else {
    auto session = std::make_shared<Session<tcp::socket>>(*this, std::move(socket), client);
    connections.push_back(session);
    session->Start();
  }
}

Response Port::Call(const Request& request) {
  try {
    return handler(request);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cartd: http handler threw: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "cartd: http handler threw an unknown error\n");
  }
  Response r;
  r.status = 500;
  r.body = kInternalError;
  return r;
}

}  // namespace

struct HttpServer::Impl : Port {};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  std::optional<HostPort> split = SplitHostPort(options.listen);
  if (!split) {
    return absl::InvalidArgumentError(
        StrCat("HTTP address '", options.listen, "' is not host:port"));
  }
  std::string host = split->host;
  if (host == "localhost") host = "127.0.0.1";
  const std::optional<int64_t> port = split->port;
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
  // Each connection is a descriptor: the port holds at most what the open-file limit leaves
  // once the rest of the process (the store, gRPC, the artifact files) has 256.
  impl->max_connections = std::max(1, options.max_connections);
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const int64_t room = static_cast<int64_t>(files.rlim_cur) - 256;
    impl->max_connections = static_cast<int>(std::clamp<int64_t>(room, 16, impl->max_connections));
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
  Port* raw = impl.get();
  raw->Accept();
  raw->io_thread = std::thread([raw] { RunLoop(raw->io, raw->options.thread_nice); });
  for (int i = 0; i < std::max(1, options.handler_threads); ++i) {
    raw->handler_threads.emplace_back([raw] { RunLoop(raw->work, raw->options.thread_nice); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port; }
bool HttpServer::tls() const { return impl_->ssl != nullptr; }
bool HttpServer::stopping() const { return impl_->stopping.load(); }

void HttpServer::Shutdown() {
  Port& p = *impl_;
  {
    absl::MutexLock lock(&p.mu);
    if (p.shut_down) return;
    p.shut_down = true;
  }
  p.stopping.store(true);
  // On the I/O thread, which owns them: stop accepting and close every connection. What was
  // pending on them ends with an error, and what a handler still sends back finds them closed.
  asio::post(p.io, [&p] {
    beast::error_code ec;
    p.acceptor.close(ec);
    p.backoff.cancel();
    for (std::weak_ptr<Connection>& weak : p.connections) {
      if (std::shared_ptr<Connection> c = weak.lock()) c->Close();
    }
    p.connections.clear();
  });
  // The handlers running finish; then, with nothing left to wait for, the I/O thread ends.
  p.work_guard.reset();
  for (std::thread& t : p.handler_threads) t.join();
  p.io_guard.reset();
  if (p.io_thread.joinable()) p.io_thread.join();
}

}  // namespace cart::server::http
