#include "server/notify/senders.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "common/strings.h"

namespace cart::server::notify {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kBodyStartBytes = 200;
// An answer's body is read up to this, so that a webhook cannot make cartd hold a large one.
constexpr uint64_t kMaxAnswerBodyBytes = 64 << 10;
// SMTP reply lines are at most 512 bytes (RFC 5321 §4.5.3.1.5); servers exceed it in practice,
// a little. A reply of more lines than this is not one a server would send.
constexpr size_t kMaxReplyLineBytes = 4096;
constexpr int kMaxReplyLines = 100;
// RFC 5321 §4.5.3.1.6: 1000 bytes with CRLF, so 998, less one for a dot that stuffing adds.
constexpr size_t kMaxSmtpLineBytes = 997;

bool HasCrOrLf(std::string_view text) { return text.find_first_of("\r\n") != std::string::npos; }

// A header field name: printable ASCII without ':' (RFC 5322 §3.6.8), so that no name can end
// a header field early or start another.
bool IsFieldName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (c <= 0x20 || c >= 0x7f || c == ':') return false;
  }
  return true;
}

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::string Base64(std::string_view bytes) {
  return absl::Base64Escape(absl::string_view(bytes.data(), bytes.size()));
}

std::optional<asio::ip::address> IpAddress(const std::string& host) {
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) return std::nullopt;
  return address;
}

// host:port as a URL or a message writes it ("[::1]:25" for an IPv6 address).
std::string HostPort(const std::string& host, int port) {
  const std::optional<asio::ip::address> ip = IpAddress(host);
  return ip && ip->is_v6() ? StrCat("[", host, "]:", port) : StrCat(host, ":", port);
}

// The parts of "scheme://authority/rest", before any check of what they hold.
struct UrlParts {
  std::string_view scheme;
  bool has_userinfo = false;  // user[:password]@ before the host
  std::string_view host_port;
  std::string_view rest;  // from the first '/', '?' or '#' on
};

std::optional<UrlParts> SplitUrl(std::string_view url) {
  const size_t colon = url.find("://");
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  UrlParts parts;
  parts.scheme = url.substr(0, colon);
  if (!std::isalpha(static_cast<unsigned char>(parts.scheme[0]))) return std::nullopt;
  for (char c : parts.scheme) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return std::nullopt;
    }
  }
  std::string_view after = url.substr(colon + 3);
  const size_t end = after.find_first_of("/?#");
  std::string_view authority = after.substr(0, end);
  parts.rest = end == std::string_view::npos ? std::string_view() : after.substr(end);
  const size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    parts.has_userinfo = true;
    authority = authority.substr(at + 1);
  }
  for (char c : authority) {
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("-._~:[]%").find(c) == std::string_view::npos) {
      return std::nullopt;
    }
  }
  parts.host_port = authority;
  return parts;
}

absl::Status UrlError(std::string_view url, std::string_view problem) {
  return absl::InvalidArgumentError(StrCat("webhook URL '", RedactUrl(url), "' ", problem));
}

// Why an I/O operation failed, in words a log reader can act on.
std::string Reason(const beast::error_code& ec, absl::Duration timeout) {
  if (ec == beast::error::timeout || ec == asio::error::operation_aborted) {
    return StrCat("timed out (the limit is ", absl::FormatDuration(timeout), ")");
  }
  if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated ||
      ec == bhttp::error::end_of_stream) {
    return "the server closed the connection";
  }
  return ec.message();
}

