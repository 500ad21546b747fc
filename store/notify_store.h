#pragma once

// NotifyStore: what notifications keep in the database (docs/operations.md "Notifications"):
// subscriptions, the outbox of notifications waiting for delivery with every try, and the
// notifier's marks (its cursor over the events table, the last verdict it saw of a claim, a
// sweep's expected finish). It shares the RunStore's writer and readers (RunStore::notify()), so
// its writes are atomic and durable as the RunStore's are (run_store.h, "Durability").
//
// Delivery is at least once: Enqueue writes a notification once per (subscription, key), whatever
// number of times the notifier derives it (after a restart it derives again from its last mark);
// a notification stays PENDING until RecordTry says it was delivered or given up, so a cartd
// killed between the write and the delivery delivers it after its restart.
//
// Errors: InvalidArgument for malformed input (naming the field), NotFound for an unknown
// subscription, run or sweep, PermissionDenied for another owner's subscription. Thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/types.h"

namespace cart::store {

namespace internal {
class Writer;
class ReaderPool;
}  // namespace internal

// What a subscription watches: one run, one sweep, or every run of the sweeps its owner submitted.
enum class SubscriptionScope { kRun, kSweep, kMine };
std::string_view SubscriptionScopeName(SubscriptionScope scope);  // "run", "sweep", "mine"
// Where it delivers: a JSON POST, a Slack-compatible incoming webhook, an e-mail over SMTP.
enum class NotifyChannel { kWebhook, kSlack, kEmail };
std::string_view NotifyChannelName(NotifyChannel channel);  // "webhook", "slack", "email"
std::optional<NotifyChannel> ParseNotifyChannel(std::string_view name);

struct Subscription {
  int64_t id = 0;
  std::string owner;  // the caller that made it ("user:alice"); only it (or an admin) sees it
  SubscriptionScope scope = SubscriptionScope::kMine;
  int64_t run_id = 0;      // kRun: the run
  int64_t sweep_id = 0;    // kSweep: the sweep; kRun: the run's sweep
  std::string sweep_name;  // of sweep_id, as read back
  std::string run_name;    // kRun: "<sweep>/<name>", as read back
  // The event names it is told of (server/notify/events.h checks them); at least one.
  std::vector<std::string> events;
  NotifyChannel channel = NotifyChannel::kWebhook;
  // The webhook URL or the e-mail address. A webhook URL carries its secret (Slack's does), so
  // nothing outside the notifier shows it whole (server/notify/senders.h RedactUrl).
  std::string target;
  int64_t lost_after_us = 0;  // "lost": not running again this long after the lease expired; > 0
  double stuck_factor = 0;    // "stuck": no progress for this many expected step times; > 1
  double slip_share = 0;      // "slipped": expected finish later by this share of what was left
  int64_t created_us = 0;
};

// A notification the notifier derived from what happened, before it is stored.
struct Notice {
  int64_t subscription_id = 0;
  // What happened, once: a second Notice with the same subscription and key is not stored again
  // ("failed/run/12/event/345", "stuck/run/12/attempt/2/step/480").
  std::string key;
  std::string event;  // the event name
  std::optional<int64_t> run_id;
  std::optional<int64_t> sweep_id;
  int64_t happened_us = 0;
  std::string summary;  // one line: a mail's subject, a Slack message's first line
  std::string payload;  // the JSON object a webhook receives
};

struct NotificationTry {
  int64_t number = 0;  // 1, 2, ...
  int64_t at_us = 0;
  bool ok = false;
  std::string detail;  // "HTTP 200", "SMTP ... refused RCPT TO:<x>: 550 ...", "connection refused"
};

enum class NotificationState { kPending, kDelivered, kGaveUp };
std::string_view NotificationStateName(NotificationState state);  // PENDING, DELIVERED, GAVE_UP

struct NotificationRecord {
  int64_t id = 0;
  Notice notice;
  int64_t created_us = 0;
  NotificationState state = NotificationState::kPending;
  int64_t tries = 0;
  int64_t next_try_us = 0;           // PENDING: not before
  std::optional<int64_t> done_us;    // DELIVERED / GAVE_UP: when
  std::vector<NotificationTry> log;  // NotificationLog only: every try, oldest first
};

// A due notification with the subscription that delivers it.
struct Outgoing {
  NotificationRecord notification;
  Subscription subscription;
};

struct NotificationLogRequest {
  std::string owner;            // only this owner's subscriptions; empty: every one (admins)
  int64_t subscription_id = 0;  // 0: all of them
  int64_t limit = 50;           // newest first; 1..1000
};

// A lease that expired, and when the run's next attempt started (none yet: nullopt).
struct LostAttempt {
  int64_t run_id = 0;
  int64_t attempt = 0;
  std::string worker_id;
  int64_t expired_us = 0;  // when cartd took the lease back
  std::optional<int64_t> next_started_us;
};

// A run whose latest value of a metric is > 0 ("leak_suspected"), and the step it came at.
struct FlaggedRun {
  int64_t run_id = 0;
  int64_t step = 0;
  double value = 0;
  int64_t wall_time_us = 0;  // when the worker logged it
};

// Where a run belongs, for matching it against subscriptions.
struct RunScope {
  int64_t run_id = 0;
  std::string run_name;  // "<sweep>/<name>"
  int64_t sweep_id = 0;
  std::string sweep_name;
  std::string owner;  // who submitted the sweep
  RunState state = RunState::kQueued;
  bool diverged = false;  // it failed on a non-finite loss and was not resumed since
};

class NotifyStore {
 public:
  NotifyStore(internal::Writer* writer, internal::ReaderPool* readers)
      : writer_(writer), readers_(readers) {}

