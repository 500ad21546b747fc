#include "server/notify/notifier.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "report/claims.h"
#include "report/report.h"
#include "server/notify/senders.h"
#include "server/scheduler.h"

namespace cart::server::notify {
namespace {

using store::EventCause;
using store::RunState;

// The scanner reads at most this many events per pass (the rest on the next passes).
constexpr int64_t kEventsPerScan = 1000;
// The sender takes at most this many due notifications per pass.
constexpr int64_t kSendsPerPass = 50;
// Lost leases are looked for this far back (a cartd down longer than this misses older ones).
constexpr int64_t kLostLookbackUs = int64_t{7} * 24 * 3600 * 1'000'000;
constexpr char kEventMark[] = "events";
// "stuck" before an attempt's first step needs at least this long (start-up).
constexpr int64_t kStartUpUs = int64_t{15} * 60 * 1'000'000;

// Whether `sub` names `event`, and whether any of `subs` does (a timed check runs only then).
bool Names(const store::Subscription& sub, const std::string& event) {
  return std::find(sub.events.begin(), sub.events.end(), event) != sub.events.end();
}
bool AnyNames(const std::vector<store::Subscription>& subs, const std::string& event) {
  return std::any_of(subs.begin(), subs.end(),
                     [&](const store::Subscription& sub) { return Names(sub, event); });
}

std::string Seconds(double us) { return StrCat(Fixed(us / 1e6, 0), " s"); }

// Cuts a free-text reason to a line a message can carry.
std::string Line(const std::string& text) {
  std::string line = text.size() > 300 ? StrCat(Utf8Cut(text, 300), "…") : text;
  std::replace(line.begin(), line.end(), '\n', ' ');
  return line;
}

// An e-mail address as a subscription target: one '@', something on each side, no spaces, angle
// brackets or line breaks (what SMTP's RCPT TO can carry as given).
bool LooksLikeAddress(const std::string& a) {
  const size_t at = a.find('@');
  if (at == std::string::npos || at == 0 || at + 1 >= a.size()) return false;
  if (a.find('@', at + 1) != std::string::npos) return false;
  return a.find_first_of(" <>\r\n\t,;") == std::string::npos && a.size() <= 254;
}

}  // namespace

Notifier::Notifier(store::RunStore* store, Scheduler* scheduler, Clock* clock,
                   NotifierOptions options)
    : store_(store), scheduler_(scheduler), clock_(clock), options_(std::move(options)) {
  // The first start over a database: what happened before is history, not news.
  absl::Status marked = [&]() -> absl::Status {
    CART_ASSIGN_OR_RETURN(std::optional<std::string> seen, store_->notify().Mark(kEventMark));
    if (seen) return absl::OkStatus();
    CART_ASSIGN_OR_RETURN(int64_t latest, store_->notify().LatestEventId());
    return store_->notify().Enqueue({}, {{kEventMark, StrCat(latest)}}, NowMicros()).status();
  }();
  if (!marked.ok()) {
    std::fprintf(stderr, "cartd: notifications: cannot set the first mark: %s\n",
                 std::string(marked.message()).c_str());
  }
  if (options_.scan_interval > absl::ZeroDuration()) {
    scan_thread_ = std::thread([this] { ScanLoop(); });
    send_thread_ = std::thread([this] { SendLoop(); });
  }
}

Notifier::~Notifier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (scan_thread_.joinable()) scan_thread_.join();
  if (send_thread_.joinable()) send_thread_.join();
}

int64_t Notifier::NowMicros() const { return absl::ToUnixMicros(clock_->Now()); }