// One TCP connection, with TLS over it once StartTls has run; every operation on it, from the
// name lookup on, ends by one deadline. Operations are asynchronous on a private io_context that
// the calling thread runs until each has completed: Beast's tcp_stream closes the socket when
// the deadline passes, which ends whatever was pending.
class Connection {
 public:
  Connection(std::string host, int port, absl::Duration timeout)
      : host_(std::move(host)),
        port_(port),
        timeout_(timeout),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      absl::ToChronoNanoseconds(timeout))),
        tcp_(io_) {}

  // Resolves the host and connects to the first of its addresses that answers.
  absl::Status Connect() {
    tcp::resolver resolver(io_);
    asio::steady_timer timer(io_, deadline_);
    tcp::resolver::results_type endpoints;
    bool resolved = false;
    beast::error_code ec = asio::error::operation_aborted;
    resolver.async_resolve(host_, std::to_string(port_),
                           [&](beast::error_code e, tcp::resolver::results_type results) {
                             resolved = true;
                             ec = e;
                             endpoints = std::move(results);
                             timer.cancel();
                           });
    // A cancel ends a lookup that has not begun; one under way in the resolver's thread ends
    // only when the system resolver answers or gives up (see the header).
    timer.async_wait([&](beast::error_code e) {
      if (!e && !resolved) resolver.cancel();
    });
    RunIo();
    if (ec) {
      return absl::UnavailableError(
          StrCat("cannot resolve host name '", host_, "': ", Reason(ec, timeout_)));
    }
    tcp_.expires_at(deadline_);
    ec = Await([&](auto handler) { tcp_.async_connect(endpoints, handler); });
    if (ec) return absl::UnavailableError(StrCat("cannot connect: ", Reason(ec, timeout_)));
    return absl::OkStatus();
  }

  // Loads the certificates a later StartTls trusts: those of `ca_file` (PEM), or the system's CA
  // store when it is empty. InvalidArgument when they cannot be read.
  absl::Status LoadTrust(const std::string& ca_file) {
    ssl_context_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    ssl_context_->set_options(asio::ssl::context::default_workarounds |
                              asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                              asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    beast::error_code ec;
    if (ca_file.empty()) {
      ssl_context_->set_default_verify_paths(ec);
    } else {
      ssl_context_->load_verify_file(ca_file, ec);
    }
    if (ec) {
      return absl::InvalidArgumentError(StrCat(
          "cannot load the CA certificates ",
          ca_file.empty() ? "of the system" : StrCat("of '", ca_file, "'"), ": ", ec.message()));
    }
    ssl_context_->set_verify_mode(asio::ssl::verify_peer);
    return absl::OkStatus();
  }

  // The TLS handshake as the client (LoadTrust has run): the server's chain checked against the
  // trusted certificates, its certificate against the host name (or IP address); SNI for a name.
  absl::Status StartTls() {
    // What arrived in plain text and is unread is dropped: after STARTTLS, only what came over
    // TLS may be taken as the server's (RFC 3207 §4.2; a man in the middle can add to the rest).
    lines_.clear();
    tls_ = std::make_unique<asio::ssl::stream<beast::tcp_stream&>>(tcp_, *ssl_context_);
    SSL* ssl = tls_->native_handle();
    // OpenSSL's own name check rather than a verify callback: a mismatch then has its own verify
    // result ("hostname mismatch"), which the error below can name.
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const bool named = !IpAddress(host_).has_value();
    const int set = named ? X509_VERIFY_PARAM_set1_host(param, host_.c_str(), host_.size())
                          : X509_VERIFY_PARAM_set1_ip_asc(param, host_.c_str());
    // SNI carries names only (RFC 6066 §3).
    if (set != 1 || (named && SSL_set_tlsext_host_name(ssl, host_.c_str()) != 1)) {
      return absl::InternalError(StrCat("cannot set up TLS for host '", host_, "'"));
    }
    tcp_.expires_at(deadline_);
    const beast::error_code ec = Await(
        [&](auto handler) { tls_->async_handshake(asio::ssl::stream_base::client, handler); });
    if (ec) {
      const long verify = SSL_get_verify_result(ssl);
      std::string reason = Reason(ec, timeout_);
      if (verify != X509_V_OK) {
        reason =
            StrCat("the server's certificate is refused: ", X509_verify_cert_error_string(verify));
      }
      return absl::UnavailableError(StrCat("TLS handshake failed: ", reason));
    }
    return absl::OkStatus();
  }

  // Runs `start(stream, handler)` on the TLS stream when there is one, else on the TCP stream,
  // until the operation it starts completes; its error.
  template <typename Start>
  beast::error_code Run(Start start) {
    tcp_.expires_at(deadline_);
    if (tls_) return Await([&](auto handler) { start(*tls_, handler); });
    return Await([&](auto handler) { start(tcp_, handler); });
  }

  beast::error_code Write(std::string_view bytes) {
    return Run([&](auto& stream, auto handler) {
      asio::async_write(stream, asio::buffer(bytes.data(), bytes.size()), handler);
    });
  }

  // One line ending in "\n", without its line end ("\r\n" or "\n").
  beast::error_code ReadLine(std::string& line) {
    size_t length = 0;
    const beast::error_code ec = Run([&](auto& stream, auto handler) {
      asio::async_read_until(stream, asio::dynamic_buffer(lines_, kMaxReplyLineBytes), '\n',
                             [&length, handler](beast::error_code e, size_t n) mutable {
                               length = n;
                               handler(e, n);
                             });
    });
    if (ec) return ec;
    line = lines_.substr(0, length);
    lines_.erase(0, length);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    return ec;
  }

  absl::Duration timeout() const { return timeout_; }

 private:
  // Starts the operation `start` begins with a completion handler and runs the I/O until it and
  // the deadline timer it armed are done.
  template <typename Start>
  beast::error_code Await(Start start) {
    beast::error_code result = asio::error::operation_aborted;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    RunIo();
    return result;
  }

  void RunIo() {
    io_.restart();
    io_.run();
  }

  // Constant after construction.
  const std::string host_;
  const int port_;
  const absl::Duration timeout_;
  const std::chrono::steady_clock::time_point deadline_;

  // Declared in the order they depend on one another: the TLS stream over the TCP stream over
  // the io_context, destroyed the other way round.
  asio::io_context io_;
  beast::tcp_stream tcp_;
  std::unique_ptr<asio::ssl::context> ssl_context_;
  std::unique_ptr<asio::ssl::stream<beast::tcp_stream&>> tls_;
  std::string lines_;  // read and not yet taken by ReadLine
};

