#pragma once

// How a notification reaches its subscriber on each channel (docs/operations.md
// "Notifications"): a webhook gets the notification's JSON, a Slack-compatible incoming webhook a
// {"text": ...} message, an e-mail address a plain-text mail over cartd's SMTP server. Every try
// carries the notification's idempotency key (the Idempotency-Key header; the mail's Message-ID),
// the same on each retry.

#include <string>

#include "absl/time/time.h"
#include "server/notify/senders.h"
#include "store/notify_store.h"

namespace cart::server::notify {

struct DeliveryOptions {
  // The SMTP server mail goes through; host empty: no e-mail (subscriptions to it are refused).
  SmtpServer smtp;
  // A webhook POST gets this long for the whole exchange. Default 10 s.
  absl::Duration http_timeout = absl::Seconds(10);
  // CA bundle for https webhooks (and SMTP over TLS); empty: the system's.
  std::string ca_file;
};

struct Delivered {
  bool ok = false;
  std::string detail;  // "HTTP 204", "HTTP 500: <body start>", the SMTP reply, the socket error
  // A failure trying again cannot mend (the notification itself cannot be sent as it is): given
  // up at once. Receivers' refusals, 4xx and SMTP 5xx included, are retried: they get fixed.
  bool retryable = true;
};

// One try. Never throws; a 2xx answer (webhook, Slack) or an accepted mail is ok.
Delivered Deliver(const store::Outgoing& out, const DeliveryOptions& options);

}  // namespace cart::server::notify