  // ---- Subscriptions

  // Stores `sub` (its id and names are ignored and filled in). NotFound for a run or sweep that
  // does not exist; InvalidArgument for no events, an empty target or owner, or a limit out of
  // its range (the field named).
  absl::StatusOr<Subscription> AddSubscription(Subscription sub, int64_t now_us);
  // The subscriptions not removed, by id: `owner`'s, or every one when `owner` is empty.
  absl::StatusOr<std::vector<Subscription>> ListSubscriptions(const std::string& owner);
  // Removes one: it gets no new notification, and its pending ones are given up ("subscription
  // removed"); what was delivered stays in the log. `owner` empty: any owner's (an admin).
  // NotFound for an unknown or removed id; PermissionDenied for another owner's.
  absl::Status RemoveSubscription(int64_t id, const std::string& owner, int64_t now_us);

  // ---- The notifier

  // Events with id > after_id, oldest first, at most `limit`.
  absl::StatusOr<std::vector<EventRecord>> EventsAfter(int64_t after_id, int64_t limit);
  // The id of the newest event (0 when none): where a notifier with no mark starts, so that
  // subscribing never replays history.
  absl::StatusOr<int64_t> LatestEventId();
  // The id of the newest event of the sweep or of one of its runs; 0 when none.
  absl::StatusOr<int64_t> LatestSweepEvent(int64_t sweep_id);
  // A mark's value; nullopt when never set.
  absl::StatusOr<std::optional<std::string>> Mark(const std::string& name);
  // Stores the notices (a notice whose subscription and key are stored already, or whose
  // subscription was removed, is skipped) and sets the marks, in one transaction. Returns how
  // many notifications were added.
  absl::StatusOr<int64_t> Enqueue(const std::vector<Notice>& notices,
                                  const std::vector<std::pair<std::string, std::string>>& marks,
                                  int64_t now_us);
  // PENDING notifications due at `now_us` (next_try_us <= now), soonest first, at most `limit`.
  absl::StatusOr<std::vector<Outgoing>> Due(int64_t now_us, int64_t limit);
  // The earliest next_try_us of a PENDING notification; nullopt when none.
  absl::StatusOr<std::optional<int64_t>> NextDue();
  // Records one delivery try: `ok` makes it DELIVERED; otherwise it stays PENDING until
  // `retry_at_us`, or is GAVE_UP when that is nullopt. NotFound for an unknown id;
  // FailedPrecondition when it is no longer PENDING.
  absl::Status RecordTry(int64_t notification_id, int64_t at_us, bool ok, const std::string& detail,
                         std::optional<int64_t> retry_at_us);
  // Notifications with their tries, newest first (`cart notify log`).
  absl::StatusOr<std::vector<NotificationRecord>> NotificationLog(
      const NotificationLogRequest& request);

  // What the timed checks read (server/notify/notifier.h).
  // Leases that expired at or after `since_us`, oldest first.
  absl::StatusOr<std::vector<LostAttempt>> LostAttempts(int64_t since_us);
  // Runs whose latest value of `metric` is > 0, reported at or after `since_us` (worker time).
  absl::StatusOr<std::vector<FlaggedRun>> FlaggedRuns(const std::string& metric, int64_t since_us);
  // Each run of `run_ids` that exists with its sweep and owner, by run id.
  absl::StatusOr<std::vector<RunScope>> RunScopes(const std::vector<int64_t>& run_ids);

 private:
  internal::Writer* const writer_;
  internal::ReaderPool* const readers_;
};

}  // namespace cart::store