// ---------------------------------------------------------------------------------------------
// SMTP

// A reply: its code and its lines as the server sent them.
struct Reply {
  int code = 0;
  std::string text;  // the lines joined by a space: "250-first 250 last"
  std::vector<std::string> lines;
};

// What EHLO's reply offers: its keywords (upper case), and AUTH's mechanisms.
struct Extensions {
  std::set<std::string> keywords;
  std::set<std::string> auth;
  bool Has(const std::string& keyword) const { return keywords.count(keyword) > 0; }
};

Extensions ParseExtensions(const Reply& ehlo) {
  Extensions out;
  for (size_t i = 1; i < ehlo.lines.size(); ++i) {  // the first line is the greeting
    if (ehlo.lines[i].size() <= 4) continue;
    const std::string_view line = std::string_view(ehlo.lines[i]).substr(4);
    std::vector<std::string> words;
    for (const std::string& word : Split(line, ' ')) {
      if (!word.empty()) words.push_back(ToUpper(word));
    }
    if (words.empty()) continue;
    out.keywords.insert(words[0]);
    if (words[0] == "AUTH") out.auth.insert(words.begin() + 1, words.end());
  }
  return out;
}

// One SMTP session over a connected Connection: commands, replies, and the Status each gives.
class SmtpSession {
 public:
  SmtpSession(std::string where, Connection& connection)
      : where_(std::move(where)), connection_(connection) {}

  // Sends `command` (CRLF added) and reads the reply. `step` names it in messages when the
  // command holds what must not be shown (AUTH's credentials); the command itself otherwise.
  absl::StatusOr<Reply> Exchange(std::string_view command, std::string_view step = {}) {
    if (step.empty()) step = command;
    if (beast::error_code ec = connection_.Write(StrCat(command, "\r\n"))) {
      return absl::UnavailableError(
          StrCat(where_, ": cannot send ", step, ": ", Reason(ec, connection_.timeout())));
    }
    return Read(StrCat("the reply to ", step), step);
  }

