// server/notify/senders.h against real receivers: tests/support/notify_receiver.py (an HTTP
// receiver and aiosmtpd) in a process of its own on 127.0.0.1, a port nobody listens on, and a
// port that accepts and never answers. What each test proves is what the receiver recorded or
// the Status the call returned.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/process.h"
#include "common/strings.h"
#include "server/notify/senders.h"
#include "tests/support/notify_receiver.h"
#include "tests/support/test_support.h"

namespace cart::server::notify {
namespace {

using ::cart::testing::Receiver;

using ::cart::testing::FreePort;
using ::cart::testing::ReadFile;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A port on 127.0.0.1 that takes connections (into the kernel's backlog) and never says a word.
class SilentPort {
 public:
  SilentPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

std::string Lf(std::string text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out += text[i];
  }
  return out;
}

class NotifySendersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(::cart::testing::kReceiverPython)) {
      GTEST_SKIP() << "no " << ::cart::testing::kReceiverPython;
    }
  }

  // A self-signed certificate for 127.0.0.1 only (no DNS name), and its key.
  void MakeCertificate() {
    const auto result = ::cart::testing::RunCommand(StrCat(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=cart-notify-test -addext "
        "subjectAltName=IP:127.0.0.1 -keyout ",
        key_, " -out ", cert_, " 2>&1"));
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  SmtpServer Smtp(int port) const {
    SmtpServer server;
    server.host = "127.0.0.1";
    server.port = port;
    server.from = "cartd@lab.test";
    server.timeout = absl::Seconds(20);
    return server;
  }

  TempDir dir_;
  const std::string cert_ = dir_.File("cert.pem");
  const std::string key_ = dir_.File("key.pem");
};

// ---------------------------------------------------------------------------------------------
// URLs

TEST(WebhookUrlTest, ParsesSchemeHostPortAndTargetWithDefaults) {
  absl::StatusOr<Url> url = ParseWebhookUrl("https://hooks.slack.com/services/T0/B0/s3cr3t?a=1#x");
  CART_ASSERT_OK(url);
  EXPECT_EQ(url->scheme, "https");
  EXPECT_EQ(url->host, "hooks.slack.com");
  EXPECT_EQ(url->port, 443);
  EXPECT_EQ(url->target, "/services/T0/B0/s3cr3t?a=1");

  url = ParseWebhookUrl("HTTP://127.0.0.1:8080");
  CART_ASSERT_OK(url);
  EXPECT_EQ(url->scheme, "http");
  EXPECT_EQ(url->port, 8080);
  EXPECT_EQ(url->target, "/");

  url = ParseWebhookUrl("http://[::1]:9000?q=2");
  CART_ASSERT_OK(url);
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 9000);
  EXPECT_EQ(url->target, "/?q=2");
}

