#include "server/http/notify_api.h"

#include <cmath>

#include "common/status.h"
#include "common/strings.h"
#include "server/http/request_body.h"
#include "server/notify/senders.h"

namespace cart::server::http {
namespace {

using nlohmann::json;

json SubscriptionJson(const store::Subscription& s) {
  return json{{"id", s.id},
              {"owner", s.owner},
              {"scope", std::string(store::SubscriptionScopeName(s.scope))},
              {"run_id", s.run_id},
              {"run_name", s.run_name},
              {"sweep", s.sweep_name},
              {"events", s.events},
              {"channel", std::string(store::NotifyChannelName(s.channel))},
              {"target",
               s.channel == store::NotifyChannel::kEmail ? s.target : notify::RedactUrl(s.target)},
              {"lost_after_s", s.lost_after_us / 1'000'000},
              {"stuck_factor", s.stuck_factor},
              {"slip_share", s.slip_share},
              {"created_us", s.created_us}};
}

json NotificationJson(const store::NotificationRecord& n) {
  json tries = json::array();
  for (const store::NotificationTry& t : n.log) {
    tries.push_back(
        json{{"number", t.number}, {"at_us", t.at_us}, {"ok", t.ok}, {"detail", t.detail}});
  }
  return json{{"id", n.id},
              {"subscription_id", n.notice.subscription_id},
              {"event", n.notice.event},
              {"run_id", n.notice.run_id.value_or(0)},
              {"happened_us", n.notice.happened_us},
              {"summary", n.notice.summary},
              {"state", std::string(store::NotificationStateName(n.state))},
              {"tries", tries},
              {"next_try_us", n.next_try_us}};
}

absl::StatusOr<notify::SubscribeRequest> SubscribeRequestOf(const Request& request) {
  CART_ASSIGN_OR_RETURN(json body,
                        ActionBody(request, {"events", "channel", "target", "run_id", "sweep",
                                             "lost_after_s", "stuck_factor", "slip_share"}));
  notify::SubscribeRequest ask;
  auto text = [&](const char* key, std::string* out) -> absl::Status {
    if (!body.contains(key)) return absl::OkStatus();
    if (!body[key].is_string()) return absl::InvalidArgumentError(StrCat(key, " must be a string"));
    *out = body[key].get<std::string>();
    return absl::OkStatus();
  };
  auto number = [&](const char* key, double* out) -> absl::Status {
    if (!body.contains(key)) return absl::OkStatus();
    if (!body[key].is_number()) return absl::InvalidArgumentError(StrCat(key, " must be a number"));
    *out = body[key].get<double>();
    return absl::OkStatus();
  };
  std::string channel;
  CART_RETURN_IF_ERROR(text("events", &ask.events));
  CART_RETURN_IF_ERROR(text("channel", &channel));
  CART_RETURN_IF_ERROR(text("target", &ask.target));
  CART_RETURN_IF_ERROR(text("sweep", &ask.sweep));
  std::optional<store::NotifyChannel> parsed = store::ParseNotifyChannel(channel);
  if (!parsed) {
    return absl::InvalidArgumentError(
        StrCat("channel '", ValidUtf8(channel.substr(0, 64)), "' is not webhook, slack or email"));
  }
  ask.channel = *parsed;
  double run_id = 0, lost_after_s = 0, stuck_factor = 0, slip_share = 0;
  CART_RETURN_IF_ERROR(number("run_id", &run_id));
  CART_RETURN_IF_ERROR(number("lost_after_s", &lost_after_s));
  CART_RETURN_IF_ERROR(number("stuck_factor", &stuck_factor));
  CART_RETURN_IF_ERROR(number("slip_share", &slip_share));
  if (run_id < 0 || run_id > 9e15 || run_id != std::floor(run_id)) {
    return absl::InvalidArgumentError("run_id must be a positive integer");
  }
  ask.run_id = static_cast<int64_t>(run_id);
  if (lost_after_s < 0 || lost_after_s > 1e9) {
    return absl::InvalidArgumentError("lost_after_s must be from 1 to 2592000 (30 days)");
  }
  if (lost_after_s > 0) ask.lost_after = absl::Seconds(lost_after_s);
  if (stuck_factor != 0) ask.stuck_factor = stuck_factor;
  if (slip_share != 0) ask.slip_share = slip_share;
  return ask;
}

}  // namespace

absl::StatusOr<json> NotifyApi(notify::Notifier& notifier, const Request& request,
                               const std::vector<std::string>& parts, const std::string& who) {
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  const size_t n = parts.size();
  if (parts[0] == "notifications" && n == 1 && get) {
    int64_t subscription = 0, limit = 50;
    for (auto [key, out] : {std::pair{"subscription", &subscription}, std::pair{"limit", &limit}}) {
      const std::string text = request.Query(key);
      if (text.empty()) continue;
      std::optional<int64_t> v = ParseInt64(text);
      if (!v || *v < 0) {
        return absl::InvalidArgumentError(
            StrCat(key, " '", ValidUtf8(text.substr(0, 32)), "' is not a whole number >= 0"));
      }
      *out = *v;
    }
    CART_ASSIGN_OR_RETURN(std::vector<store::NotificationRecord> log,
                          notifier.Log(who, subscription, false, limit));
    json out = json::array();
    for (const store::NotificationRecord& r : log) out.push_back(NotificationJson(r));
    return json{{"notifications", out}};
  }
  if (parts[0] == "subscriptions" && n == 1 && get) {
    CART_ASSIGN_OR_RETURN(std::vector<store::Subscription> subs, notifier.List(who, false));
    json out = json::array();
    for (const store::Subscription& s : subs) out.push_back(SubscriptionJson(s));
    return json{{"subscriptions", out}};
  }
  if (parts[0] == "subscriptions" && n == 1 && post) {
    CART_ASSIGN_OR_RETURN(notify::SubscribeRequest ask, SubscribeRequestOf(request));
    CART_ASSIGN_OR_RETURN(store::Subscription sub, notifier.Subscribe(who, ask));
    return SubscriptionJson(sub);
  }
  if (parts[0] == "subscriptions" && n == 3 && post) {
    std::optional<int64_t> id = ParseInt64(parts[1]);
    if (!id || *id <= 0) {
      return absl::InvalidArgumentError(StrCat(
          "subscription id '", ValidUtf8(parts[1].substr(0, 32)), "' is not a positive integer"));
    }
    CART_RETURN_IF_ERROR(ActionBody(request, {}).status());
    if (parts[2] == "remove") {
      CART_RETURN_IF_ERROR(notifier.Unsubscribe(who, *id));
      return json{{"removed", *id}};
    }
    if (parts[2] == "test") {
      CART_ASSIGN_OR_RETURN(int64_t notification, notifier.SendTest(who, *id));
      return json{{"notification_id", notification}};
    }
  }
  return absl::NotFoundError(
      StrCat("no API endpoint ", request.method, " ", request.path, " (see docs/dashboard.md)"));
}

}  // namespace cart::server::http
