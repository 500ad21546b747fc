#include "server/notify/delivery.h"

#include "common/strings.h"
#include "server/notify/events.h"

namespace cart::server::notify {
namespace {

Delivered Post(const std::string& url, const std::string& body, const store::Outgoing& out,
               const DeliveryOptions& options) {
  const std::vector<std::pair<std::string, std::string>> headers = {
      {"Idempotency-Key", IdempotencyKey(out.notification)},
      {"X-Cart-Event", out.notification.notice.event},
      {"User-Agent", "cartd"},
  };
  absl::StatusOr<PostResult> posted =
      PostJson(url, body, headers, options.http_timeout, options.ca_file);
  if (!posted.ok()) {
    return Delivered{false, std::string(posted.status().message()),
                     !absl::IsInvalidArgument(posted.status())};
  }
  const bool ok = posted->http_status >= 200 && posted->http_status < 300;
  std::string detail = StrCat("HTTP ", posted->http_status);
  if (!ok && !posted->body_start.empty()) {
    // An error page may echo the path, which is the secret of a Slack-style URL.
    std::string answer = ValidUtf8(posted->body_start);
    if (absl::StatusOr<Url> parsed = ParseWebhookUrl(url);
        parsed.ok() && parsed->target.size() > 1) {
      for (size_t at; (at = answer.find(parsed->target)) != std::string::npos;) {
        answer.replace(at, parsed->target.size(), "/…");
      }
    }
    detail += StrCat(": ", answer);
  }
  return Delivered{ok, detail};
}

}  // namespace

Delivered Deliver(const store::Outgoing& out, const DeliveryOptions& options) {
  const store::NotificationRecord& n = out.notification;
  switch (out.subscription.channel) {
    case store::NotifyChannel::kWebhook:
      return Post(out.subscription.target, n.notice.payload, out, options);
    case store::NotifyChannel::kSlack:
      return Post(out.subscription.target, SlackBody(n), out, options);
    case store::NotifyChannel::kEmail: {
      if (options.smtp.host.empty()) {
        return Delivered{false, "cartd has no SMTP server (smtp_host in its config)"};
      }
      Mail mail;
      mail.to = {out.subscription.target};
      mail.subject = MailSubject(n);
      mail.text = MailText(n);
      mail.message_id = StrCat(IdempotencyKey(n), "@cart-lab");
      mail.headers = {{"X-Cart-Event", n.notice.event}};
      SmtpServer smtp = options.smtp;
      if (smtp.ca_file.empty()) smtp.ca_file = options.ca_file;
      absl::Status sent = SendMail(smtp, mail);
      if (!sent.ok()) {
        return Delivered{false, std::string(sent.message()), !absl::IsInvalidArgument(sent)};
      }
      return Delivered{true, StrCat("SMTP ", smtp.host, ":", smtp.port, " accepted")};
    }
  }
  return Delivered{false, "unknown channel"};
}

}  // namespace cart::server::notify
