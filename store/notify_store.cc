// NotifyStore: subscriptions, the notification outbox and the notifier's marks (notify_store.h).

#include "store/notify_store.h"

#include <array>
#include <cmath>

#include "common/status.h"
#include "common/strings.h"
#include "store/internal/records.h"
#include "store/internal/sql.h"
#include "store/internal/writer.h"
#include "store/internal/writes.h"

namespace cart::store {

using internal::Database;
using internal::Exec;
using internal::ReadSnapshot;
using internal::WriteContext;

namespace {

constexpr char kInsertSubscription[] =
    "INSERT INTO subscriptions(owner, scope, run_id, sweep_id, events, channel, target, "
    "lost_after_us, stuck_factor, slip_share, created_us) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kSubscriptionColumns[] =
    "SELECT s.id, s.owner, s.scope, s.run_id, coalesce(s.sweep_id, r.sweep_id), "
    "coalesce(sw.name, rs.name, ''), coalesce(rs.name || '/' || r.name, ''), s.events, s.channel, "
    "s.target, s.lost_after_us, s.stuck_factor, s.slip_share, s.created_us "
    "FROM subscriptions AS s LEFT JOIN runs AS r ON r.id = s.run_id "
    "LEFT JOIN sweeps AS rs ON rs.id = r.sweep_id LEFT JOIN sweeps AS sw ON sw.id = s.sweep_id ";
constexpr char kSelectOwnSubscriptions[] =
    "WHERE s.removed_us IS NULL AND (?1 = '' OR s.owner = ?1) ORDER BY s.id";
constexpr char kSelectSubscription[] = "WHERE s.id = ?";
constexpr char kSelectSubscriptionOwner[] =
    "SELECT owner, removed_us FROM subscriptions WHERE id = ?";
constexpr char kRemoveSubscription[] = "UPDATE subscriptions SET removed_us = ? WHERE id = ?";
constexpr char kSelectPendingOf[] =
    "SELECT id, tries FROM notifications WHERE subscription_id = ? AND state = 'PENDING' "
    "ORDER BY id";
constexpr char kSweepExists[] = "SELECT 1 FROM sweeps WHERE id = ?";

constexpr char kSelectEventsAfter[] =
    "SELECT " CART_EVENT_COLUMNS " FROM events WHERE id > ? ORDER BY id LIMIT ?";
constexpr char kSelectLatestEvent[] = "SELECT coalesce(max(id), 0) FROM events";
constexpr char kSelectLatestSweepEvent[] =
    "SELECT max(coalesce((SELECT max(e.id) FROM events AS e WHERE e.sweep_id = ?1), 0), "
    "coalesce((SELECT max(e.id) FROM runs AS r JOIN events AS e ON e.run_id = r.id "
    "WHERE r.sweep_id = ?1), 0))";
constexpr char kSelectMark[] = "SELECT value FROM notify_marks WHERE name = ?";
constexpr char kUpsertMark[] =
    "INSERT INTO notify_marks(name, value, at_us) VALUES(?1, ?2, ?3) "
    "ON CONFLICT(name) DO UPDATE SET value = ?2, at_us = ?3";
constexpr char kInsertNotification[] =
    "INSERT INTO notifications(subscription_id, key, event, run_id, sweep_id, happened_us, "
    "summary, payload, created_us, state, next_try_us) "
    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'PENDING', ?9 "
    "FROM subscriptions WHERE id = ?1 AND removed_us IS NULL "
    "ON CONFLICT(subscription_id, key) DO NOTHING";
constexpr char kNotificationColumns[] =
    "SELECT n.id, n.subscription_id, n.key, n.event, n.run_id, n.sweep_id, n.happened_us, "
    "n.summary, n.payload, n.created_us, n.state, n.tries, n.next_try_us, n.done_us "
    "FROM notifications AS n ";
constexpr char kSelectDue[] =
    "WHERE n.state = 'PENDING' AND n.next_try_us <= ? ORDER BY n.next_try_us, n.id LIMIT ?";
constexpr char kSelectNextDue[] =
    "SELECT min(next_try_us) FROM notifications WHERE state = 'PENDING'";
constexpr char kSelectLog[] =
    "JOIN subscriptions AS s ON s.id = n.subscription_id "
    "WHERE (?1 = '' OR s.owner = ?1) AND (?2 = 0 OR n.subscription_id = ?2) "
    "ORDER BY n.id DESC LIMIT ?3";
constexpr char kSelectTries[] =
    "SELECT try, at_us, ok, detail FROM notification_tries WHERE notification_id = ? ORDER BY try";
constexpr char kSelectNotificationState[] = "SELECT state, tries FROM notifications WHERE id = ?";
constexpr char kInsertTry[] =
    "INSERT INTO notification_tries(notification_id, try, at_us, ok, detail) "
    "VALUES(?, ?, ?, ?, ?)";
constexpr char kUpdateNotification[] =
    "UPDATE notifications SET state = ?, tries = ?, next_try_us = ?, done_us = ? WHERE id = ?";

constexpr char kSelectLost[] =
    "SELECT a.run_id, a.attempt, a.worker_id, a.ended_us, "
    "(SELECT min(b.started_us) FROM attempts AS b WHERE b.run_id = a.run_id "
    " AND b.attempt > a.attempt AND b.started_us IS NOT NULL) "
    "FROM attempts AS a WHERE a.outcome = 'LOST' AND a.ended_us >= ? "
    "ORDER BY a.ended_us, a.run_id, a.attempt";
constexpr char kSelectFlagged[] =
    "SELECT s.run_id, s.latest_step, s.latest_value, s.latest_wall_time_us FROM run_summaries AS s "
    "JOIN metric_names AS m ON m.id = s.name_id "
    "WHERE m.name = ? AND s.latest_value > 0 AND s.latest_wall_time_us >= ? ORDER BY s.run_id";
constexpr char kSelectRunScope[] =
    "SELECT r.id, sw.name || '/' || r.name, sw.id, sw.name, sw.created_by, r.status, "
    "r.diverged_step IS NOT NULL FROM runs AS r JOIN sweeps AS sw ON sw.id = r.sweep_id "
    "WHERE r.id = ?";

constexpr std::array<std::pair<SubscriptionScope, std::string_view>, 3> kScopeNames = {{
    {SubscriptionScope::kRun, "run"},
    {SubscriptionScope::kSweep, "sweep"},
    {SubscriptionScope::kMine, "mine"},
}};
constexpr std::array<std::pair<NotifyChannel, std::string_view>, 3> kChannelNames = {{
    {NotifyChannel::kWebhook, "webhook"},
    {NotifyChannel::kSlack, "slack"},
    {NotifyChannel::kEmail, "email"},
}};
constexpr std::array<std::pair<NotificationState, std::string_view>, 3> kStateNames = {{
    {NotificationState::kPending, "PENDING"},
    {NotificationState::kDelivered, "DELIVERED"},
    {NotificationState::kGaveUp, "GAVE_UP"},
}};

template <typename Enum, size_t N>
std::string_view NameIn(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum e) {
  for (const auto& [value, name] : names) {
    if (value == e) return name;
  }
  return "unknown";
}
template <typename Enum, size_t N>
std::optional<Enum> ParseIn(const std::array<std::pair<Enum, std::string_view>, N>& names,
                            std::string_view text) {
  for (const auto& [value, name] : names) {
    if (name == text) return value;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<Subscription>> LoadSubscriptions(
    Database& db, const std::string& where, const std::function<void(internal::Statement&)>& bind) {
  const std::string sql = StrCat(kSubscriptionColumns, where);
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(sql.c_str()));
  bind(*select);
  std::vector<Subscription> out;
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
    Subscription s;
    s.id = cur.ColumnInt64(0);
    s.owner = cur.ColumnText(1);
    s.scope = ParseIn(kScopeNames, cur.ColumnText(2)).value_or(SubscriptionScope::kMine);
    s.run_id = cur.ColumnOptionalInt64(3).value_or(0);
    s.sweep_id = cur.ColumnOptionalInt64(4).value_or(0);
    s.sweep_name = cur.ColumnText(5);
    s.run_name = cur.ColumnText(6);
    for (const std::string& e : Split(cur.ColumnText(7), ',')) {
      if (!e.empty()) s.events.emplace_back(e);
    }
    s.channel = ParseIn(kChannelNames, cur.ColumnText(8)).value_or(NotifyChannel::kWebhook);
    s.target = cur.ColumnText(9);
    s.lost_after_us = cur.ColumnInt64(10);
    s.stuck_factor = cur.ColumnDouble(11);
    s.slip_share = cur.ColumnDouble(12);
    s.created_us = cur.ColumnInt64(13);
    out.push_back(std::move(s));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<NotificationRecord>> LoadNotifications(
    Database& db, const std::string& where, const std::function<void(internal::Statement&)>& bind) {
  const std::string sql = StrCat(kNotificationColumns, where);
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(sql.c_str()));
  bind(*select);
  std::vector<NotificationRecord> out;
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
    NotificationRecord n;
    n.id = cur.ColumnInt64(0);
    n.notice.subscription_id = cur.ColumnInt64(1);
    n.notice.key = cur.ColumnText(2);
    n.notice.event = cur.ColumnText(3);
    n.notice.run_id = cur.ColumnOptionalInt64(4);
    n.notice.sweep_id = cur.ColumnOptionalInt64(5);
    n.notice.happened_us = cur.ColumnInt64(6);
    n.notice.summary = cur.ColumnText(7);
    n.notice.payload = cur.ColumnText(8);
    n.created_us = cur.ColumnInt64(9);
    n.state = ParseIn(kStateNames, cur.ColumnText(10)).value_or(NotificationState::kPending);
    n.tries = cur.ColumnInt64(11);
    n.next_try_us = cur.ColumnInt64(12);
    n.done_us = cur.ColumnOptionalInt64(13);
    out.push_back(std::move(n));
    return absl::OkStatus();
  }));
  return out;
}