TEST(WebhookUrlTest, RefusesOtherSchemesMissingHostsAndBadPortsWithoutShowingThePath) {
  EXPECT_THAT(ParseWebhookUrl("ftp://files.example/s3cr3t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'ftp://files.example/…' is not http(s)"),
                             Not(HasSubstr("s3cr3t")))));
  EXPECT_THAT(ParseWebhookUrl("https:///services/s3cr3t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("has no host"), Not(HasSubstr("s3cr3t")))));
  EXPECT_THAT(ParseWebhookUrl("http://hooks.example:99999/s3cr3t"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("invalid port '99999'"), Not(HasSubstr("s3cr3t")))));
  EXPECT_THAT(ParseWebhookUrl("http://hooks.example:eighty/"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid port 'eighty'")));
  EXPECT_THAT(ParseWebhookUrl("https://user:pa55@hooks.example/"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("user information"), Not(HasSubstr("pa55")))));
  EXPECT_THAT(ParseWebhookUrl("https://hooks.example/a b"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("space")));
  EXPECT_THAT(ParseWebhookUrl("hooks.example/path"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'(invalid URL)'")));
}

TEST(WebhookUrlTest, RedactUrlKeepsOnlySchemeHostAndPort) {
  EXPECT_EQ(RedactUrl("https://hooks.slack.com/services/T0/B0/s3cr3t"),
            "https://hooks.slack.com/…");
  EXPECT_EQ(RedactUrl("http://user:pa55@10.0.0.7:8080/x?token=s3cr3t"), "http://10.0.0.7:8080/…");
  EXPECT_EQ(RedactUrl("https://hooks.example"), "https://hooks.example/…");
  EXPECT_EQ(RedactUrl("not a url"), "(invalid URL)");
  EXPECT_EQ(RedactUrl("https://bad host/"), "(invalid URL)");
}

// ---------------------------------------------------------------------------------------------
// PostJson

TEST_F(NotifySendersTest, PostJsonDeliversBodyAndIdempotencyKeyAndReturnsTheStatus) {
  std::unique_ptr<Receiver> receiver = Receiver::Start(dir_, {"--http-port", "0"});
  ASSERT_NE(receiver, nullptr);
  const std::string body = R"({"text":"run 7 finished: ρ = 0.93"})";
  absl::StatusOr<PostResult> result =
      PostJson(StrCat("http://127.0.0.1:", receiver->http_port(), "/hooks/s3cr3t?v=1"), body,
               {{"Idempotency-Key", "notification-42"}}, absl::Seconds(20));
  CART_ASSERT_OK(result);
  EXPECT_EQ(result->http_status, 200);
  EXPECT_EQ(result->body_start, R"({"status": 200})");

  const std::vector<json> records = receiver->Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["path"], "/hooks/s3cr3t?v=1");
  EXPECT_EQ(records[0]["body"], body);
  EXPECT_EQ(records[0]["headers"]["Idempotency-Key"], "notification-42");
  EXPECT_EQ(records[0]["headers"]["Content-Type"], "application/json");
  EXPECT_EQ(records[0]["headers"]["Host"], StrCat("127.0.0.1:", receiver->http_port()));
}

TEST_F(NotifySendersTest, PostJsonReturnsTheReceiversServerErrorAsAnAnswer) {
  std::unique_ptr<Receiver> receiver =
      Receiver::Start(dir_, {"--http-port", "0", "--http-status", "500"});
  ASSERT_NE(receiver, nullptr);
  absl::StatusOr<PostResult> result = PostJson(
      StrCat("http://127.0.0.1:", receiver->http_port(), "/"), "{}", {}, absl::Seconds(20));
  CART_ASSERT_OK(result);
  EXPECT_EQ(result->http_status, 500);
  EXPECT_EQ(result->body_start, R"({"status": 500})");
}

TEST_F(NotifySendersTest, PostJsonToAClosedPortIsUnavailableAndNamesOnlyTheRedactedUrl) {
  const int port = FreePort();
  absl::StatusOr<PostResult> result = PostJson(
      StrCat("http://127.0.0.1:", port, "/services/T0/s3cr3t"), "{}", {}, absl::Seconds(20));
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kUnavailable,
                               AllOf(HasSubstr(StrCat("POST http://127.0.0.1:", port, "/…")),
                                     HasSubstr("refused"), Not(HasSubstr("s3cr3t")))));
}