absl::StatusOr<store::Subscription> Notifier::Subscribe(const std::string& who,
                                                        const SubscribeRequest& request) {
  store::Subscription sub;
  sub.owner = who;
  CART_ASSIGN_OR_RETURN(sub.events, ParseEventList(request.events));
  if (request.run_id > 0 && !request.sweep.empty()) {
    return absl::InvalidArgumentError("subscribe to a run or to a sweep, not both");
  }
  if (request.run_id > 0) {
    sub.scope = store::SubscriptionScope::kRun;
    sub.run_id = request.run_id;
    // A run has no sweep-wide happenings: "all" means all of a run's, naming one is a mistake.
    const bool all = Trim(request.events) == "all";
    std::vector<std::string> run_events;
    for (const std::string& e : sub.events) {
      if (!IsSweepEvent(e)) {
        run_events.push_back(e);
      } else if (!all) {
        return absl::InvalidArgumentError(
            StrCat("event '", e,
                   "' is about sweeps, not one run: subscribe with a sweep, or to "
                   "all your runs"));
      }
    }
    sub.events = std::move(run_events);
  } else if (!request.sweep.empty()) {
    sub.scope = store::SubscriptionScope::kSweep;
    CART_ASSIGN_OR_RETURN(store::SweepRecord sweep, store_->GetSweep(request.sweep));
    sub.sweep_id = sweep.id;
  } else {
    sub.scope = store::SubscriptionScope::kMine;
  }
  sub.channel = request.channel;
  sub.target = request.target;
  switch (request.channel) {
    case store::NotifyChannel::kWebhook:
    case store::NotifyChannel::kSlack:
      CART_RETURN_IF_ERROR(ParseWebhookUrl(request.target).status());
      break;
    case store::NotifyChannel::kEmail:
      if (!LooksLikeAddress(request.target)) {
        return absl::InvalidArgumentError(
            StrCat("e-mail address '", request.target, "' is not one (name@host)"));
      }
      if (options_.delivery.smtp.host.empty()) {
        return absl::InvalidArgumentError(
            "this cartd has no SMTP server to send mail through (smtp_host in its config); "
            "use a webhook or ask its operator");
      }
      break;
  }
  if (request.lost_after < absl::Seconds(1) || request.lost_after > absl::Hours(24 * 30)) {
    return absl::InvalidArgumentError(StrCat("lost_after must be from 1 s to 30 days, got ",
                                             absl::FormatDuration(request.lost_after)));
  }
  if (!(request.stuck_factor > 1) || request.stuck_factor > 1e6) {
    return absl::InvalidArgumentError(
        StrCat("stuck_factor must be > 1 and at most 1e6, got ", request.stuck_factor));
  }
  if (!(request.slip_share > 0) || request.slip_share > 1e6) {
    return absl::InvalidArgumentError(
        StrCat("slip_share must be > 0 and at most 1e6, got ", request.slip_share));
  }
  sub.lost_after_us = absl::ToInt64Microseconds(request.lost_after);
  sub.stuck_factor = request.stuck_factor;
  sub.slip_share = request.slip_share;
  return store_->notify().AddSubscription(std::move(sub), NowMicros());
}

absl::StatusOr<std::vector<store::Subscription>> Notifier::List(const std::string& who, bool all) {
  if (all && !IsAdminCaller(who)) {
    return absl::PermissionDeniedError(StrCat(who, " may list only their own subscriptions"));
  }
  return store_->notify().ListSubscriptions(all ? "" : who);
}

absl::Status Notifier::Unsubscribe(const std::string& who, int64_t id) {
  return store_->notify().RemoveSubscription(id, IsAdminCaller(who) ? "" : who, NowMicros());
}

absl::StatusOr<std::vector<store::NotificationRecord>> Notifier::Log(const std::string& who,
                                                                     int64_t subscription_id,
                                                                     bool all, int64_t limit) {
  if (all && !IsAdminCaller(who)) {
    return absl::PermissionDeniedError(StrCat(who, " may read only their own notifications"));
  }
  store::NotificationLogRequest request;
  request.owner = all ? "" : who;
  request.subscription_id = subscription_id;
  request.limit = limit;
  return store_->notify().NotificationLog(request);
}

