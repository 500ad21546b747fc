#pragma once

// What a subscription may be told of (docs/operations.md "Notifications"): the event names, a
// happening as the notifier derives it, whether a subscription wants it, and how it reads on each
// channel. Pure functions: the notifier (notifier.h) feeds them what the store and the scheduler
// say, and they decide; tested without a server.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "store/notify_store.h"
#include "store/types.h"

namespace cart::server::notify {

// The events, in the order `cart notify add --help` lists them:
//   failed          a run ended FAILED (after its last attempt)
//   lost            a run's lease expired (its worker died or was cut off) and the run was not
//                   running again within the subscription's lost_after
//   stuck           a running run made no progress for stuck_factor times its expected step time
//   diverged        a run failed on a non-finite loss
//   leak_suspected  a run's leak guard reported a suspected leak (metric leak_suspected > 0)
//   preempted       a run handed its worker back for waiting work of a higher priority or share
//   sweep_finished  every run of a sweep has ended (succeeded, failed or cancelled)
//   verdict_changed a claim of the report over the study's sweeps changed its verdict
//   finish_slipped  a sweep's expected finish moved later by more than slip_share of the time
//                   that was left
const std::vector<std::string>& EventNames();

// Whether the event is about a sweep or claim (sweep_finished, verdict_changed,
// finish_slipped), which a subscription to one run cannot get.
bool IsSweepEvent(const std::string& event);

// "failed,lost" or "all" into event names, each once, in EventNames' order. InvalidArgument
// naming an unknown name and the known ones; an empty list is refused too.
absl::StatusOr<std::vector<std::string>> ParseEventList(std::string_view text);

// Something that happened, which subscriptions may want.
struct Happening {
  std::string event;  // one of EventNames()
  // Unique per happening, stable when derived again ("failed/run/12/event/345").
  std::string key;
  int64_t at_us = 0;
  std::optional<store::RunScope> run;  // a run's happening: the run, its sweep and owner
  // The sweep (a run's, or a sweep's own happening) and who submitted it.
  int64_t sweep_id = 0;
  std::string sweep_name;
  std::string owner;
  // A claim's happening: the sweeps its verdict reads, by id (a subscription to any of them, or
  // to all of its owner's runs when it owns one, wants it).
  std::vector<int64_t> sweep_ids;
  std::vector<std::string> sweep_owners;
  std::string summary;                         // one line, with the run or sweep named
  std::map<std::string, std::string> details;  // key -> value, shown under the summary
};

// Whether `sub` wants `h`: it names h's event and h is in its scope (its run; a run of its sweep
// or the sweep itself; a run or sweep its owner submitted).
bool Wants(const store::Subscription& sub, const Happening& h);

// The stored form of h for `sub` (key, payload JSON, summary). `dashboard_url`, when not empty,
// is cartd's public dashboard address, linked from the payload.
store::Notice ToNotice(const store::Subscription& sub, const Happening& h,
                       const std::string& dashboard_url);

// The idempotency key of a notification, the same on every try: receivers drop a repeat.
std::string IdempotencyKey(const store::NotificationRecord& n);

// A Slack incoming webhook's body: {"text": summary and details}.
std::string SlackBody(const store::NotificationRecord& n);
// A mail's subject and plain-text body.
std::string MailSubject(const store::NotificationRecord& n);
std::string MailText(const store::NotificationRecord& n);

}  // namespace cart::server::notify
