#include "server/notify/events.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace cart::server::notify {
namespace {

using nlohmann::json;

// RFC 3339, UTC, seconds.
std::string Rfc3339(int64_t us) {
  const std::time_t t = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// A sweep name as one part of a dashboard address: letters, digits and "-._~" as they are.
std::string PercentEncoded(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

json Payload(const store::NotificationRecord& n) {
  json j = json::parse(n.notice.payload, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

}  // namespace

const std::vector<std::string>& EventNames() {
  static const std::vector<std::string>* const kNames = new std::vector<std::string>{
      "failed",    "lost",           "stuck",           "diverged",       "leak_suspected",
      "preempted", "sweep_finished", "verdict_changed", "finish_slipped",
  };
  return *kNames;
}

bool IsSweepEvent(const std::string& event) {
  return event == "sweep_finished" || event == "verdict_changed" || event == "finish_slipped";
}

absl::StatusOr<std::vector<std::string>> ParseEventList(std::string_view text) {
  if (Trim(text) == "all") return EventNames();
  std::vector<std::string> wanted;
  for (const std::string& part : Split(text, ',')) {
    const std::string name(Trim(part));
    if (name.empty()) continue;
    if (!Contains(EventNames(), name)) {
      return absl::InvalidArgumentError(
          StrCat("unknown event '", name, "' (known: ", StrJoin(EventNames(), ", "), ", or all)"));
    }
    wanted.push_back(name);
  }
  if (wanted.empty()) {
    return absl::InvalidArgumentError(
        StrCat("no event named (known: ", StrJoin(EventNames(), ", "), ", or all)"));
  }
  std::vector<std::string> out;
  for (const std::string& name : EventNames()) {
    if (Contains(wanted, name)) out.push_back(name);
  }
  return out;
}

bool Wants(const store::Subscription& sub, const Happening& h) {
  if (!Contains(sub.events, h.event)) return false;
  switch (sub.scope) {
    case store::SubscriptionScope::kRun:
      return h.run && h.run->run_id == sub.run_id;
    case store::SubscriptionScope::kSweep:
      if (h.sweep_id != 0) return h.sweep_id == sub.sweep_id;
      return std::find(h.sweep_ids.begin(), h.sweep_ids.end(), sub.sweep_id) != h.sweep_ids.end();
    case store::SubscriptionScope::kMine:
      if (h.sweep_id != 0) return h.owner == sub.owner;
      return Contains(h.sweep_owners, sub.owner);
  }
  return false;
}

store::Notice ToNotice(const store::Subscription& sub, const Happening& h,
                       const std::string& dashboard_url) {
  store::Notice n;
  n.subscription_id = sub.id;
  n.key = h.key;
  n.event = h.event;
  n.happened_us = h.at_us;
  n.summary = h.summary;
  json j = {{"event", h.event},
            {"summary", h.summary},
            {"happened_at", Rfc3339(h.at_us)},
            {"subscription", sub.id}};
  if (h.run) {
    n.run_id = h.run->run_id;
    j["run"] = {{"id", h.run->run_id},
                {"name", h.run->run_name},
                {"state", std::string(store::RunStateName(h.run->state))}};
    if (!dashboard_url.empty()) j["url"] = StrCat(dashboard_url, "/#/run/", h.run->run_id);
  }
  if (h.sweep_id != 0) {
    n.sweep_id = h.sweep_id;
    j["sweep"] = {{"id", h.sweep_id}, {"name", h.sweep_name}, {"owner", h.owner}};
    if (!dashboard_url.empty() && !h.run) {
      j["url"] = StrCat(dashboard_url, "/#/sweep/", PercentEncoded(h.sweep_name));
    }
  }
  json details = json::object();
  for (const auto& [k, v] : h.details) details[k] = v;
  j["details"] = details;
  n.payload = j.dump();
  return n;
}

std::string IdempotencyKey(const store::NotificationRecord& n) {
  std::string key = StrCat("cart-", n.notice.subscription_id, "-", n.notice.key);
  std::replace(key.begin(), key.end(), '/', '-');
  return key;
}

std::string SlackBody(const store::NotificationRecord& n) {
  std::string text = StrCat("*CART Lab:* ", n.notice.summary);
  const json j = Payload(n);
  if (j.contains("details") && j["details"].is_object()) {
    for (const auto& [k, v] : j["details"].items()) {
      text += StrCat("\n• ", k, ": ", v.is_string() ? v.get<std::string>() : v.dump());
    }
  }
  if (j.contains("url") && j["url"].is_string()) text += StrCat("\n", j["url"].get<std::string>());
  return json{{"text", text}}.dump();
}

std::string MailSubject(const store::NotificationRecord& n) {
  return StrCat("[CART Lab] ", n.notice.summary);
}

std::string MailText(const store::NotificationRecord& n) {
  const json j = Payload(n);
  std::string text = StrCat(n.notice.summary, "\n\n");
  text += StrCat("event: ", n.notice.event, "\n");
  text += StrCat("happened: ", Rfc3339(n.notice.happened_us), "\n");
  if (j.contains("details") && j["details"].is_object()) {
    for (const auto& [k, v] : j["details"].items()) {
      text += StrCat(k, ": ", v.is_string() ? v.get<std::string>() : v.dump(), "\n");
    }
  }
  if (j.contains("url") && j["url"].is_string()) {
    text += StrCat("\n", j["url"].get<std::string>(), "\n");
  }
  text += StrCat("\nSubscription ", n.notice.subscription_id, " sent this; `cart notify rm ",
                 n.notice.subscription_id, "` stops it.\n");
  return text;
}

}  // namespace cart::server::notify