absl::Status ValidateSubscription(const Subscription& sub) {
  if (sub.owner.empty()) return absl::InvalidArgumentError("subscription: owner is empty");
  if (sub.events.empty()) return absl::InvalidArgumentError("subscription: no events given");
  for (const std::string& e : sub.events) {
    if (e.empty() || e.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(StrCat("subscription: malformed event name '", e, "'"));
    }
  }
  if (sub.target.empty()) return absl::InvalidArgumentError("subscription: target is empty");
  if (sub.lost_after_us <= 0) {
    return absl::InvalidArgumentError(
        StrCat("subscription: lost_after must be > 0, got ", sub.lost_after_us, " µs"));
  }
  if (!(sub.stuck_factor > 1) || !std::isfinite(sub.stuck_factor)) {
    return absl::InvalidArgumentError(
        StrCat("subscription: stuck_factor must be > 1, got ", sub.stuck_factor));
  }
  if (!(sub.slip_share > 0) || !std::isfinite(sub.slip_share)) {
    return absl::InvalidArgumentError(
        StrCat("subscription: slip_share must be > 0, got ", sub.slip_share));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view SubscriptionScopeName(SubscriptionScope scope) {
  return NameIn(kScopeNames, scope);
}
std::string_view NotifyChannelName(NotifyChannel channel) { return NameIn(kChannelNames, channel); }
std::optional<NotifyChannel> ParseNotifyChannel(std::string_view name) {
  return ParseIn(kChannelNames, name);
}
std::string_view NotificationStateName(NotificationState state) {
  return NameIn(kStateNames, state);
}

absl::StatusOr<Subscription> NotifyStore::AddSubscription(Subscription sub, int64_t now_us) {
  CART_RETURN_IF_ERROR(ValidateSubscription(sub));
  return writer_->Run<Subscription>([&](WriteContext& ctx) -> absl::StatusOr<Subscription> {
    Database& db = ctx.db();
    std::optional<int64_t> run_id, sweep_id;
    if (sub.scope == SubscriptionScope::kRun) {
      CART_RETURN_IF_ERROR(internal::RequireRun(db, sub.run_id));
      run_id = sub.run_id;
    } else if (sub.scope == SubscriptionScope::kSweep) {
      CART_ASSIGN_OR_RETURN(auto exists, db.Cached(kSweepExists));
      exists->BindAll(sub.sweep_id);
      CART_ASSIGN_OR_RETURN(bool row, exists->Step());
      if (!row) return absl::NotFoundError(StrCat("sweep ", sub.sweep_id, " does not exist"));
      sweep_id = sub.sweep_id;
    }
    CART_RETURN_IF_ERROR(Exec(db, kInsertSubscription, sub.owner, SubscriptionScopeName(sub.scope),
                              run_id, sweep_id, StrJoin(sub.events, ","),
                              NotifyChannelName(sub.channel), sub.target, sub.lost_after_us,
                              sub.stuck_factor, sub.slip_share, now_us));
    const int64_t id = db.LastInsertRowId();
    CART_ASSIGN_OR_RETURN(
        std::vector<Subscription> rows,
        LoadSubscriptions(db, kSelectSubscription, [&](internal::Statement& s) { s.BindAll(id); }));
    if (rows.empty()) return absl::InternalError("subscription vanished after its insert");
    return rows.front();
  });
}

absl::StatusOr<std::vector<Subscription>> NotifyStore::ListSubscriptions(const std::string& owner) {
  return ReadSnapshot<std::vector<Subscription>>(*readers_, [&](Database& db) {
    return LoadSubscriptions(db, kSelectOwnSubscriptions,
                             [&](internal::Statement& s) { s.BindAll(owner); });
  });
}

absl::Status NotifyStore::RemoveSubscription(int64_t id, const std::string& owner, int64_t now_us) {
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        Database& db = ctx.db();
        {
          CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectSubscriptionOwner));
          select->BindAll(id);
          CART_ASSIGN_OR_RETURN(bool row, select->Step());
          if (!row || !select->ColumnIsNull(1)) {
            return absl::NotFoundError(StrCat("subscription ", id, " does not exist"));
          }
          const std::string whose = select->ColumnText(0);
          if (!owner.empty() && whose != owner) {
            return absl::PermissionDeniedError(
                StrCat(owner, " may not remove subscription ", id, ": it belongs to ", whose));
          }
        }
        CART_RETURN_IF_ERROR(Exec(db, kRemoveSubscription, now_us, id));
        std::vector<std::pair<int64_t, int64_t>> pending;
        {
          CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectPendingOf));
          select->BindAll(id);
          CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) {
            pending.emplace_back(cur.ColumnInt64(0), cur.ColumnInt64(1));
          }));
        }
        for (const auto& [notification, tries] : pending) {
          CART_RETURN_IF_ERROR(
              Exec(db, kInsertTry, notification, tries + 1, now_us, 0, "subscription removed"));
          CART_RETURN_IF_ERROR(
              Exec(db, kUpdateNotification, "GAVE_UP", tries + 1, now_us, now_us, notification));
        }
        return true;
      })
      .status();
}