  // Sends `command` and requires a reply of class `expected` (2: done, 3: go on).
  absl::StatusOr<Reply> Command(std::string_view command, int expected,
                                std::string_view step = {}) {
    if (step.empty()) step = command;
    CART_ASSIGN_OR_RETURN(Reply reply, Exchange(command, step));
    CART_RETURN_IF_ERROR(Check(reply, step, expected));
    return reply;
  }

  // A reply (a multi-line one whole: "250-..." lines up to the "250 ..." line): `what` names it
  // when none comes ("the greeting"), `step` what it answers when it is not SMTP.
  absl::StatusOr<Reply> Read(std::string_view what, std::string_view step) {
    Reply reply;
    for (;;) {
      std::string line;
      if (beast::error_code ec = connection_.ReadLine(line)) {
        if (ec == asio::error::not_found) {
          return absl::UnavailableError(StrCat(where_, " answered ", step,
                                               " with a line longer than ", kMaxReplyLineBytes,
                                               " bytes"));
        }
        return absl::UnavailableError(
            StrCat(where_, ": did not receive ", what, ": ", Reason(ec, connection_.timeout())));
      }
      const bool well_formed = line.size() >= 3 &&
                               std::isdigit(static_cast<unsigned char>(line[0])) &&
                               std::isdigit(static_cast<unsigned char>(line[1])) &&
                               std::isdigit(static_cast<unsigned char>(line[2])) &&
                               (line.size() == 3 || line[3] == ' ' || line[3] == '-');
      const int code = well_formed ? std::stoi(line.substr(0, 3)) : 0;
      if (!well_formed || (!reply.lines.empty() && code != reply.code) ||
          reply.lines.size() >= kMaxReplyLines) {
        return absl::UnavailableError(
            StrCat(where_, " answered ", step,
                   " with what is not an SMTP reply: ", Utf8Cut(ValidUtf8(line), 200)));
      }
      reply.code = code;
      reply.text += StrCat(reply.lines.empty() ? "" : " ", ValidUtf8(line));
      reply.lines.push_back(std::move(line));
      if (reply.lines.back().size() == 3 || reply.lines.back()[3] == ' ') return reply;
    }
  }

  // OK when `reply` is of class `expected`; else what its code means: 4xx a transient refusal
  // (Unavailable), 5xx a permanent one (FailedPrecondition), anything else a server out of step.
  absl::Status Check(const Reply& reply, std::string_view step, int expected) const {
    if (reply.code / 100 == expected) return absl::OkStatus();
    const std::string refused = StrCat(where_, " refused ", step, ": ", reply.text);
    if (reply.code / 100 == 4) return absl::UnavailableError(refused);
    if (reply.code / 100 == 5) return absl::FailedPreconditionError(refused);
    return absl::UnavailableError(
        StrCat(where_, " answered ", step, " with an unexpected reply: ", reply.text));
  }

  // EHLO, or HELO when the server refuses EHLO as unknown; what it offers (nothing after HELO).
  absl::StatusOr<Extensions> Hello(const std::string& name) {
    const std::string ehlo = StrCat("EHLO ", name);
    CART_ASSIGN_OR_RETURN(Reply reply, Exchange(ehlo));
    if (reply.code / 100 == 5) {
      CART_RETURN_IF_ERROR(Command(StrCat("HELO ", name), 2).status());
      return Extensions{};
    }
    CART_RETURN_IF_ERROR(Check(reply, ehlo, 2));
    return ParseExtensions(reply);
  }

  // AUTH PLAIN with the initial response (RFC 4954 §4), or after an empty challenge from a
  // server that does not take one.
  absl::Status AuthPlain(const Extensions& offered, const std::string& username,
                         const std::string& password) {
    if (!offered.Has("AUTH")) {
      return absl::FailedPreconditionError(
          StrCat(where_, " does not offer AUTH, and a username is set"));
    }
    if (offered.auth.count("PLAIN") == 0) {
      return absl::FailedPreconditionError(StrCat(where_, " does not offer AUTH PLAIN (it offers ",
                                                  StrJoin(offered.auth, " "), ")"));
    }
    const std::string credentials =
        Base64(StrCat(std::string(1, '\0'), username, std::string(1, '\0'), password));
    CART_ASSIGN_OR_RETURN(Reply reply, Exchange(StrCat("AUTH PLAIN ", credentials), "AUTH PLAIN"));
    if (reply.code == 334) {
      CART_ASSIGN_OR_RETURN(reply, Exchange(credentials, "AUTH PLAIN"));
    }
    return Check(reply, "AUTH PLAIN", 2);
  }

