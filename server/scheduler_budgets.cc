// The Scheduler's device-hour budgets (server/budgets.h; docs/operations.md "Budgets"): the
// ledger placement and preemption keep, what `cart budget` and the sweep views read, and the
// admin's changes.

#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "server/scheduler.h"

namespace cart::server {

double Scheduler::UserBudgetLimit(const std::string& user, const store::BudgetUse& use,
                                  std::string* source) const {
  if (const auto set = use.users.find(user); set != use.users.end()) {
    *source = StrCat("admin ", store::OwnerName(set->second.set_by));
    return set->second.device_hours;
  }
  *source = "cartd config";
  if (const auto named = options_.user_budgets.find(user); named != options_.user_budgets.end()) {
    return named->second;
  }
  return options_.user_budget_device_hours;
}

absl::StatusOr<BudgetLedger> Scheduler::Ledger(int64_t now_us, store::BudgetUse* read) {
  BudgetLedger ledger;
  if (read == nullptr && options_.user_budget_device_hours <= 0 && options_.user_budgets.empty()) {
    CART_ASSIGN_OR_RETURN(bool any, store_->AnyBudget());
    if (!any) return ledger;  // no budget anywhere: nothing to read
  }
  CART_ASSIGN_OR_RETURN(store::BudgetUse use, store_->ReadBudgetUse(now_us));
  std::set<std::string> users;
  for (const auto& [id, sweep] : use.sweeps) {
    users.insert(std::string(store::OwnerName(sweep.owner)));
    if (!sweep.limit) continue;
    BudgetAccount& account = ledger.sweeps[id];
    account.limit = *sweep.limit;
    account.spent = sweep.spent;
    account.source = "sweep file or admin";
    ledger.sweep_names[id] = sweep.name;
  }
  for (const auto& [user, budget] : use.users) users.insert(user);
  for (const auto& [user, hours] : options_.user_budgets) users.insert(user);
  for (const std::string& user : users) {
    std::string source;
    const double limit = UserBudgetLimit(user, use, &source);
    if (limit <= 0) continue;
    BudgetAccount& account = ledger.owners[user];
    account.limit = limit;
    account.spent = use.UserSpent(user);
    account.source = std::move(source);
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [run_id, left] : HoursLeftLocked(now_us)) {
    const Running& r = running_.at(run_id);
    if (auto s = ledger.sweeps.find(r.sweep_id); s != ledger.sweeps.end()) s->second.held += left;
    if (auto o = ledger.owners.find(std::string(store::OwnerName(r.owner)));
        o != ledger.owners.end()) {
      o->second.held += left;
    }
  }
  if (read != nullptr) *read = std::move(use);
  return ledger;
}

absl::StatusOr<std::vector<BudgetLine>> Scheduler::Budgets(const std::string& who) {
  const int64_t now_us = NowMicros();
  store::BudgetUse use;
  CART_ASSIGN_OR_RETURN(BudgetLedger ledger, Ledger(now_us, &use));
  const bool admin = IsAdminCaller(who);
  const std::string caller(store::OwnerName(who));
  std::vector<BudgetLine> out;
  for (const auto& [user, account] : ledger.owners) {
    if (admin || user == caller) out.push_back(BudgetLine{"user", user, 0, account});
  }
  for (const auto& [id, account] : ledger.sweeps) {
    const store::SweepBudgetUse& sweep = use.sweeps.at(id);
    if (admin || store::OwnerName(sweep.owner) == caller) {
      out.push_back(BudgetLine{"sweep", sweep.name, id, account});
    }
  }
  return out;
}

absl::StatusOr<BudgetLine> Scheduler::SetBudget(const std::string& scope, const std::string& name,
                                                double hours, const std::string& who) {
  if (scope != "sweep" && scope != "user") {
    return absl::InvalidArgumentError(
        StrCat("a budget is a sweep's or a user's, not a '", scope, "' one"));
  }
  if (!IsAdminCaller(who)) {
    return absl::PermissionDeniedError(StrCat(who, " may not set the budget of ", scope, " '", name,
                                              "': that needs an admin token"));
  }
  const store::Audit audit{NowMicros(), who, StrCat("budget set to ", hours, " device-hours")};
  if (scope == "sweep") {
    CART_RETURN_IF_ERROR(store_->SetSweepBudget(name, hours, audit));
  } else {
    CART_RETURN_IF_ERROR(store_->SetUserBudget(name, hours, audit));
  }
  WakePollers();  // a raised budget may let a waiting run start; the finish is planned again
  CART_ASSIGN_OR_RETURN(std::vector<BudgetLine> lines, Budgets(who));
  for (BudgetLine& line : lines) {
    if (line.scope == scope && line.name == name) return std::move(line);
  }
  return absl::InternalError(StrCat("the budget of ", scope, " '", name, "' was set but not read"));
}

void Scheduler::NoteOverBudget(const std::map<int64_t, std::string>& refused) {
  absl::MutexLock lock(&mu_);
  for (const auto& [run_id, why] : refused) {
    if (not_placed_.size() < 10'000 || not_placed_.count(run_id)) not_placed_[run_id] = why;
  }
}

}  // namespace cart::server