TEST_F(NotifySendersTest, PostJsonToAServerThatNeverAnswersEndsAtTheTimeout) {
  SilentPort silent;
  const absl::Time start = absl::Now();
  absl::StatusOr<PostResult> result =
      PostJson(StrCat("http://127.0.0.1:", silent.port(), "/"), "{}", {}, absl::Milliseconds(300));
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("timed out")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(NotifySendersTest, PostJsonOverHttpsTrustsOnlyTheGivenCaAndChecksTheHost) {
  ASSERT_NO_FATAL_FAILURE(MakeCertificate());
  std::unique_ptr<Receiver> receiver =
      Receiver::Start(dir_, {"--http-port", "0", "--tls-cert", cert_, "--tls-key", key_});
  ASSERT_NE(receiver, nullptr);
  const std::string port = std::to_string(receiver->http_port());

  absl::StatusOr<PostResult> trusted =
      PostJson(StrCat("https://127.0.0.1:", port, "/tls"), "{}", {}, absl::Seconds(20), cert_);
  CART_ASSERT_OK(trusted);
  EXPECT_EQ(trusted->http_status, 200);
  ASSERT_EQ(receiver->Records().size(), 1u);
  EXPECT_EQ(receiver->Records()[0]["path"], "/tls");

  // The system's CA store does not know the self-signed certificate.
  EXPECT_THAT(PostJson(StrCat("https://127.0.0.1:", port, "/"), "{}", {}, absl::Seconds(20)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("certificate")));
  // Trusted, but issued to 127.0.0.1, not to the name "localhost".
  EXPECT_THAT(PostJson(StrCat("https://localhost:", port, "/"), "{}", {}, absl::Seconds(20), cert_),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("hostname mismatch")));
  // A CA file that cannot be read is the configuration's fault, found before connecting.
  EXPECT_THAT(PostJson(StrCat("https://127.0.0.1:", port, "/"), "{}", {}, absl::Seconds(20),
                       dir_.File("missing.pem")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing.pem")));
  EXPECT_EQ(receiver->Records().size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// SendMail

TEST_F(NotifySendersTest, SendMailDeliversSubjectBodyAndHeadersIntact) {
  std::unique_ptr<Receiver> receiver = Receiver::Start(dir_, {"--smtp-port", "0"});
  ASSERT_NE(receiver, nullptr);
  Mail mail;
  mail.to = {"alice@lab.test", "bob@lab.test"};
  mail.subject = "Run 7 finished: ρ = 0.93";
  mail.text = "Spearman ρ rose.\n.a line that starts with a dot\n..and two\r\nlast line\n";
  mail.message_id = "run-7.finished@cart.test";
  mail.headers = {{"Auto-Submitted", "auto-generated"}};
  CART_ASSERT_OK(SendMail(Smtp(receiver->smtp_port()), mail));

  const std::vector<json> records = receiver->Records();
  ASSERT_EQ(records.size(), 1u);
  const json& got = records[0];
  EXPECT_EQ(got["mail_from"], "cartd@lab.test");
  EXPECT_THAT(got["rcpt_tos"].get<std::vector<std::string>>(),
              ElementsAre("alice@lab.test", "bob@lab.test"));
  EXPECT_EQ(got["subject"], mail.subject);
  EXPECT_EQ(Lf(got["text"].get<std::string>()),
            "Spearman ρ rose.\n.a line that starts with a dot\n..and two\nlast line\n");
  EXPECT_EQ(got["message_id"], "<run-7.finished@cart.test>");
  const std::string data = got["data"].get<std::string>();
  EXPECT_THAT(data, HasSubstr("\r\nAuto-Submitted: auto-generated\r\n"));
  EXPECT_THAT(data, HasSubstr("\r\nTo: alice@lab.test, bob@lab.test\r\n"));
  EXPECT_THAT(data, HasSubstr("\r\nDate: "));
  EXPECT_THAT(data, HasSubstr("Subject: =?UTF-8?B?"));
  EXPECT_THAT(got["mail_options"].get<std::vector<std::string>>(),
              ::testing::Contains("BODY=8BITMIME"));
}

TEST_F(NotifySendersTest, SendMailSendsALineLongerThanSmtpAllowsIntact) {
  std::unique_ptr<Receiver> receiver = Receiver::Start(dir_, {"--smtp-port", "0"});
  ASSERT_NE(receiver, nullptr);
  Mail mail;
  mail.to = {"alice@lab.test"};
  mail.subject = "long";
  mail.text = StrCat(std::string(3000, 'x'), "\n.dot\n");
  CART_ASSERT_OK(SendMail(Smtp(receiver->smtp_port()), mail));
  const std::vector<json> records = receiver->Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(Lf(records[0]["text"].get<std::string>()), mail.text);
  EXPECT_THAT(records[0]["data"].get<std::string>(),
              HasSubstr("Content-Transfer-Encoding: base64"));
}

TEST_F(NotifySendersTest, SendMailWithARefusedRecipientIsFailedPreconditionWithTheReply) {
  std::unique_ptr<Receiver> receiver =
      Receiver::Start(dir_, {"--smtp-port", "0", "--smtp-refuse-rcpt", "550 5.1.1 no such user"});
  ASSERT_NE(receiver, nullptr);
  Mail mail;
  mail.to = {"x@y"};
  mail.subject = "s";
  mail.text = "t";
  EXPECT_THAT(SendMail(Smtp(receiver->smtp_port()), mail),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(StrCat("SMTP 127.0.0.1:", receiver->smtp_port(),
                                        " refused RCPT TO:<x@y>: 550 5.1.1 no such user"))));
  EXPECT_TRUE(receiver->Records().empty());
}

TEST_F(NotifySendersTest, SendMailToAClosedPortIsUnavailable) {
  Mail mail;
  mail.to = {"x@y"};
  const int port = FreePort();
  EXPECT_THAT(SendMail(Smtp(port), mail),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(StrCat("SMTP 127.0.0.1:", port)), HasSubstr("refused"))));
}

TEST_F(NotifySendersTest, SendMailToAServerThatNeverGreetsEndsAtTheTimeout) {
  SilentPort silent;
  SmtpServer server = Smtp(silent.port());
  server.timeout = absl::Milliseconds(300);
  Mail mail;
  mail.to = {"x@y"};
  const absl::Time start = absl::Now();
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("did not receive the greeting"), HasSubstr("timed out"))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(NotifySendersTest, SendMailRefusesAuthWithoutTlsToANonLoopbackHostBeforeConnecting) {
  SmtpServer server;
  server.host = "192.0.2.1";  // TEST-NET-1: nothing answers there
  server.port = 587;
  server.from = "cartd@lab.test";
  server.username = "cart";
  server.password = "pa55";
  Mail mail;
  mail.to = {"x@y"};
  const absl::Time start = absl::Now();
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("SMTP 192.0.2.1:587"), HasSubstr("without TLS"))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST_F(NotifySendersTest, SendMailUpgradesWithStartTlsThenAuthenticates) {
  ASSERT_NO_FATAL_FAILURE(MakeCertificate());
  std::unique_ptr<Receiver> receiver = Receiver::Start(
      dir_,
      {"--smtp-port", "0", "--tls-cert", cert_, "--tls-key", key_, "--smtp-auth", "cart:pa55w0rd"});
  ASSERT_NE(receiver, nullptr);
  SmtpServer server = Smtp(receiver->smtp_port());
  server.tls = SmtpServer::Tls::kStartTls;
  server.ca_file = cert_;
  server.username = "cart";
  server.password = "pa55w0rd";
  Mail mail;
  mail.to = {"alice@lab.test"};
  mail.subject = "over TLS";
  mail.text = "ρ\n";
  CART_ASSERT_OK(SendMail(server, mail));
  std::vector<json> records = receiver->Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["tls"], true);
  EXPECT_EQ(records[0]["auth"], "cart");
  EXPECT_EQ(Lf(records[0]["text"].get<std::string>()), "ρ\n");

  // A wrong password: the server's 535, and neither the password nor its encoding shown.
  server.password = "wr0ng";
  EXPECT_THAT(
      SendMail(server, mail),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("refused AUTH PLAIN: 535"), Not(HasSubstr("wr0ng")),
                     Not(HasSubstr(absl::Base64Escape(std::string("\0cart\0wr0ng", 11)))))));
  // Without STARTTLS this server offers no AUTH (loopback may try; it is refused).
  server.password = "pa55w0rd";
  server.tls = SmtpServer::Tls::kNone;
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("does not offer AUTH")));
  // A CA file that does not hold the server's certificate: the handshake fails.
  server.tls = SmtpServer::Tls::kStartTls;
  server.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("TLS handshake failed")));
  EXPECT_EQ(receiver->Records().size(), 1u);
}

TEST(SendMailInputTest, RefusesHeaderInjectionAndMalformedAddressesBeforeConnecting) {
  SmtpServer server;
  server.host = "192.0.2.1";
  server.from = "cartd@lab.test";
  Mail mail;
  mail.to = {"alice@lab.test"};
  mail.subject = "ok\r\nBcc: eve@evil.test";
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("subject")));
  mail.subject = "ok";
  mail.to = {"alice@lab.test>\r\nRCPT TO:<eve@evil.test"};
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("recipient address")));
  mail.to = {"alice@lab.test"};
  mail.headers = {{"X-Run", "7\nBcc: eve@evil.test"}};
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("X-Run")));
  mail.headers = {{"Subject", "again"}};
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("written by SendMail")));
  mail.headers = {};
  mail.to = {};
  EXPECT_THAT(SendMail(server, mail),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no recipient")));
}

}  // namespace
}  // namespace cart::server::notify