absl::StatusOr<std::vector<EventRecord>> NotifyStore::EventsAfter(int64_t after_id, int64_t limit) {
  using Out = std::vector<EventRecord>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectEventsAfter));
    select->BindAll(after_id, limit);
    Out out;
    CART_RETURN_IF_ERROR(
        select->ForEachRow([&](const auto& cur) { out.push_back(internal::ReadEvent(cur)); }));
    return out;
  });
}

absl::StatusOr<int64_t> NotifyStore::LatestEventId() {
  return ReadSnapshot<int64_t>(*readers_, [&](Database& db) -> absl::StatusOr<int64_t> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectLatestEvent));
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    return row ? select->ColumnInt64(0) : 0;
  });
}

absl::StatusOr<int64_t> NotifyStore::LatestSweepEvent(int64_t sweep_id) {
  return ReadSnapshot<int64_t>(*readers_, [&](Database& db) -> absl::StatusOr<int64_t> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectLatestSweepEvent));
    select->BindAll(sweep_id);
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    return row ? select->ColumnInt64(0) : 0;
  });
}

absl::StatusOr<std::optional<std::string>> NotifyStore::Mark(const std::string& name) {
  using Out = std::optional<std::string>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectMark));
    select->BindAll(name);
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    if (!row) return Out();
    return Out(select->ColumnText(0));
  });
}

