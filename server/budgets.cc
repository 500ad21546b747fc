// Whether a queued run fits the budgets that apply to it (server/budgets.h).

#include "server/budgets.h"

#include <algorithm>

#include "common/strings.h"

namespace cart::server {
namespace {

// Slack for float sums: a run that fills a budget exactly may start.
constexpr double kEpsilon = 1e-9;

// Why `account` cannot take `need` more device-hours (`known`: the run's work is known), or
// empty. `whose` names the budget ("sweep 'stage2'"), `raise` the command's scope argument.
std::string Refusal(const BudgetAccount& account, double need, bool known, const std::string& whose,
                    const std::string& raise, const std::string& worker) {
  if (account.limit <= 0) return "";
  const double left = account.Left();
  if (known ? need <= left + kEpsilon : left > kEpsilon) return "";
  std::string out = StrCat("waits for budget: ", whose, " has ", DeviceHours(std::max(left, 0.0)),
                           " left of its ", DeviceHours(account.limit), " (",
                           DeviceHours(account.spent), " spent");
  if (account.held > 0) out += StrCat(", ", DeviceHours(account.held), " held by running runs");
  out += ")";
  if (known) out += StrCat(" and this run needs about ", DeviceHours(need), " on worker ", worker);
  return StrCat(out, "; an admin raises it with `cart budget set ", raise,
                " --device-hours N` (docs/operations.md \"Budgets\")");
}

}  // namespace

bool BudgetLedger::Empty() const {
  return std::none_of(sweeps.begin(), sweeps.end(),
                      [](const auto& s) { return s.second.limit > 0; }) &&
         std::none_of(owners.begin(), owners.end(),
                      [](const auto& o) { return o.second.limit > 0; });
}

std::string DeviceHours(double hours) {
  // Small budgets (tests, a trial sweep) keep their digits; large ones read as hours.
  return StrCat(hours != 0 && hours < 0.1 ? Fixed(hours, 4) : Fixed(hours, 1), " device-hours");
}

std::string BudgetRefusal(const BudgetLedger& ledger, const store::PlaceableRun& run, double speed,
                          const std::string& worker) {
  const double work = run.RemainingHours();
  const bool known = work > 0 && speed > 0;
  const double need = known ? work / speed : 0;
  if (const auto s = ledger.sweeps.find(run.sweep_id); s != ledger.sweeps.end()) {
    const auto name = ledger.sweep_names.find(run.sweep_id);
    const std::string sweep =
        name == ledger.sweep_names.end() ? StrCat(run.sweep_id) : name->second;
    std::string why = Refusal(s->second, need, known, StrCat("sweep '", sweep, "'"),
                              StrCat("--sweep ", sweep), worker);
    if (!why.empty()) return why;
  }
  const std::string user(store::OwnerName(run.owner));
  if (const auto o = ledger.owners.find(user); o != ledger.owners.end()) {
    return Refusal(o->second, need, known, StrCat("user '", user, "'"), StrCat("--user ", user),
                   worker);
  }
  return "";
}

void HoldOverBudget(const BudgetLedger& ledger, double speed, const std::string& worker,
                    std::vector<store::PlaceableRun>& queued,
                    std::map<int64_t, std::string>* refused) {
  if (ledger.Empty()) return;
  auto kept = queued.begin();
  for (auto it = queued.begin(); it != queued.end(); ++it) {
    std::string why = BudgetRefusal(ledger, *it, speed, worker);
    if (why.empty()) {
      if (kept != it) *kept = std::move(*it);
      ++kept;
    } else if (refused != nullptr) {
      (*refused)[it->id] = std::move(why);
    }
  }
  queued.erase(kept, queued.end());
}

}  // namespace cart::server
