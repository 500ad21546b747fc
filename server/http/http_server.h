#pragma once

// A small HTTP/1.1 server for cartd's dashboard, JSON API and /metrics (docs/dashboard.md):
// Boost.Beast over Boost.Asio, blocking I/O with one thread per connection. Requests are plain
// structs here, so that the handlers (server/http/dashboard.h) never include Beast.
//
// Why threads, not Asio's async model: the long-lived responses (server-sent events following a
// run) block on the scheduler's change counter, which is a blocking wait; a thread per connection
// keeps them simple, and max_connections bounds how many there can be (max_connections_per_client
// how many one address may hold). Blocking calls have no timeout of their own that Asio honours,
// so a watchdog thread shuts down any socket whose read or write outlives its deadline
// (idle_timeout for a whole request, send_timeout for each write). The gRPC side has its own
// threads, so a crowd of dashboard clients never delays AcquireJob or metric ingest (measured in
// bench/dashboard_bench.cc).
//
// Thread-safety: Start, port and Shutdown are thread-safe; the handler is called concurrently from
// connection threads.

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

// Sends one chunk of a streamed body; false once the client has gone or the server is stopping.
using StreamWriter = std::function<bool(std::string_view chunk)>;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // A streamed response (server-sent events): the status and headers go out, then `stream` runs
  // on the connection's thread until it returns; the connection closes after it.
  std::function<void(const StreamWriter& write)> stream;
};

using Handler = std::function<Response(const Request& request)>;

struct HttpServerOptions {
  std::string listen = "127.0.0.1:8080";  // host:port; port 0 picks a free one
  std::string tls_cert_file;              // PEM chain and key: HTTPS when both are given
  std::string tls_key_file;
  int max_connections = 256;  // more are answered 503 and closed
  // Connections one client address may hold at once; more are answered 429 and closed, so that
  // one client (a stream flood, a crowd of half-sent requests) cannot take the capacity of all.
  int max_connections_per_client = 64;
  // A request (its line, headers and body) must arrive within this after the connection is idle
  // (keep-alive) or opened, or the connection is closed: a silent or trickling client cannot hold
  // a connection thread. Enforced by a watchdog that shuts the socket down.
  absl::Duration idle_timeout = absl::Seconds(60);
  // Each write of an answer (and each chunk of a stream) must complete within this.
  absl::Duration send_timeout = absl::Seconds(30);
  int64_t max_body_bytes = 1 << 20;  // larger requests get 413
  // The request line and headers together, and with them a chunked body's trailer fields; more
  // gets 414 (the line alone is too long) or 431. It also bounds each chunk line.
  int64_t max_header_bytes = 16 << 10;
  // Nice value of the connection threads (Linux: per thread), so that on a saturated box the
  // dashboard waits and the workers' gRPC calls do not. 0: same priority as the rest.
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
  // Stops accepting, closes every connection (streams end at their next write) and joins the
  // threads. Idempotent.
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
