#pragma once

// Notifier: tells subscribers what happened to their runs and sweeps (docs/operations.md
// "Notifications"). Two threads:
//
//   the scanner  reads the events table after its mark (every state change is an event row,
//                written in the change's own transaction) and runs the timed checks (lost, stuck,
//                leak suspected, expected finish slipped, verdict changed); each happening a
//                subscription wants becomes a notification in the outbox, written with the new
//                mark in one transaction (store::NotifyStore::Enqueue);
//   the sender   delivers due notifications (webhook, Slack, e-mail: delivery.h) and records each
//                try; a failure is retried with exponential backoff until give_up_after.
//
// So a cartd killed at any point loses nothing: an event not yet scanned is scanned after the
// restart (the mark did not move), a notification not yet delivered is still PENDING. A
// notification is delivered at least once; a kill between a delivery and its record repeats it
// with the same idempotency key (events.h IdempotencyKey) for the receiver to drop.
//
// Time: happenings and retries use the injected Clock; the threads pace in real time.
// Thread-safety: every method is thread-safe.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/notify/delivery.h"
#include "server/notify/events.h"
#include "store/run_store.h"

namespace cart::server {
class Scheduler;
}

namespace cart::server::notify {

struct NotifierOptions {
  // How often the scanner looks for new events and runs the timed checks (real time). Zero: no
  // threads; the owner calls Scan() and DeliverDue() (tests). Default 1 s.
  absl::Duration scan_interval = absl::Seconds(1);
  // A failed delivery is tried again after retry_base, then twice as long each time, at most
  // retry_max apart, and given up once give_up_after has passed since the notification was made.
  // Defaults 10 s, 1 h, 24 h.
  absl::Duration retry_base = absl::Seconds(10);
  absl::Duration retry_max = absl::Hours(1);
  absl::Duration give_up_after = absl::Hours(24);
  // "stuck" needs at least this long without progress, whatever the expected step time (progress
  // reaches cartd with heartbeats and metric batches, seconds apart). Default 2 min.
  absl::Duration stuck_floor = absl::Minutes(2);
  // The report's claims are decided again at most this often (they read every sweep of the
  // study), and only after a run ended. Default 1 min.
  absl::Duration verdict_interval = absl::Minutes(1);
  // How channels deliver (SMTP server, timeouts); delivery.h.
  DeliveryOptions delivery;
  // cartd's dashboard as subscribers reach it ("https://cart.lab.example"), linked from each
  // notification; empty: no link.
  std::string dashboard_url;
  // Replaces the real delivery (tests of the rules); empty: delivery.h's Deliver.
  std::function<Delivered(const store::Outgoing&)> deliver;
};

// What `cart notify add` asks for. Scope: run_id > 0, or sweep not empty, or neither (all runs
// of the caller's own sweeps).
struct SubscribeRequest {
  int64_t run_id = 0;
  std::string sweep;
  std::string events;  // "failed,lost" or "all" (events.h ParseEventList)
  store::NotifyChannel channel = store::NotifyChannel::kWebhook;
  std::string target;  // http(s) URL for webhook and slack; an e-mail address for email
  absl::Duration lost_after = absl::Minutes(10);
  double stuck_factor = 5;
  double slip_share = 0.25;
};

class Notifier {
 public:
  // `store`, `scheduler` and `clock` must outlive it. Starts the threads (unless scan_interval is
  // zero); the scanner's first mark, when the database has none, is the newest event, so that
  // history is not replayed.
  Notifier(store::RunStore* store, Scheduler* scheduler, Clock* clock, NotifierOptions options);
  // Stops and joins the threads; what is pending stays in the outbox for the next start.
  ~Notifier();
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // `who` subscribes. InvalidArgument naming the field: an unknown event, a webhook URL that is
  // not http(s), an address that is not one, an e-mail subscription when cartd has no SMTP
  // server, a limit out of range; NotFound for an unknown run or sweep.
  absl::StatusOr<store::Subscription> Subscribe(const std::string& who,
                                                const SubscribeRequest& request);
  // `who`'s subscriptions; every one's with `all` (admins only: PermissionDenied otherwise).
  absl::StatusOr<std::vector<store::Subscription>> List(const std::string& who, bool all);
  // NotFound; PermissionDenied for another's subscription unless `who` is an admin.
  absl::Status Unsubscribe(const std::string& who, int64_t id);
  // The notifications of `who`'s subscriptions (of one when subscription_id > 0), newest first,
  // with their tries; every one's for an admin with `all`.
  absl::StatusOr<std::vector<store::NotificationRecord>> Log(const std::string& who,
                                                             int64_t subscription_id, bool all,
                                                             int64_t limit);
  // Queues a "test" notification on subscription `id` at once (`cart notify test`), so that a
  // user sees their receiver get one; its id. Same errors as Unsubscribe.
  absl::StatusOr<int64_t> SendTest(const std::string& who, int64_t id);

  // One scan: new events and the timed checks, enqueued. Returns how many notifications it added.
  absl::StatusOr<int64_t> Scan();
  // Delivers what is due now, each once; returns how many were tried.
  absl::StatusOr<int64_t> DeliverDue();

 private:
  // The happenings of the events after the mark, and the new mark (unchanged when none);
  // `runs_ended`: a run reached a final state among them.
  absl::Status HappeningsFromEvents(std::vector<Happening>& out, int64_t& mark, bool& runs_ended);
  // Timed checks; each adds its happenings per subscription wanting them (the thresholds are the
  // subscription's), so they return notices directly.
  absl::Status CheckLost(const std::vector<store::Subscription>& subs,
                         std::vector<store::Notice>& out);
  absl::Status CheckStuck(const std::vector<store::Subscription>& subs,
                          std::vector<store::Notice>& out);
  absl::Status CheckLeaks(std::vector<Happening>& out);
  // The report's claims decided again (at most every verdict_interval, and only after a run
  // ended since the last time), each verdict against the last one seen.
  absl::Status CheckVerdicts(const std::vector<store::Subscription>& subs,
                             std::vector<Happening>& out,
                             std::vector<std::pair<std::string, std::string>>& marks,
                             bool runs_ended) ABSL_EXCLUSIVE_LOCKS_REQUIRED(scan_mu_);
  absl::Status CheckSlip(const std::vector<store::Subscription>& subs,
                         std::vector<store::Notice>& out,
                         std::vector<std::pair<std::string, std::string>>& marks);
  absl::StatusOr<std::map<int64_t, store::RunScope>> Scopes(std::vector<int64_t> run_ids);
  void ScanLoop();
  void SendLoop();
  int64_t NowMicros() const;
  absl::Status CheckOwner(const std::string& who, int64_t id, store::Subscription* out);

  // Constant after construction.
  store::RunStore* const store_;
  Scheduler* const scheduler_;
  Clock* const clock_;
  const NotifierOptions options_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;  // bumped when something may be due: wakes the sender
  // Deliveries whose try could not be recorded, by notification id: recorded, not sent, again.
  std::map<int64_t, Delivered> unrecorded_ ABSL_GUARDED_BY(mu_);
  absl::Mutex scan_mu_;  // one Scan at a time
  // CheckVerdicts: when the claims were last decided (clock µs) and whether a run ended since.
  int64_t verdicts_at_us_ ABSL_GUARDED_BY(scan_mu_) = 0;
  bool verdicts_due_ ABSL_GUARDED_BY(scan_mu_) = true;

  std::thread scan_thread_;
  std::thread send_thread_;
};

}  // namespace cart::server::notify
