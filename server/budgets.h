#pragma once

// Device-hour budgets (docs/operations.md "Budgets"): whether a queued run may start without
// overrunning its sweep's budget or its owner's. Pure, beside server/placement.h: the Scheduler
// gathers the ledger (limits from the store and cartd's config, what each sweep's attempts have
// used, what its running runs are still expected to use) and drops the refused runs from the
// queue before placement and preemption see it, keeping the reason as the run's "why it waits".
//
// The accounting, the same wherever a budget is read (`cart sweep show`, `cart budget ls`, the
// dashboard, `cart plan --budget`): a device-hour is an hour of one worker's device, whatever the
// device. Spent: every attempt from its start (its lease when it never started) to its end, or
// now while it runs. Held: what the running runs are still expected to take on their workers.
// A run may start when spent + held + its own remaining work on the worker that would take it
// (its RTX 3090 hours / that worker's speed) stays within every budget that applies; a run
// whose work is unknown may start while anything is left.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "store/types.h"

namespace cart::server {

// One budget's account, in device-hours.
struct BudgetAccount {
  double limit = 0;  // 0: none
  double spent = 0;
  double held = 0;     // expected rest of its running runs
  std::string source;  // where the limit comes from: "sweep file", "admin NAME", "cartd config"
  double Left() const { return limit - spent - held; }
};

struct BudgetLedger {
  std::map<int64_t, BudgetAccount> sweeps;      // by sweep id
  std::map<std::string, BudgetAccount> owners;  // by user (store::OwnerName)
  std::map<int64_t, std::string> sweep_names;   // for the reasons
  bool Empty() const;                           // no limit anywhere
};

// Why `run` may not start on a worker of `speed` (× an RTX 3090; > 0) named `worker`, or empty
// when it may. The reason names the budget, what is left and what the run needs, and how it is
// raised.
std::string BudgetRefusal(const BudgetLedger& ledger, const store::PlaceableRun& run, double speed,
                          const std::string& worker);

// Removes from `queued` every run BudgetRefusal refuses at `speed`; each one's reason goes in
// `refused` (when given).
void HoldOverBudget(const BudgetLedger& ledger, double speed, const std::string& worker,
                    std::vector<store::PlaceableRun>& queued,
                    std::map<int64_t, std::string>* refused);

// "12.3 device-hours" style text for a number of device-hours.
std::string DeviceHours(double hours);

}  // namespace cart::server