absl::Status Notifier::CheckOwner(const std::string& who, int64_t id, store::Subscription* out) {
  CART_ASSIGN_OR_RETURN(std::vector<store::Subscription> subs,
                        store_->notify().ListSubscriptions(""));
  for (const store::Subscription& s : subs) {
    if (s.id != id) continue;
    if (s.owner != who && !IsAdminCaller(who)) {
      return absl::PermissionDeniedError(
          StrCat(who, " may not use subscription ", id, ": it belongs to ", s.owner));
    }
    *out = s;
    return absl::OkStatus();
  }
  return absl::NotFoundError(StrCat("subscription ", id, " does not exist"));
}

absl::StatusOr<int64_t> Notifier::SendTest(const std::string& who, int64_t id) {
  store::Subscription sub;
  CART_RETURN_IF_ERROR(CheckOwner(who, id, &sub));
  const int64_t now_us = NowMicros();
  Happening h;
  h.event = "test";
  h.key = StrCat("test/", now_us);
  h.at_us = now_us;
  h.summary = StrCat("test notification of subscription ", id, ", asked by ", who);
  h.details["events"] = StrJoin(sub.events, ", ");
  CART_ASSIGN_OR_RETURN(int64_t added, store_->notify().Enqueue(
                                           {ToNotice(sub, h, options_.dashboard_url)}, {}, now_us));
  {
    absl::MutexLock lock(&mu_);
    enqueued_ += added;
  }
  store::NotificationLogRequest request;
  request.subscription_id = id;
  request.limit = 20;
  CART_ASSIGN_OR_RETURN(std::vector<store::NotificationRecord> log,
                        store_->notify().NotificationLog(request));
  for (const store::NotificationRecord& n : log) {
    if (n.notice.key == h.key) return n.id;
  }
  return absl::InternalError("the test notification was not stored");
}

absl::StatusOr<std::map<int64_t, store::RunScope>> Notifier::Scopes(std::vector<int64_t> run_ids) {
  std::sort(run_ids.begin(), run_ids.end());
  run_ids.erase(std::unique(run_ids.begin(), run_ids.end()), run_ids.end());
  CART_ASSIGN_OR_RETURN(std::vector<store::RunScope> scopes, store_->notify().RunScopes(run_ids));
  std::map<int64_t, store::RunScope> out;
  for (store::RunScope& s : scopes) out.emplace(s.run_id, std::move(s));
  return out;
}

namespace {

Happening RunHappening(std::string event, std::string key, int64_t at_us,
                       const store::RunScope& run) {
  Happening h;
  h.event = std::move(event);
  h.key = std::move(key);
  h.at_us = at_us;
  h.run = run;
  h.sweep_id = run.sweep_id;
  h.sweep_name = run.sweep_name;
  h.owner = run.owner;
  return h;
}

}  // namespace