absl::StatusOr<int64_t> NotifyStore::Enqueue(
    const std::vector<Notice>& notices,
    const std::vector<std::pair<std::string, std::string>>& marks, int64_t now_us) {
  for (const Notice& n : notices) {
    if (n.key.empty() || n.event.empty()) {
      return absl::InvalidArgumentError(
          StrCat("notice for subscription ", n.subscription_id, ": empty key or event"));
    }
  }
  return writer_->Run<int64_t>([&](WriteContext& ctx) -> absl::StatusOr<int64_t> {
    Database& db = ctx.db();
    int64_t added = 0;
    for (const Notice& n : notices) {
      CART_RETURN_IF_ERROR(Exec(db, kInsertNotification, n.subscription_id, n.key, n.event,
                                n.run_id, n.sweep_id, n.happened_us, n.summary, n.payload, now_us));
      added += db.Changes();
    }
    for (const auto& [name, value] : marks) {
      CART_RETURN_IF_ERROR(Exec(db, kUpsertMark, name, value, now_us));
    }
    return added;
  });
}

absl::StatusOr<std::vector<Outgoing>> NotifyStore::Due(int64_t now_us, int64_t limit) {
  using Out = std::vector<Outgoing>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(std::vector<NotificationRecord> due,
                          LoadNotifications(db, kSelectDue, [&](internal::Statement& s) {
                            s.BindAll(now_us, limit);
                          }));
    Out out;
    for (NotificationRecord& n : due) {
      const int64_t sub_id = n.notice.subscription_id;
      CART_ASSIGN_OR_RETURN(std::vector<Subscription> subs,
                            LoadSubscriptions(db, kSelectSubscription,
                                              [&](internal::Statement& s) { s.BindAll(sub_id); }));
      if (subs.empty()) return absl::InternalError(StrCat("subscription ", sub_id, " is missing"));
      out.push_back(Outgoing{std::move(n), std::move(subs.front())});
    }
    return out;
  });
}

