// cart budget ls | set: device-hour budgets per user and per sweep, what is spent and left
// (docs/operations.md "Budgets").

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/table.h"
#include "common/strings.h"

namespace cart::cli {
namespace {

using cart::v1::SchedulerService;

struct SetArgs {
  Conn conn;
  std::string sweep;
  std::string user;
  double hours = 0;
};

struct ListArgs {
  Conn conn;
};

void ListCommand(const ListArgs& a) {
  Client client = Client::Connect(a.conn);
  const auto resp = client.Call<cart::v1::ListBudgetsRequest, cart::v1::ListBudgetsResponse>(
      &SchedulerService::Stub::ListBudgets, cart::v1::ListBudgetsRequest());
  if (a.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  if (resp.budgets().empty()) {
    std::cout << "no budgets: runs start whatever they use (docs/operations.md \"Budgets\")\n";
    return;
  }
  Table t;
  t.Header({"scope", "name", "budget", "spent", "held", "left", "set by"});
  for (const auto& b : resp.budgets()) {
    t.Row({b.scope(), b.name(), DeviceHoursText(b.limit_device_hours()),
           DeviceHoursText(b.spent_device_hours()), DeviceHoursText(b.held_device_hours()),
           DeviceHoursText(b.left_device_hours()), b.source()});
  }
  t.Print(std::cout);
  std::cout << "device-hours; held: what running runs are still expected to take\n";
}

void SetCommand(const SetArgs& a) {
  if (a.sweep.empty() == a.user.empty()) {
    ExitWith(absl::InvalidArgumentError("give one of --sweep NAME and --user NAME"));
  }
  if (!(a.hours > 0) || !std::isfinite(a.hours)) {
    ExitWith(absl::InvalidArgumentError(
        StrCat("--device-hours ", a.hours, " must be a number of device-hours > 0")));
  }
  Client client = Client::Connect(a.conn);
  cart::v1::SetBudgetRequest request;
  request.set_sweep(a.sweep);
  request.set_user(a.user);
  request.set_device_hours(a.hours);
  const auto b = client.Call<cart::v1::SetBudgetRequest, cart::v1::BudgetView>(
      &SchedulerService::Stub::SetBudget, request);
  if (a.conn.json) {
    std::cout << ToJson(b) << "\n";
    return;
  }
  std::cout << BudgetText(b) << "\n";
}

}  // namespace

void RegisterBudgetCommands(CLI::App& app) {
  CLI::App* budget = app.add_subcommand(
      "budget", "Device-hour budgets per user and per sweep: spent, held, left; admins set them");
  budget->require_subcommand(1);

  auto list = std::make_shared<ListArgs>();
  CLI::App* ls = budget->add_subcommand(
      "ls", "Your budget and your sweeps' (an admin: every one), with what is spent and left");
  AddConnFlags(ls, list->conn);
  OnRun(ls, [list] { ListCommand(*list); });

  auto set = std::make_shared<SetArgs>();
  CLI::App* set_cmd = budget->add_subcommand(
      "set", "Set or raise a sweep's or a user's budget (admins; never below what is spent)");
  set_cmd->add_option("--sweep", set->sweep, "A sweep's name");
  set_cmd->add_option("--user", set->user, "A user's name (as in cartd's tokens file)");
  set_cmd->add_option("--device-hours", set->hours, "The budget, in device-hours (> 0)")
      ->required();
  AddConnFlags(set_cmd, set->conn);
  OnRun(set_cmd, [set] { SetCommand(*set); });
}

}  // namespace cart::cli
