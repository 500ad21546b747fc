#pragma once

// The dashboard's notification endpoints (docs/dashboard.md "Notifications"), over the Notifier:
//
//   GET  /api/v1/subscriptions                 the caller's subscriptions (URLs up to the host)
//   POST /api/v1/subscriptions                 {events, channel, target, run_id?, sweep?,
//                                               lost_after_s?, stuck_factor?, slip_share?}
//   POST /api/v1/subscriptions/ID/remove       {}
//   POST /api/v1/subscriptions/ID/test         {}: a test notification now
//   GET  /api/v1/notifications?subscription=&limit=   what was sent, newest first, with tries
//
// The Dashboard routes `parts` (the path after /api/v1/, split) here when parts[0] is
// "subscriptions" or "notifications", after its token and origin checks.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http/http_server.h"
#include "server/notify/notifier.h"

namespace cart::server::http {

// The answer's JSON; NotFound for another path under those two, the Notifier's errors (with
// their codes: InvalidArgument naming the field, PermissionDenied, NotFound).
absl::StatusOr<nlohmann::json> NotifyApi(notify::Notifier& notifier, const Request& request,
                                         const std::vector<std::string>& parts,
                                         const std::string& who);

}  // namespace cart::server::http
