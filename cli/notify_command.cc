// cart notify add | ls | rm | test | log: subscriptions to what happens to runs and sweeps, and
// what was delivered (docs/operations.md "Notifications").

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "absl/time/time.h"
#include "cart/v1/notify.grpc.pb.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/table.h"
#include "common/file.h"
#include "common/strings.h"

namespace cart::cli {
namespace {

using cart::v1::NotifyService;

struct AddArgs {
  Conn conn;
  int64_t run_id = 0;
  std::string sweep;
  std::string events;
  std::string webhook, slack, email;
  std::string lost_after = "10m";
  double stuck_factor = 5;
  double slip_share = 0.25;
};

struct IdArgs {
  Conn conn;
  int64_t id = 0;
};

struct ListArgs {
  Conn conn;
  bool all = false;
};

struct LogArgs {
  Conn conn;
  int64_t subscription = 0;
  int64_t limit = 20;
  bool all = false;
};

// A URL given as "@FILE" is read from the file's first line, so that a webhook's secret need not
// go through the shell's history or the process list.
std::string UrlArgument(const std::string& given, const char* flag) {
  if (given.empty() || given[0] != '@') return given;
  absl::StatusOr<std::string> text = ReadWholeFile(given.substr(1));
  if (!text.ok()) {
    ExitWith(absl::InvalidArgumentError(StrCat(flag, ": ", Message(text.status()))));
  }
  return std::string(Trim(text->substr(0, text->find('\n'))));
}

std::string ScopeText(const cart::v1::SubscriptionView& s) {
  if (s.scope() == "run") return fmt::format("run {} ({})", s.run_id(), s.run_name());
  if (s.scope() == "sweep") return "sweep " + s.sweep();
  return "my runs";
}

void AddCommand(const AddArgs& a) {
  cart::v1::SubscribeRequest request;
  request.set_run_id(a.run_id);
  request.set_sweep(a.sweep);
  request.set_events(a.events);
  const int given = !a.webhook.empty() + !a.slack.empty() + !a.email.empty();
  if (given != 1) {
    ExitWith(absl::InvalidArgumentError(
        "give exactly one of --webhook URL, --slack URL or --email ADDRESS"));
  }
  if (!a.webhook.empty()) {
    request.set_channel("webhook");
    request.set_target(UrlArgument(a.webhook, "--webhook"));
  } else if (!a.slack.empty()) {
    request.set_channel("slack");
    request.set_target(UrlArgument(a.slack, "--slack"));
  } else {
    request.set_channel("email");
    request.set_target(a.email);
  }
  absl::Duration lost_after;
  if (!absl::ParseDuration(a.lost_after, &lost_after) || lost_after < absl::Seconds(1)) {
    ExitWith(absl::InvalidArgumentError(
        StrCat("--lost-after '", a.lost_after, "' is not a duration of at least 1s (10m, 1h)")));
  }
  request.set_lost_after_s(absl::ToInt64Seconds(lost_after));
  request.set_stuck_factor(a.stuck_factor);
  request.set_slip_share(a.slip_share);
  Client client = Client::Connect(a.conn);
  const auto sub = client.CallNotify<cart::v1::SubscribeRequest, cart::v1::SubscriptionView>(
      &NotifyService::Stub::Subscribe, request);
  if (a.conn.json) {
    std::cout << ToJson(sub) << "\n";
    return;
  }
  std::cout << fmt::format("subscription {}: {} on {} -> {} {}\n", sub.id(),
                           StrJoin(sub.events(), ", "), ScopeText(sub), sub.channel(),
                           sub.target());
  std::cout << fmt::format(
      "`cart notify test {}` sends one now; `cart notify log` shows what "
      "was delivered\n",
      sub.id());
}

void ListCommand(const ListArgs& a) {
  Client client = Client::Connect(a.conn);
  cart::v1::ListSubscriptionsRequest request;
  request.set_all(a.all);
  const auto resp =
      client.CallNotify<cart::v1::ListSubscriptionsRequest, cart::v1::ListSubscriptionsResponse>(
          &NotifyService::Stub::ListSubscriptions, request);
  if (a.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  Table t;
  t.Header({"id", "owner", "scope", "events", "to", "lost after", "stuck x", "slip", "since"});
  for (const auto& s : resp.subscriptions()) {
    t.Row({std::to_string(s.id()), s.owner(), ScopeText(s), StrJoin(s.events(), ","),
           s.channel() + " " + s.target(), fmt::format("{} s", s.lost_after_s()),
           fmt::format("{:g}", s.stuck_factor()), fmt::format("{:g}", s.slip_share()),
           When(s.created_us())});
  }
  t.Print(std::cout);
}

void RemoveCommand(const IdArgs& a) {
  Client client = Client::Connect(a.conn);
  cart::v1::UnsubscribeRequest request;
  request.set_id(a.id);
  client.CallNotify<cart::v1::UnsubscribeRequest, cart::v1::UnsubscribeResponse>(
      &NotifyService::Stub::Unsubscribe, request);
  std::cout << "subscription " << a.id << " removed\n";
}

void TestCommand(const IdArgs& a) {
  Client client = Client::Connect(a.conn);
  cart::v1::SendTestRequest request;
  request.set_id(a.id);
  const auto resp = client.CallNotify<cart::v1::SendTestRequest, cart::v1::SendTestResponse>(
      &NotifyService::Stub::SendTest, request);
  std::cout << "notification " << resp.notification_id()
            << " queued; `cart notify log --subscription " << a.id << "` shows its delivery\n";
}

void LogCommand(const LogArgs& a) {
  Client client = Client::Connect(a.conn);
  cart::v1::NotificationLogRequest request;
  request.set_subscription_id(a.subscription);
  request.set_all(a.all);
  request.set_limit(a.limit);
  const auto resp =
      client.CallNotify<cart::v1::NotificationLogRequest, cart::v1::NotificationLogResponse>(
          &NotifyService::Stub::NotificationLog, request);
  if (a.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  Table t;
  t.Header({"id", "sub", "event", "state", "tries", "happened", "last try", "summary"});
  for (const auto& n : resp.notifications()) {
    std::string last = "-";
    if (n.log_size() > 0) {
      const auto& l = n.log(n.log_size() - 1);
      last = fmt::format("{} {}", When(l.at_us()), l.detail());
    }
    if (n.state() == "PENDING" && n.tries() > 0) {
      last += fmt::format(" (next {})", When(n.next_try_us()));
    }
    t.Row({std::to_string(n.id()), std::to_string(n.subscription_id()), n.event(), n.state(),
           std::to_string(n.tries()), When(n.happened_us()), last, n.summary()});
  }
  t.Print(std::cout);
}

void RegisterNotify(CLI::App& app) {
  CLI::App* notify = app.add_subcommand(
      "notify", "Be told when your runs fail, get lost or stuck, diverge, or a sweep finishes");
  notify->require_subcommand(1);

  auto add = std::make_shared<AddArgs>();
  CLI::App* add_cmd = notify->add_subcommand(
      "add", "Subscribe a run, a sweep or all your runs to events (docs/operations.md)");
  add_cmd->add_option("--run", add->run_id, "A run id (default: all runs of your sweeps)");
  add_cmd->add_option("--sweep", add->sweep, "A sweep's name");
  add_cmd
      ->add_option("--on", add->events,
                   "Events, comma-separated, or all: failed, lost, stuck, diverged, "
                   "leak_suspected, preempted, sweep_finished, verdict_changed, finish_slipped")
      ->required();
  add_cmd->add_option("--webhook", add->webhook,
                      "POST each notification's JSON to this http(s) URL (@FILE: read it)");
  add_cmd->add_option("--slack", add->slack,
                      "A Slack-compatible incoming webhook URL (@FILE: read it)");
  add_cmd->add_option("--email", add->email, "Mail it to this address (cartd's smtp_host)");
  add_cmd
      ->add_option("--lost-after", add->lost_after,
                   "lost: the run was not running again this long after its worker was lost")
      ->capture_default_str();
  add_cmd
      ->add_option("--stuck-factor", add->stuck_factor,
                   "stuck: no progress for this many expected step times")
      ->capture_default_str();
  add_cmd
      ->add_option("--slip", add->slip_share,
                   "finish_slipped: the expected finish moved later by this share of what "
                   "was left")
      ->capture_default_str();
  AddConnFlags(add_cmd, add->conn);
  OnRun(add_cmd, [add] { AddCommand(*add); });

  auto ls = std::make_shared<ListArgs>();
  CLI::App* ls_cmd = notify->add_subcommand("ls", "Your subscriptions (URLs shown up to the host)");
  ls_cmd->add_flag("--all", ls->all, "Everyone's (admins)");
  AddConnFlags(ls_cmd, ls->conn);
  OnRun(ls_cmd, [ls] { ListCommand(*ls); });

  auto rm = std::make_shared<IdArgs>();
  CLI::App* rm_cmd = notify->add_subcommand("rm", "Remove a subscription");
  rm_cmd->add_option("id", rm->id, "Subscription id")->required();
  AddConnFlags(rm_cmd, rm->conn);
  OnRun(rm_cmd, [rm] { RemoveCommand(*rm); });

  auto test = std::make_shared<IdArgs>();
  CLI::App* test_cmd = notify->add_subcommand("test", "Send a test notification now");
  test_cmd->add_option("id", test->id, "Subscription id")->required();
  AddConnFlags(test_cmd, test->conn);
  OnRun(test_cmd, [test] { TestCommand(*test); });

  auto log = std::make_shared<LogArgs>();
  CLI::App* log_cmd =
      notify->add_subcommand("log", "What was sent, newest first, with each delivery try");
  log_cmd->add_option("--subscription", log->subscription, "Only this subscription's");
  log_cmd->add_option("--limit", log->limit, "At most this many (1..1000)")->capture_default_str();
  log_cmd->add_flag("--all", log->all, "Everyone's (admins)");
  AddConnFlags(log_cmd, log->conn);
  OnRun(log_cmd, [log] { LogCommand(*log); });
}

}  // namespace

void RegisterNotifyCommands(CLI::App& app) { RegisterNotify(app); }

}  // namespace cart::cli
