#pragma once

// The dashboard's budget endpoints (docs/dashboard.md "Budgets"), over the Scheduler:
//
//   GET  /api/v1/budgets   the caller's budget and their sweeps' (an admin: every one), each
//                          {scope, name, limit, spent, held, left, source} in device-hours
//   POST /api/v1/budgets   {sweep | user, device_hours}: sets one (admins; never below spent)
//
// The Dashboard routes `parts` (the path after /api/v1/, split) here when parts[0] is
// "budgets", after its token and origin checks. BudgetJson is also each sweep's "budget".

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http/http_server.h"
#include "server/scheduler.h"

namespace cart::server::http {

nlohmann::json BudgetJson(const BudgetLine& budget);

// The answer's JSON; NotFound for another path under /budgets; the Scheduler's errors with their
// codes (InvalidArgument naming the field, PermissionDenied, FailedPrecondition below spent).
absl::StatusOr<nlohmann::json> BudgetApi(Scheduler& scheduler, const Request& request,
                                         const std::vector<std::string>& parts,
                                         const std::string& who);

}  // namespace cart::server::http