absl::StatusOr<std::optional<int64_t>> NotifyStore::NextDue() {
  using Out = std::optional<int64_t>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectNextDue));
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    if (!row) return Out();
    return select->ColumnOptionalInt64(0);
  });
}

absl::Status NotifyStore::RecordTry(int64_t notification_id, int64_t at_us, bool ok,
                                    const std::string& detail, std::optional<int64_t> retry_at_us) {
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        Database& db = ctx.db();
        int64_t tries = 0;
        {
          CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectNotificationState));
          select->BindAll(notification_id);
          CART_ASSIGN_OR_RETURN(bool row, select->Step());
          if (!row) {
            return absl::NotFoundError(StrCat("notification ", notification_id, " does not exist"));
          }
          if (select->ColumnText(0) != "PENDING") {
            return absl::FailedPreconditionError(StrCat("notification ", notification_id, " is ",
                                                        select->ColumnText(0), ", not PENDING"));
          }
          tries = select->ColumnInt64(1) + 1;
        }
        CART_RETURN_IF_ERROR(
            Exec(db, kInsertTry, notification_id, tries, at_us, ok ? 1 : 0, detail));
        if (ok) {
          CART_RETURN_IF_ERROR(
              Exec(db, kUpdateNotification, "DELIVERED", tries, at_us, at_us, notification_id));
          return true;
        }
        if (retry_at_us) {
          CART_RETURN_IF_ERROR(Exec(db, kUpdateNotification, "PENDING", tries, *retry_at_us,
                                    std::nullopt, notification_id));
          return true;
        }
        CART_RETURN_IF_ERROR(
            Exec(db, kUpdateNotification, "GAVE_UP", tries, at_us, at_us, notification_id));
        return true;
      })
      .status();
}