absl::Status Notifier::HappeningsFromEvents(std::vector<Happening>& out, int64_t& mark,
                                            bool& runs_ended) {
  CART_ASSIGN_OR_RETURN(std::vector<store::EventRecord> events,
                        store_->notify().EventsAfter(mark, kEventsPerScan));
  if (events.empty()) return absl::OkStatus();
  std::vector<int64_t> run_ids;
  for (const store::EventRecord& e : events) {
    if (e.run_id) run_ids.push_back(*e.run_id);
  }
  CART_ASSIGN_OR_RETURN(auto scopes, Scopes(run_ids));
  // Sweeps a run of which ended: name -> (id, when its last such run ended).
  std::map<std::string, std::pair<int64_t, int64_t>> ended_sweeps;
  for (const store::EventRecord& e : events) {
    mark = e.id;
    if (!e.run_id) continue;
    const auto scope = scopes.find(*e.run_id);
    if (scope == scopes.end()) continue;  // deleted since
    const store::RunScope& run = scope->second;
    const std::string on = StrCat("run/", run.run_id, "/event/", e.id);
    if (e.to_state == "FAILED") {
      Happening h = RunHappening("failed", StrCat("failed/", on), e.at_us, run);
      h.summary = StrCat("run ", run.run_name, " (", run.run_id, ") failed");
      h.details["why"] = Line(e.why);
      h.details["by"] = e.who;
      out.push_back(std::move(h));
    }
    if (e.cause == EventCause::kDiverged) {
      Happening h = RunHappening("diverged", StrCat("diverged/", on), e.at_us, run);
      h.summary = StrCat("run ", run.run_id, " (", run.run_name, ") diverged: non-finite loss");
      h.details["why"] = Line(e.why);
      out.push_back(std::move(h));
    }
    if (e.cause == EventCause::kPreempted) {
      Happening h = RunHappening("preempted", StrCat("preempted/", on), e.at_us, run);
      h.summary = StrCat("run ", run.run_name, " (", run.run_id,
                         ") was preempted at a checkpoint; it is queued again");
      h.details["why"] = Line(e.why);
      out.push_back(std::move(h));
    }
    if (std::optional<RunState> to = store::ParseRunState(e.to_state); to && IsTerminal(*to)) {
      runs_ended = true;
      auto [it, added] =
          ended_sweeps.emplace(run.sweep_name, std::make_pair(run.sweep_id, e.at_us));
      if (!added) it->second.second = std::max(it->second.second, e.at_us);
    }
  }
  for (const auto& [name, ended] : ended_sweeps) {
    const auto [id, ended_us] = ended;
    absl::StatusOr<store::SweepRecord> sweep = store_->GetSweep(name);
    if (!sweep.ok()) continue;  // deleted since
    int64_t runs = 0, unfinished = 0;
    for (const auto& [state, count] : sweep->run_counts) {
      runs += count;
      if (!IsTerminal(state)) unfinished += count;
    }
    if (runs == 0 || unfinished > 0) continue;
    // Keyed by the sweep's newest event: the same however the scans cut its events, and new
    // again when a resumed sweep finishes a second time.
    CART_ASSIGN_OR_RETURN(int64_t last_event, store_->notify().LatestSweepEvent(id));
    Happening h;
    h.event = "sweep_finished";
    h.key = StrCat("sweep_finished/sweep/", id, "/event/", last_event);
    h.at_us = ended_us;
    h.sweep_id = id;
    h.sweep_name = name;
    h.owner = sweep->created_by;
    std::vector<std::string> counts;
    for (const auto& [state, count] : sweep->run_counts) {
      counts.push_back(StrCat(count, " ", store::RunStateName(state)));
      h.details[ToLower(store::RunStateName(state))] = StrCat(count);
    }
    h.summary = StrCat("sweep ", name, " finished: ", StrJoin(counts, ", "));
    out.push_back(std::move(h));
  }
  return absl::OkStatus();
}

absl::Status Notifier::CheckLost(const std::vector<store::Subscription>& subs,
                                 std::vector<store::Notice>& out) {
  const bool wanted = AnyNames(subs, "lost");
  if (!wanted) return absl::OkStatus();
  const int64_t now_us = NowMicros();
  CART_ASSIGN_OR_RETURN(std::vector<store::LostAttempt> lost,
                        store_->notify().LostAttempts(now_us - kLostLookbackUs));
  if (lost.empty()) return absl::OkStatus();
  std::vector<int64_t> run_ids;
  for (const store::LostAttempt& l : lost) run_ids.push_back(l.run_id);
  CART_ASSIGN_OR_RETURN(auto scopes, Scopes(run_ids));
  for (const store::LostAttempt& l : lost) {
    const auto scope = scopes.find(l.run_id);
    if (scope == scopes.end()) continue;
    for (const store::Subscription& sub : subs) {
      const int64_t deadline = l.expired_us + sub.lost_after_us;
      if (now_us < deadline) continue;  // may still be picked up in time
      if (l.expired_us < sub.created_us) continue;
      if (l.next_started_us && *l.next_started_us <= deadline) continue;  // it was
      Happening h = RunHappening("lost", StrCat("lost/run/", l.run_id, "/attempt/", l.attempt),
                                 l.expired_us, scope->second);
      h.summary =
          StrCat("run ", scope->second.run_name, " (", l.run_id, ") lost its worker ", l.worker_id,
                 " and has not run again for ", Seconds(static_cast<double>(sub.lost_after_us)));
      h.details["worker"] = l.worker_id;
      h.details["attempt"] = StrCat(l.attempt);
      h.details["state"] = std::string(store::RunStateName(scope->second.state));
      if (Wants(sub, h)) out.push_back(ToNotice(sub, h, options_.dashboard_url));
    }
  }
  return absl::OkStatus();
}

