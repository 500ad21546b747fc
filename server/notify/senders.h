#pragma once

// The wire side of notifications: one webhook POST, one mail over SMTP, each a blocking call that
// either hands its message over or says why not. No queue, retry or state lives here: the outbox
// and the delivery thread (server/notify/) decide when to call again, and the codes below are
// what they decide on (Unavailable: try again later; FailedPrecondition, InvalidArgument: the
// message or the configuration is wrong, and trying again will not help).
//
// Secrets: a webhook URL may carry its secret in the path (Slack's incoming webhooks do), and an
// SMTP password is one. No message returned here shows either: URLs appear as RedactUrl gives
// them, and the AUTH exchange is named, never quoted.
//
// Threads: every call is independent (its own I/O context and sockets) and may run on any thread,
// several at once. Each blocks the calling thread for at most its timeout, plus a host-name lookup
// the system resolver has not answered by then (bounded by its own retries, resolv.conf).

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cart::server::notify {

// A webhook URL, parsed.
struct Url {
  std::string scheme;  // "http" or "https", lower case
  std::string host;    // a name or an IP address; an IPv6 address without its brackets
  int port = 0;        // as written, else 80 for http and 443 for https
  std::string target;  // path and query as written ("/" when the URL has neither); no fragment
};

// Parses an absolute http(s) URL: scheme://host[:port][/path][?query][#fragment]. InvalidArgument,
// naming the problem and showing the URL as RedactUrl does, when the scheme is not http or https,
// the host is missing, the port is not a number in 1-65535, the URL carries user information
// (user:password@host: pass credentials as headers) or contains a space or control character.
absl::StatusOr<Url> ParseWebhookUrl(std::string_view url);

// `url` with everything after scheme://host[:port] replaced by "/…" and any user information
// dropped, so that it can be logged and shown: "https://hooks.slack.com/…". "(invalid URL)" when
// there is no scheme:// or the host part holds characters a host cannot have.
std::string RedactUrl(std::string_view url);

// What a webhook answered.
struct PostResult {
  int http_status = 0;     // 100-599
  std::string body_start;  // the first 200 bytes of the answer's body (fewer when it was shorter)
};

// POSTs `body` with Content-Type application/json to `url`, adding `headers` (e.g.
// {"Idempotency-Key", id}; names and values must hold no CR or LF), and reads the answer. The
// whole exchange (resolving, connecting, the TLS handshake, sending, reading the answer's status
// and headers) must finish within `timeout`; a body still arriving then is cut there. For https,
// the server's certificate chain is verified against the system's CA store, or against the PEM
// file `ca_file` alone when it is not empty, and its name against the URL's host (an IP address
// against the certificate's IP entries); SNI names the host.
//
// Returns the status and the start of the body for any HTTP answer, 4xx and 5xx included: what
// they mean is the caller's decision. Errors: InvalidArgument for a URL ParseWebhookUrl refuses,
// a header with CR/LF or an unreadable `ca_file` (all found before connecting); Unavailable when no
// HTTP answer came (the name does not resolve, the connection is refused or reset, the timeout
// passed, the TLS handshake or the certificate check failed, the answer is not HTTP), the message
// naming the redacted URL, the step and the reason.
absl::StatusOr<PostResult> PostJson(std::string_view url, std::string_view body,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    absl::Duration timeout, const std::string& ca_file = "");

// Where and how mail is sent.
struct SmtpServer {
  std::string host;  // a name or an IP address; required
  int port = 25;
  // kStartTls: connect in plain text and upgrade with STARTTLS before anything else is sent (a
  // server that does not offer it is refused); kImplicit: TLS from the first byte (port 465).
  // TLS verifies the server's certificate as PostJson does.
  enum class Tls { kNone, kStartTls, kImplicit };
  Tls tls = Tls::kNone;
  // AUTH PLAIN with these when username is not empty. Sent only over TLS, or to a loopback host
  // ("localhost", 127.0.0.0/8, ::1).
  std::string username;
  std::string password;
  std::string from;            // the envelope sender (MAIL FROM) and the From: header; required
  std::string helo = "cartd";  // the name given in EHLO / HELO
  std::string ca_file;         // as PostJson's: empty means the system's CA store
  absl::Duration timeout = absl::Seconds(30);  // for the whole session, connect to QUIT
};

// One message.
struct Mail {
  std::vector<std::string> to;  // addresses (local@domain, no <>); at least one
  std::string subject;          // UTF-8
  std::string text;             // UTF-8 plain text; "\n", "\r\n" or "\r" line ends
  std::string message_id;       // the Message-ID without <>; empty: one is made up
  // Extra header fields (e.g. {"Auto-Submitted", "auto-generated"}), after the ones SendMail
  // writes itself, which they may not repeat: From, To, Subject, Date, Message-ID, MIME-Version,
  // Content-Type, Content-Transfer-Encoding. A value that is not ASCII is encoded as Subject is.
  std::vector<std::pair<std::string, std::string>> headers;
};

// Sends `mail` in one SMTP session: EHLO (HELO when the server does not know EHLO), STARTTLS and
// EHLO again when asked, AUTH PLAIN when a username is set, MAIL FROM, RCPT TO for each
// recipient, DATA, QUIT. The message has From, To, Subject (RFC 2047 encoded words, base64 UTF-8,
// when not ASCII), Date (RFC 5322, UTC), Message-ID, MIME-Version and a text/plain; charset=utf-8
// body with CRLF line ends and dot-stuffing, sent 7bit when ASCII, 8bit when the server offers
// 8BITMIME and else base64 (also when a line is longer than SMTP's 998 bytes): it arrives as
// written. Every recipient must be accepted; the first refusal ends the session with nothing
// sent. OK once the server has accepted the message (its answer to the final "."), whatever
// QUIT then brings.
//
// Errors, each message naming the server (host:port), the step and the server's reply verbatim
// (a multi-line reply's lines joined by a space): ("SMTP 127.0.0.1:2525 refused RCPT TO:<x@y>:
// 550 5.1.1 no such user"):
// - InvalidArgument, before connecting: no host, a port outside 1-65535, a HELO name that is
//   empty or holds a space, no sender, no recipient, an address with a control character, a
//   space, '<' or '>', a subject, message id, header name or value with CR or LF, a message id
//   with a space, '<' or '>', a header SendMail writes itself, an unreadable ca_file (with TLS);
// - FailedPrecondition, before connecting: AUTH asked for over a connection without TLS to a host
//   that is not loopback. After connecting: the server answered a step with 5xx (a permanent
//   refusal), or does not offer STARTTLS or AUTH when asked to use it;
// - Unavailable: the name does not resolve, the connection fails, is closed or times out, the TLS
//   handshake or certificate check fails, the server answers 4xx (a transient refusal) or
//   something SMTP does not allow at that step.
absl::Status SendMail(const SmtpServer& server, const Mail& mail);

}  // namespace cart::server::notify