absl::StatusOr<std::vector<NotificationRecord>> NotifyStore::NotificationLog(
    const NotificationLogRequest& request) {
  if (request.limit < 1 || request.limit > 1000) {
    return absl::InvalidArgumentError(
        StrCat("notification log: limit must be 1..1000, got ", request.limit));
  }
  using Out = std::vector<NotificationRecord>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(Out out, LoadNotifications(db, kSelectLog, [&](internal::Statement& s) {
                            s.BindAll(request.owner, request.subscription_id, request.limit);
                          }));
    CART_ASSIGN_OR_RETURN(auto tries, db.Cached(kSelectTries));
    for (NotificationRecord& n : out) {
      tries->BindAll(n.id);
      CART_RETURN_IF_ERROR(tries->ForEachRow([&](const auto& cur) {
        n.log.push_back(NotificationTry{cur.ColumnInt64(0), cur.ColumnInt64(1),
                                        cur.ColumnInt64(2) != 0, cur.ColumnText(3)});
      }));
      tries->Reset();
    }
    return out;
  });
}

absl::StatusOr<std::vector<LostAttempt>> NotifyStore::LostAttempts(int64_t since_us) {
  using Out = std::vector<LostAttempt>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectLost));
    select->BindAll(since_us);
    Out out;
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) {
      out.push_back(LostAttempt{cur.ColumnInt64(0), cur.ColumnInt64(1), cur.ColumnText(2),
                                cur.ColumnInt64(3), cur.ColumnOptionalInt64(4)});
    }));
    return out;
  });
}

absl::StatusOr<std::vector<FlaggedRun>> NotifyStore::FlaggedRuns(const std::string& metric,
                                                                 int64_t since_us) {
  using Out = std::vector<FlaggedRun>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectFlagged));
    select->BindAll(metric, since_us);
    Out out;
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) {
      out.push_back(FlaggedRun{cur.ColumnInt64(0), cur.ColumnInt64(1), cur.ColumnDouble(2),
                               cur.ColumnInt64(3)});
    }));
    return out;
  });
}

absl::StatusOr<std::vector<RunScope>> NotifyStore::RunScopes(const std::vector<int64_t>& run_ids) {
  using Out = std::vector<RunScope>;
  return ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunScope));
    Out out;
    for (int64_t id : run_ids) {
      select->BindAll(id);
      CART_ASSIGN_OR_RETURN(bool row, select->Step());
      if (row) {
        RunScope scope;
        scope.run_id = select->ColumnInt64(0);
        scope.run_name = select->ColumnText(1);
        scope.sweep_id = select->ColumnInt64(2);
        scope.sweep_name = select->ColumnText(3);
        scope.owner = select->ColumnText(4);
        scope.state = ParseRunState(select->ColumnText(5)).value_or(RunState::kQueued);
        scope.diverged = select->ColumnInt64(6) != 0;
        out.push_back(std::move(scope));
      }
      select->Reset();
    }
    return out;
  });
}

}  // namespace cart::store