absl::Status Notifier::CheckStuck(const std::vector<store::Subscription>& subs,
                                  std::vector<store::Notice>& out) {
  const bool wanted = AnyNames(subs, "stuck");
  if (!wanted) return absl::OkStatus();
  const int64_t now_us = NowMicros();
  std::vector<RunPace> paces = scheduler_->RunPaces();
  std::vector<int64_t> run_ids;
  for (const RunPace& p : paces) run_ids.push_back(p.run_id);
  CART_ASSIGN_OR_RETURN(auto scopes, Scopes(run_ids));
  const double floor_us = static_cast<double>(absl::ToInt64Microseconds(options_.stuck_floor));
  for (const RunPace& p : paces) {
    const auto scope = scopes.find(p.run_id);
    if (scope == scopes.end() || p.expected_step_us <= 0) continue;
    const double stalled_us = static_cast<double>(now_us - p.since_us);
    // Before its first step an attempt downloads its checkpoint, reads its data and builds the
    // model: that is start-up, not a stall, for up to kStartUpUs.
    const double start_up_us = p.step == 0 ? static_cast<double>(kStartUpUs) : 0;
    for (const store::Subscription& sub : subs) {
      const double limit_us =
          std::max({floor_us, start_up_us, sub.stuck_factor * p.expected_step_us});
      if (stalled_us < limit_us) continue;
      Happening h = RunHappening(
          "stuck", StrCat("stuck/run/", p.run_id, "/attempt/", p.attempt, "/step/", p.step), now_us,
          scope->second);
      h.summary = StrCat("run ", scope->second.run_name, " (", p.run_id, ") is stuck at step ",
                         p.step, ": no progress for ", Seconds(stalled_us));
      h.details["expected_step_time"] = Seconds(p.expected_step_us);
      h.details["stalled_for"] = Seconds(stalled_us);
      h.details["attempt"] = StrCat(p.attempt);
      if (Wants(sub, h)) out.push_back(ToNotice(sub, h, options_.dashboard_url));
    }
  }
  return absl::OkStatus();
}

absl::Status Notifier::CheckLeaks(std::vector<Happening>& out) {
  CART_ASSIGN_OR_RETURN(std::vector<store::FlaggedRun> flagged,
                        store_->notify().FlaggedRuns("leak_suspected", 0));
  if (flagged.empty()) return absl::OkStatus();
  std::vector<int64_t> run_ids;
  for (const store::FlaggedRun& f : flagged) run_ids.push_back(f.run_id);
  CART_ASSIGN_OR_RETURN(auto scopes, Scopes(run_ids));
  for (const store::FlaggedRun& f : flagged) {
    const auto scope = scopes.find(f.run_id);
    if (scope == scopes.end()) continue;
    Happening h = RunHappening("leak_suspected", StrCat("leak_suspected/run/", f.run_id),
                               f.wall_time_us, scope->second);
    h.summary = StrCat("run ", scope->second.run_name, " (", f.run_id,
                       ") may be leaking future tokens (leak guard at step ", f.step, ")");
    h.details["step"] = StrCat(f.step);
    h.details["leak_suspected"] = StrCat(f.value);
    out.push_back(std::move(h));
  }
  return absl::OkStatus();
}