  const std::string& where() const { return where_; }

 private:
  const std::string where_;  // "SMTP host:port"
  Connection& connection_;
};

bool IsLoopback(const std::string& host) {
  if (ToLower(host) == "localhost") return true;
  const std::optional<asio::ip::address> ip = IpAddress(host);
  return ip && ip->is_loopback();
}

absl::Status CheckAddress(std::string_view what, std::string_view address) {
  if (address.empty()) return absl::InvalidArgumentError(StrCat("the ", what, " address is empty"));
  for (char c : address) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '<' || c == '>' || c == ' ') {
      return absl::InvalidArgumentError(StrCat("the ", what, " address '", ValidUtf8(address),
                                               "' holds a control character, a space, '<' or '>'"));
    }
  }
  return absl::OkStatus();
}

// The header fields SendMail writes itself (lower case).
const std::set<std::string>& OwnHeaders() {
  static const auto* own = new std::set<std::string>{
      "from",       "to",           "subject",      "date",
      "message-id", "mime-version", "content-type", "content-transfer-encoding"};
  return *own;
}

absl::Status CheckMail(const SmtpServer& server, const Mail& mail) {
  if (server.host.empty()) return absl::InvalidArgumentError("the SMTP server has no host");
  if (server.port < 1 || server.port > 65535) {
    return absl::InvalidArgumentError(StrCat("SMTP port ", server.port, " is not in 1-65535"));
  }
  if (server.helo.empty() || HasCrOrLf(server.helo) || server.helo.find(' ') != std::string::npos) {
    return absl::InvalidArgumentError("the SMTP HELO name is empty or holds a space, CR or LF");
  }
  CART_RETURN_IF_ERROR(CheckAddress("sender", server.from));
  if (mail.to.empty()) return absl::InvalidArgumentError("the mail has no recipient");
  for (const std::string& to : mail.to) CART_RETURN_IF_ERROR(CheckAddress("recipient", to));
  if (HasCrOrLf(mail.subject)) return absl::InvalidArgumentError("the subject holds CR or LF");
  if (mail.message_id.find_first_of("\r\n<> ") != std::string::npos) {
    return absl::InvalidArgumentError("the message id holds CR, LF, a space, '<' or '>'");
  }
  for (const auto& [name, value] : mail.headers) {
    if (!IsFieldName(name)) {
      return absl::InvalidArgumentError(
          StrCat("mail header name '", ValidUtf8(name), "' is not a header field name"));
    }
    if (OwnHeaders().count(ToLower(name)) > 0) {
      return absl::InvalidArgumentError(StrCat("mail header ", name, " is written by SendMail"));
    }
    if (HasCrOrLf(value)) {
      return absl::InvalidArgumentError(StrCat("mail header ", name, " holds CR or LF"));
    }
  }
  return absl::OkStatus();
}

// An unstructured header value as it goes out: as it is when ASCII and short, else RFC 2047
// encoded words (base64 of UTF-8, each at most 75 characters, on folded lines).
std::string HeaderValue(std::string_view value) {
  if (IsAscii(value) && value.size() <= 900) return std::string(value);
  constexpr size_t kWordBytes = 45;  // 60 base64 characters: "=?UTF-8?B?" + 60 + "?=" is 72
  std::string out;
  while (!value.empty()) {
    size_t end = Utf8Boundary(value, kWordBytes);
    if (end == 0) end = std::min(value.size(), kWordBytes);  // not UTF-8: cut anywhere
    out += StrCat(out.empty() ? "" : "\r\n ", "=?UTF-8?B?", Base64(value.substr(0, end)), "?=");
    value.remove_prefix(end);
  }
  return out;
}

