// GET /api/v1/study: the study view (server/http/study_view.h) with its query checked.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/strings.h"
#include "server/http/dashboard.h"
#include "server/http/internal/api_util.h"
#include "server/http/study_view.h"
#include "server/scheduler.h"

namespace cart::server::http {

using nlohmann::json;

Response Dashboard::Study(const Request& request) {
  StudyQuery query;
  for (const auto& [key, field] : std::initializer_list<std::pair<const char*, double*>>{
           {"power", &query.power}, {"alpha", &query.alpha}}) {
    const std::string text = request.Query(key);
    if (text.empty()) continue;
    const std::optional<double> v = ParseDouble(text);
    if (!v || !(*v > 0 && *v < 1)) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat("query parameter '", key, "': '", text, "' is not a number in (0, 1)"));
    }
    *field = *v;
  }
  for (const char* part :
       {"stage1", "stage2", "baselines", "ablations", "faithfulness", "leak", "variable_r"}) {
    if (!request.Query(part).empty()) query.sweeps[part] = request.Query(part);
  }
  query.prices = options_.prices;
  absl::StatusOr<json> out = StudyJson(scheduler_->store(), query);
  if (!out.ok()) return Error(out.status());
  return Json(*out);
}

}  // namespace cart::server::http