absl::Status Notifier::CheckVerdicts(const std::vector<store::Subscription>& subs,
                                     std::vector<Happening>& out,
                                     std::vector<std::pair<std::string, std::string>>& marks,
                                     bool runs_ended) {
  if (runs_ended) verdicts_due_ = true;
  const bool wanted = AnyNames(subs, "verdict_changed");
  const int64_t now_us = NowMicros();
  if (!wanted || !verdicts_due_ ||
      now_us - verdicts_at_us_ < absl::ToInt64Microseconds(options_.verdict_interval)) {
    return absl::OkStatus();
  }
  verdicts_at_us_ = now_us;
  verdicts_due_ = false;
  report::ReportOptions options;
  options.plots = false;
  std::unique_ptr<report::StudySource> source = report::StoreSource(*store_);
  CART_ASSIGN_OR_RETURN(report::Report built, report::BuildReport(*source, options));
  CART_ASSIGN_OR_RETURN(std::vector<report::ClaimSpec> specs, report::DefaultClaims());
  // The sweeps a claim reads: its part's and its tests' sides'.
  std::map<std::string, std::string> sweep_of;
  for (const auto& [part, sweep] : report::StudyParts(options.sweeps)) sweep_of[part] = *sweep;
  CART_ASSIGN_OR_RETURN(std::vector<store::SweepRecord> sweeps, store_->ListSweeps());
  for (const report::ClaimLine& claim : built.claims) {
    const std::string name = StrCat("verdict/claim/", claim.id);
    CART_ASSIGN_OR_RETURN(std::optional<std::string> seen, store_->notify().Mark(name));
    if (seen && *seen == claim.verdict) continue;
    marks.emplace_back(name, claim.verdict);
    if (!seen) continue;  // the first verdict seen is the baseline
    std::set<std::string> parts;
    for (const report::ClaimSpec& spec : specs) {
      if (spec.id != claim.id) continue;
      parts.insert(spec.part);
      for (const report::TestSpec& t : spec.tests) {
        if (!t.a.part.empty()) parts.insert(t.a.part);
        if (!t.b.part.empty()) parts.insert(t.b.part);
      }
    }
    Happening h;
    h.event = "verdict_changed";
    h.key = StrCat("verdict_changed/claim/", claim.id, "/at/", now_us);
    h.at_us = now_us;
    for (const std::string& part : parts) {
      const auto sweep = sweep_of.find(part);
      if (sweep == sweep_of.end()) continue;
      for (const store::SweepRecord& record : sweeps) {
        if (record.name != sweep->second) continue;
        h.sweep_ids.push_back(record.id);
        h.sweep_owners.push_back(record.created_by);
      }
    }
    h.summary = StrCat("claim ", claim.id, " now ", claim.verdict, " (was ", *seen, ")");
    h.details["claim"] = claim.claim;
    h.details["evidence"] = claim.evidence;
    h.details["published"] = claim.published;
    out.push_back(std::move(h));
  }
  return absl::OkStatus();
}