// The text's lines, whichever line ends it uses; a last line end ends the last line.
std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t end = text.find_first_of("\r\n");
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    const size_t next = text.compare(end, 2, "\r\n") == 0 ? end + 2 : end + 1;
    text.remove_prefix(next);
  }
  return lines;
}

struct Body {
  std::string encoding;    // Content-Transfer-Encoding
  std::string mail_param;  // on MAIL FROM: " BODY=8BITMIME" for 8bit
  std::string lines;       // CRLF-ended lines, not yet dot-stuffed
};

Body EncodeBody(std::string_view text, bool server_takes_8bit) {
  const std::vector<std::string_view> lines = Lines(text);
  bool short_lines = true;
  for (std::string_view line : lines) short_lines = short_lines && line.size() <= kMaxSmtpLineBytes;
  const bool has_nul = text.find('\0') != std::string_view::npos;
  Body body;
  if (short_lines && !has_nul && (IsAscii(text) || server_takes_8bit)) {
    body.encoding = IsAscii(text) ? "7bit" : "8bit";
    if (!IsAscii(text)) body.mail_param = " BODY=8BITMIME";
    for (std::string_view line : lines) body.lines += StrCat(line, "\r\n");
    return body;
  }
  body.encoding = "base64";
  std::string crlf_text;
  for (std::string_view line : lines) crlf_text += StrCat(line, "\r\n");
  const std::string encoded = Base64(crlf_text);
  for (size_t i = 0; i < encoded.size(); i += 76) body.lines += encoded.substr(i, 76) + "\r\n";
  return body;
}

// The whole DATA payload: header, blank line, dot-stuffed body, and the "." line that ends it.
std::string Message(const SmtpServer& server, const Mail& mail, const Body& body) {
  const std::string message_id =
      mail.message_id.empty() ? StrCat(RandomHex(16), "@", server.helo) : mail.message_id;
  std::string out = StrCat(
      "From: ", server.from, "\r\n",                   //
      "To: ", StrJoin(mail.to, ", "), "\r\n",          //
      "Subject: ", HeaderValue(mail.subject), "\r\n",  //
      "Date: ", absl::FormatTime("%a, %d %b %Y %H:%M:%S +0000", absl::Now(), absl::UTCTimeZone()),
      "\r\n",                                         //
      "Message-ID: <", message_id, ">\r\n",           //
      "MIME-Version: 1.0\r\n",                        //
      "Content-Type: text/plain; charset=utf-8\r\n",  //
      "Content-Transfer-Encoding: ", body.encoding, "\r\n");
  for (const auto& [name, value] : mail.headers)
    out += StrCat(name, ": ", HeaderValue(value), "\r\n");
  out += "\r\n";
  // Dot-stuffing (RFC 5321 §4.5.2): a line that starts with '.' gets another.
  std::string_view lines = body.lines;
  while (!lines.empty()) {
    const size_t end = lines.find("\r\n") + 2;
    if (lines[0] == '.') out += '.';
    out += lines.substr(0, end);
    lines.remove_prefix(end);
  }
  out += ".\r\n";
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string RedactUrl(std::string_view url) {
  const std::optional<UrlParts> parts = SplitUrl(url);
  if (!parts) return "(invalid URL)";
  return StrCat(parts->scheme, "://", parts->host_port, "/…");
}

absl::StatusOr<Url> ParseWebhookUrl(std::string_view url) {
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return UrlError(url, "contains a space or a control character");
    }
  }
  const std::optional<UrlParts> parts = SplitUrl(url);
  if (!parts) return UrlError(url, "is not of the form http(s)://host[:port][/path]");
  Url out;
  out.scheme = ToLower(parts->scheme);
  if (out.scheme != "http" && out.scheme != "https") return UrlError(url, "is not http(s)");
  if (parts->has_userinfo) {
    return UrlError(url, "carries user information (user:password@); pass credentials as headers");
  }
  std::string_view host = parts->host_port;
  std::string_view port;
  if (!host.empty() && host[0] == '[') {  // an IPv6 address: [::1]:8080
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return UrlError(url, "has an unclosed '[' in its host");
    const std::string_view after = host.substr(close + 1);
    if (!after.empty() && after[0] != ':') return UrlError(url, "has junk after its IPv6 host");
    port = after.empty() ? std::string_view() : after.substr(1);
    host = host.substr(1, close - 1);
    if (!IpAddress(std::string(host)) || !IpAddress(std::string(host))->is_v6()) {
      return UrlError(url, "has an invalid IPv6 address in its host");
    }
  } else {
    const size_t colon = host.find(':');
    if (colon != std::string_view::npos) {
      port = host.substr(colon + 1);
      host = host.substr(0, colon);
    }
  }
  if (host.empty()) return UrlError(url, "has no host");
  out.host = std::string(host);
  out.port = out.scheme == "https" ? 443 : 80;
  if (parts->host_port.back() == ':' || !port.empty()) {
    const std::optional<int64_t> number = ParseInt64(port);
    if (!number || *number < 1 || *number > 65535 || port[0] == '+' || port[0] == '-') {
      return UrlError(url, StrCat("has an invalid port '", port, "' (1-65535)"));
    }
    out.port = static_cast<int>(*number);
  }
  std::string_view target = parts->rest.substr(0, parts->rest.find('#'));
  out.target = target.empty() || target[0] != '/' ? StrCat("/", target) : std::string(target);
  return out;
}

