#pragma once

// A small HTTP/1.1 server for cartd's dashboard, JSON API and /metrics (docs/dashboard.md):
// Boost.Beast over Boost.Asio's asynchronous model. Requests are plain structs here, so that the
// handlers (server/http/dashboard.h) never include Beast.
//
// Threads: one I/O thread reads and writes every connection (asynchronously, each read and write
// under a deadline of its connection's), and a fixed pool of handler_threads runs the handlers,
// which may block on the store. So a connection costs memory, not a thread: an idle or half-sent
// one holds a few hundred bytes and its socket (measured in bench/http_idle_bench.cc), and a
// thousand of them do not stop a newcomer from being served. A live response (server-sent events)
// is polled, not run: the handler pool asks its source for the next chunk, and the I/O thread
// sends it and waits before asking again, so streams hold no thread either. When the port holds
// max_connections, a newcomer takes the place of the connection that has waited longest for its
// request (idle between requests, or half-sent); only when every connection is being answered is
// it refused (503). The gRPC side has its own threads, so a crowd of dashboard clients never
// delays AcquireJob or metric ingest (bench/dashboard_bench.cc).
//
// Thread-safety: Start, port and Shutdown are thread-safe; the handler and stream sources are
// called concurrently from the handler threads (one call at a time for one stream).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cart::server::http {

struct Request {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // percent-decoded, without the query
  std::map<std::string, std::string> query;    // percent-decoded; a repeated key keeps the last
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string peer;  // the client's IP address ("127.0.0.1"); empty when unknown

  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
  std::string Query(const std::string& key, std::string fallback = "") const {
    auto it = query.find(key);
    return it == query.end() ? fallback : it->second;
  }
};

// One poll of a live response's source.
struct StreamPoll {
  std::string chunk;  // what to send now; empty: nothing new yet
  bool last = false;  // the response ends after `chunk` (the connection closes)
  absl::Duration again = absl::Milliseconds(250);  // when to ask the source again
};
// A live response's source: called on a handler thread, first as soon as the status and headers
// are out, then `again` after each poll (after its chunk has been written). It must not block for
// long: it is polled, and a thread it holds is one of handler_threads.
using StreamSource = std::function<StreamPoll()>;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // A live response (server-sent events): the status and headers go out, then what `stream`
  // gives, poll by poll, until it says last, the client goes or the server stops.
  StreamSource stream;
};

using Handler = std::function<Response(const Request& request)>;

struct HttpServerOptions {
  std::string listen = "127.0.0.1:8080";  // host:port; port 0 picks a free one
  std::string tls_cert_file;              // PEM chain and key: HTTPS when both are given
  std::string tls_key_file;
  // Connections held at once. A newcomer past it takes the place of the connection that has
  // waited longest for a request; with none waiting it is answered 503 and closed. Bounded by
  // the process's open-file limit (less 256 for the rest of cartd).
  int max_connections = 4096;
  // Connections one client address may hold at once; more are answered 429 and closed, so that
  // one client (a stream flood, a crowd of half-sent requests) cannot take a large share alone.
  int max_connections_per_client = 256;
  // A request (its line, headers and body) must arrive within this after the connection is idle
  // (keep-alive) or opened, or the connection is closed: a silent or trickling client cannot hold
  // a connection for ever.
  absl::Duration idle_timeout = absl::Seconds(60);
  // Each write of an answer (and each chunk of a stream) must complete within this.
  absl::Duration send_timeout = absl::Seconds(30);
  int64_t max_body_bytes = 1 << 20;  // larger requests get 413
  // The request line and headers together, and with them a chunked body's trailer fields; more
  // gets 414 (the line alone is too long) or 431. It also bounds each chunk line.
  int64_t max_header_bytes = 16 << 10;
  // Threads that run handlers and poll live responses: how many requests are answered at once
  // (the rest wait their turn).
  int handler_threads = 8;
  // Nice value of the I/O and handler threads (Linux: per thread), so that on a saturated box
  // the dashboard waits and the workers' gRPC calls do not. 0: same priority as the rest.
  int thread_nice = 10;
};

class HttpServer {
 public:
  // Binds and starts accepting. Unavailable when the address cannot be bound (the message names
  // it); InvalidArgument for a malformed address or unreadable TLS files.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           Handler handler);
  ~HttpServer();  // Shutdown()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  bool tls() const;
  // Stops accepting, closes every connection (live responses with it), lets the handlers running
  // finish and joins the threads. Idempotent.
  void Shutdown();
  // True once Shutdown() began: long-running handlers return.
  bool stopping() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "%XX" and '+' decoding of one URL component; nullopt-free: malformed escapes stay as they are.
std::string PercentDecode(std::string_view text, bool plus_is_space);

// One request parsed from `bytes` (everything the client sent) by the connection's own reading
// path and limits, delivered at most `read_size` bytes per read as a socket would: the Request,
// or the answer the connection gives instead and closes with (400 for what is not a well-formed
// HTTP/1.1 request or names no single Host, 414/431 past max_header_bytes, which the trailer
// fields count against too, 413 past max_body_bytes). The fuzz target
// tests/fuzz/http_request_fuzz.cc feeds it bytes and routes what it returns.
struct Parsed {
  std::optional<Request> request;  // set when a whole request was read
  Response refusal;                // otherwise
};
Parsed ParseRequest(std::string_view bytes, const HttpServerOptions& options,
                    size_t read_size = 65536);

}  // namespace cart::server::http