absl::Status Notifier::CheckSlip(const std::vector<store::Subscription>& subs,
                                 std::vector<store::Notice>& out,
                                 std::vector<std::pair<std::string, std::string>>& marks) {
  std::vector<const store::Subscription*> wanting;
  for (const store::Subscription& s : subs) {
    if (Names(s, "finish_slipped")) wanting.push_back(&s);
  }
  if (wanting.empty()) return absl::OkStatus();
  CART_ASSIGN_OR_RETURN(std::shared_ptr<const Forecast> forecast, scheduler_->ExpectedFinish());
  const int64_t now_us = NowMicros();
  CART_ASSIGN_OR_RETURN(std::vector<store::SweepRecord> sweeps, store_->ListSweeps());
  for (const store::SweepRecord& sweep : sweeps) {
    const auto finish = forecast->sweep_finish_us.find(sweep.id);
    if (finish == forecast->sweep_finish_us.end()) continue;
    Happening h;
    h.event = "finish_slipped";
    h.sweep_id = sweep.id;
    h.sweep_name = sweep.name;
    h.owner = sweep.created_by;
    h.at_us = now_us;
    for (const store::Subscription* sub : wanting) {
      if (!Wants(*sub, h)) continue;
      // The baseline is this subscription's own: the finish it last accepted, and when.
      const std::string name = StrCat("finish/subscription/", sub->id, "/sweep/", sweep.id);
      CART_ASSIGN_OR_RETURN(std::optional<std::string> seen, store_->notify().Mark(name));
      const std::string now_value = StrCat(now_us, " ", finish->second);
      std::vector<std::string> parts = seen ? Split(*seen, ' ') : std::vector<std::string>();
      std::optional<int64_t> base_at, base_finish;
      if (parts.size() == 2) {
        base_at = ParseInt64(parts[0]);
        base_finish = ParseInt64(parts[1]);
      }
      if (!base_at || !base_finish) {
        marks.emplace_back(name, now_value);
        continue;
      }
      const double left = static_cast<double>(*base_finish - *base_at);
      const double slip = static_cast<double>(finish->second - *base_finish);
      if (*base_finish < finish->second && left > 0 && slip > sub->slip_share * left) {
        Happening slipped = h;
        slipped.key = StrCat("finish_slipped/sweep/", sweep.id, "/finish/", finish->second);
        slipped.summary =
            StrCat("sweep ", sweep.name, "'s expected finish slipped by ", Seconds(slip), " (",
                   Fixed(100 * slip / left, 0), " % of the ", Seconds(left), " left then)");
        slipped.details["expected_finish_before_us"] = StrCat(*base_finish);
        slipped.details["expected_finish_now_us"] = StrCat(finish->second);
        out.push_back(ToNotice(*sub, slipped, options_.dashboard_url));
        marks.emplace_back(name, now_value);
      } else if (finish->second < *base_finish) {
        marks.emplace_back(name, now_value);  // ahead of the baseline: the new one counts
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Notifier::Scan() {
  absl::MutexLock scan(&scan_mu_);
  store::NotifyStore& notify = store_->notify();
  CART_ASSIGN_OR_RETURN(std::optional<std::string> seen, notify.Mark(kEventMark));
  int64_t mark = 0;
  if (seen) {
    mark = ParseInt64(*seen).value_or(0);
  } else {
    CART_ASSIGN_OR_RETURN(mark, notify.LatestEventId());
  }
  const int64_t start_mark = mark;
  // Events first, then the subscriptions: one made between the two reads is then matched
  // against these events too (what happened before it was made is left out below), where the
  // other order would move the mark past events it never saw.
  std::vector<Happening> happenings;
  bool runs_ended = false;
  CART_RETURN_IF_ERROR(HappeningsFromEvents(happenings, mark, runs_ended));
  CART_ASSIGN_OR_RETURN(std::vector<store::Subscription> subs, notify.ListSubscriptions(""));
  std::vector<store::Notice> notices;
  std::vector<std::pair<std::string, std::string>> marks;
  if (!subs.empty()) {
    // The leak check reads every run's latest leak_suspected: only when someone asked for it.
    if (AnyNames(subs, "leak_suspected")) {
      CART_RETURN_IF_ERROR(CheckLeaks(happenings));
    }
    CART_RETURN_IF_ERROR(CheckVerdicts(subs, happenings, marks, runs_ended));
    for (const Happening& h : happenings) {
      for (const store::Subscription& sub : subs) {
        // What happened before a subscription was made is not news to it.
        if (h.at_us < sub.created_us) continue;
        if (Wants(sub, h)) notices.push_back(ToNotice(sub, h, options_.dashboard_url));
      }
    }
    CART_RETURN_IF_ERROR(CheckLost(subs, notices));
    CART_RETURN_IF_ERROR(CheckStuck(subs, notices));
    CART_RETURN_IF_ERROR(CheckSlip(subs, notices, marks));
  }
  if (mark != start_mark || !seen) marks.emplace_back(kEventMark, StrCat(mark));
  if (notices.empty() && marks.empty()) return 0;
  CART_ASSIGN_OR_RETURN(int64_t added, notify.Enqueue(notices, marks, NowMicros()));
  if (added > 0) {
    absl::MutexLock lock(&mu_);
    enqueued_ += added;
  }
  return added;
}

absl::StatusOr<int64_t> Notifier::DeliverDue() {
  store::NotifyStore& notify = store_->notify();
  CART_ASSIGN_OR_RETURN(std::vector<store::Outgoing> due, notify.Due(NowMicros(), kSendsPerPass));
  for (const store::Outgoing& out : due) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    // A delivery whose record failed (cartd's disk, a busy database) is recorded again, not
    // sent again.
    std::optional<Delivered> unrecorded;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = unrecorded_.find(out.notification.id); it != unrecorded_.end()) {
        unrecorded = it->second;
      }
    }
    const Delivered result = unrecorded         ? *unrecorded
                             : options_.deliver ? options_.deliver(out)
                                                : Deliver(out, options_.delivery);
    const int64_t now_us = NowMicros();
    std::optional<int64_t> retry_at;
    if (!result.ok && result.retryable) {
      // After try n, wait retry_base * 2^(n-1), at most retry_max; give up past give_up_after.
      const int64_t tries = out.notification.tries + 1;
      absl::Duration wait = options_.retry_base;
      for (int64_t i = 1; i < tries && wait < options_.retry_max; ++i) wait *= 2;
      wait = std::min(wait, options_.retry_max);
      const int64_t at = now_us + absl::ToInt64Microseconds(wait);
      if (at - out.notification.created_us <= absl::ToInt64Microseconds(options_.give_up_after)) {
        retry_at = at;
      }
    }
    absl::Status recorded =
        notify.RecordTry(out.notification.id, now_us, result.ok, result.detail, retry_at);
    {
      absl::MutexLock lock(&mu_);
      if (recorded.ok() || absl::IsFailedPrecondition(recorded)) {
        unrecorded_.erase(out.notification.id);
      } else {
        unrecorded_[out.notification.id] = result;
      }
    }
    if (!recorded.ok() && !absl::IsFailedPrecondition(recorded)) return recorded;
    if (!result.ok) {
      std::fprintf(stderr, "cartd: notification %lld (subscription %lld, %s) not delivered: %s%s\n",
                   static_cast<long long>(out.notification.id),
                   static_cast<long long>(out.subscription.id),
                   out.notification.notice.event.c_str(), result.detail.c_str(),
                   retry_at ? "; will retry" : "; given up");
    }
  }
  return static_cast<int64_t>(due.size());
}

void Notifier::ScanLoop() {
  std::string last_error;
  for (;;) {
    absl::StatusOr<int64_t> scanned = Scan();
    if (!scanned.ok() && std::string(scanned.status().message()) != last_error) {
      last_error = std::string(scanned.status().message());
      std::fprintf(stderr, "cartd: notifications: scan failed: %s\n", last_error.c_str());
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.scan_interval)) return;
  }
}