absl::StatusOr<PostResult> PostJson(std::string_view url_text, std::string_view body,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    absl::Duration timeout, const std::string& ca_file) {
  CART_ASSIGN_OR_RETURN(const Url url, ParseWebhookUrl(url_text));
  const std::string where = StrCat("POST ", RedactUrl(url_text));
  bhttp::request<bhttp::string_body> request{bhttp::verb::post, url.target, 11};
  const bool default_port = url.port == (url.scheme == "https" ? 443 : 80);
  const bool v6 = url.host.find(':') != std::string::npos;
  request.set(bhttp::field::host, StrCat(v6 ? "[" : "", url.host, v6 ? "]" : "",
                                         default_port ? "" : StrCat(":", url.port)));
  request.set(bhttp::field::user_agent, "cartd");
  request.set(bhttp::field::content_type, "application/json");
  request.set(bhttp::field::connection, "close");
  for (const auto& [name, value] : headers) {
    if (!IsFieldName(name) || HasCrOrLf(value)) {
      return absl::InvalidArgumentError(
          StrCat(where, ": header '", ValidUtf8(name), "' has an invalid name or a CR/LF value"));
    }
    request.set(name, value);
  }
  request.body() = std::string(body);
  request.prepare_payload();

  Connection connection(url.host, url.port, timeout);
  const std::string prefix = StrCat(where, ": ");
  const bool https = url.scheme == "https";
  if (https) CART_RETURN_IF_ERROR(WithContext(connection.LoadTrust(ca_file), prefix));
  CART_RETURN_IF_ERROR(WithContext(connection.Connect(), prefix));
  if (https) CART_RETURN_IF_ERROR(WithContext(connection.StartTls(), prefix));
  const beast::error_code write_ec = connection.Run(
      [&](auto& stream, auto handler) { bhttp::async_write(stream, request, handler); });

  // The answer's header. A server may answer (401, 413) before it has read all of the request
  // and close: a failed write is reported only when no answer can be read after it. Interim
  // answers (1xx) are skipped.
  beast::flat_buffer buffer;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser;
  for (int interim = 0;; ++interim) {
    parser.emplace();
    parser->body_limit(kMaxAnswerBodyBytes);
    const beast::error_code ec = connection.Run([&](auto& stream, auto handler) {
      bhttp::async_read_header(stream, buffer, *parser, handler);
    });
    if (ec) {
      if (write_ec) {
        return absl::UnavailableError(
            StrCat(prefix, "cannot send the request: ", Reason(write_ec, timeout)));
      }
      return absl::UnavailableError(StrCat(prefix, "no HTTP answer: ", Reason(ec, timeout)));
    }
    const int status = parser->get().result_int();
    if (status >= 200 || status == 101 || interim == 10) break;
  }
  PostResult result;
  result.http_status = parser->get().result_int();
  // The body, as far as it comes within the deadline and the limit: it only helps a reader.
  connection.Run(
      [&](auto& stream, auto handler) { bhttp::async_read(stream, buffer, *parser, handler); });
  result.body_start = parser->get().body().substr(0, kBodyStartBytes);
  return result;
}

