#include "server/http/budget_api.h"

#include <cmath>

#include "common/status.h"
#include "common/strings.h"
#include "server/http/request_body.h"

namespace cart::server::http {

using nlohmann::json;

json BudgetJson(const BudgetLine& b) {
  return json{{"scope", b.scope},          {"name", b.name},         {"limit", b.account.limit},
              {"spent", b.account.spent},  {"held", b.account.held}, {"left", b.account.Left()},
              {"source", b.account.source}};
}

absl::StatusOr<json> BudgetApi(Scheduler& scheduler, const Request& request,
                               const std::vector<std::string>& parts, const std::string& who) {
  if (parts.size() != 1) {
    return absl::NotFoundError(
        StrCat("no API endpoint ", request.method, " ", request.path, " (see docs/dashboard.md)"));
  }
  if (request.method == "GET") {
    CART_ASSIGN_OR_RETURN(std::vector<BudgetLine> budgets, scheduler.Budgets(who));
    json out = json::array();
    for (const BudgetLine& b : budgets) out.push_back(BudgetJson(b));
    return json{{"budgets", out}};
  }
  if (request.method != "POST") {
    return absl::NotFoundError(
        StrCat("no API endpoint ", request.method, " ", request.path, " (see docs/dashboard.md)"));
  }
  CART_ASSIGN_OR_RETURN(json body, ActionBody(request, {"sweep", "user", "device_hours"}));
  const bool sweep = body.contains("sweep");
  if (sweep == body.contains("user")) {
    return absl::InvalidArgumentError("a budget names one of \"sweep\" and \"user\"");
  }
  const json& name = body[sweep ? "sweep" : "user"];
  if (!name.is_string() || name.get<std::string>().empty()) {
    return absl::InvalidArgumentError(
        StrCat("\"", sweep ? "sweep" : "user", "\" must be a non-empty string"));
  }
  const json& hours = body.value("device_hours", json());
  if (!hours.is_number() || !(hours.get<double>() > 0) || !std::isfinite(hours.get<double>())) {
    return absl::InvalidArgumentError("\"device_hours\" must be a number > 0");
  }
  CART_ASSIGN_OR_RETURN(BudgetLine set,
                        scheduler.SetBudget(sweep ? "sweep" : "user", name.get<std::string>(),
                                            hours.get<double>(), who));
  return BudgetJson(set);
}

}  // namespace cart::server::http