void Notifier::SendLoop() {
  int64_t seen = -1;
  std::string last_error;
  absl::Duration failing_wait = absl::ZeroDuration();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      seen = enqueued_;
    }
    absl::StatusOr<int64_t> sent = DeliverDue();
    if (!sent.ok()) {
      const std::string message(sent.status().message());
      if (message != last_error) {
        std::fprintf(stderr, "cartd: notifications: delivery pass failed: %s\n", message.c_str());
      }
      last_error = message;
      // The store refused a write: wait, longer each time, before the next pass.
      failing_wait = std::min(std::max(failing_wait * 2, options_.scan_interval), absl::Minutes(1));
    } else {
      last_error.clear();
      failing_wait = absl::ZeroDuration();
    }
    // Sleep until something is enqueued, the next retry is due, or a scan interval passes.
    absl::Duration wait = options_.scan_interval;
    if (sent.ok() && *sent >= kSendsPerPass) wait = absl::ZeroDuration();
    if (!sent.ok()) {
      wait = failing_wait;
    } else if (absl::StatusOr<std::optional<int64_t>> next = store_->notify().NextDue();
               next.ok() && next->has_value()) {
      wait =
          std::min(wait, std::max(absl::ZeroDuration(), absl::Microseconds(**next - NowMicros())));
    }
    absl::MutexLock lock(&mu_);
    auto woken = [this, seen]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || enqueued_ != seen; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), wait);
    if (stopping_) return;
  }
}

}  // namespace cart::server::notify