absl::Status SendMail(const SmtpServer& server, const Mail& mail) {
  CART_RETURN_IF_ERROR(CheckMail(server, mail));
  const std::string where = StrCat("SMTP ", HostPort(server.host, server.port));
  if (!server.username.empty() && server.tls == SmtpServer::Tls::kNone &&
      !IsLoopback(server.host)) {
    return absl::FailedPreconditionError(
        StrCat(where,
               ": refusing to send the password (AUTH) over a connection without TLS to a "
               "host that is not loopback; use STARTTLS or implicit TLS"));
  }
  Connection connection(server.host, server.port, server.timeout);
  const std::string prefix = StrCat(where, ": ");
  if (server.tls != SmtpServer::Tls::kNone) {
    CART_RETURN_IF_ERROR(WithContext(connection.LoadTrust(server.ca_file), prefix));
  }
  CART_RETURN_IF_ERROR(WithContext(connection.Connect(), prefix));
  if (server.tls == SmtpServer::Tls::kImplicit) {
    CART_RETURN_IF_ERROR(WithContext(connection.StartTls(), prefix));
  }
  SmtpSession smtp(where, connection);
  CART_ASSIGN_OR_RETURN(const Reply greeting, smtp.Read("the greeting", "the connection"));
  CART_RETURN_IF_ERROR(smtp.Check(greeting, "the connection", 2));
  CART_ASSIGN_OR_RETURN(Extensions offered, smtp.Hello(server.helo));
  if (server.tls == SmtpServer::Tls::kStartTls) {
    if (!offered.Has("STARTTLS")) {
      return absl::FailedPreconditionError(
          StrCat(where, " does not offer STARTTLS, and the configuration asks for it"));
    }
    CART_RETURN_IF_ERROR(smtp.Command("STARTTLS", 2).status());
    CART_RETURN_IF_ERROR(WithContext(connection.StartTls(), prefix));
    CART_ASSIGN_OR_RETURN(offered, smtp.Hello(server.helo));  // RFC 3207 §4.2: forget, ask again
  }
  if (!server.username.empty()) {
    CART_RETURN_IF_ERROR(smtp.AuthPlain(offered, server.username, server.password));
  }
  const Body body = EncodeBody(mail.text, offered.Has("8BITMIME"));
  CART_RETURN_IF_ERROR(smtp.Command(StrCat("MAIL FROM:<", server.from, ">", body.mail_param), 2,
                                    StrCat("MAIL FROM:<", server.from, ">"))
                           .status());
  for (const std::string& to : mail.to) {
    CART_RETURN_IF_ERROR(smtp.Command(StrCat("RCPT TO:<", to, ">"), 2).status());
  }
  CART_RETURN_IF_ERROR(smtp.Command("DATA", 3).status());
  const std::string message = Message(server, mail, body);
  if (beast::error_code ec = connection.Write(message)) {
    return absl::UnavailableError(
        StrCat(prefix, "cannot send the message: ", Reason(ec, server.timeout)));
  }
  CART_ASSIGN_OR_RETURN(const Reply accepted, smtp.Read("the reply to the message", "the message"));
  CART_RETURN_IF_ERROR(smtp.Check(accepted, "the message", 2));
  // The mail is the server's now; QUIT is a courtesy whose answer changes nothing.
  (void)smtp.Exchange("QUIT");
  return absl::OkStatus();
}

}  // namespace cart::server::notify
