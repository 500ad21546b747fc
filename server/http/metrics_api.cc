// GET /metrics: cartd's state for Prometheus (server/http/prometheus.h), with each claim's
// cost computed over the study at most once a minute.

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "report/report.h"
#include "server/http/dashboard.h"
#include "server/http/internal/api_util.h"
#include "server/http/prometheus.h"
#include "server/scheduler.h"

namespace cart::server::http {

using nlohmann::json;

absl::StatusOr<std::vector<ClaimCost>> Dashboard::ClaimCosts() {
  absl::MutexLock lock(&claims_mu_);
  const absl::Time now = absl::Now();
  if (now - claims_at_ < absl::Minutes(1)) return claim_costs_;
  report::ReportOptions options;
  options.plots = false;
  std::unique_ptr<report::StudySource> source = report::StoreSource(scheduler_->store());
  CART_ASSIGN_OR_RETURN(report::Report built, report::BuildReport(*source, options));
  claim_costs_.clear();
  for (const report::ClaimLine& c : built.claims) {
    if (c.runs > 0)
      claim_costs_.push_back({c.id, c.runs, c.spending});  // a claim with no runs yet has no series
  }
  claims_at_ = now;
  return claim_costs_;
}

Response Dashboard::Metrics() {
  absl::StatusOr<std::vector<ClaimCost>> claims = ClaimCosts();
  if (!claims.ok()) return Error(claims.status());
  absl::StatusOr<std::string> text = RenderPrometheus(*scheduler_, options_.storage, *claims);
  if (!text.ok()) return Error(text.status());
  Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = std::move(*text);
  return r;
}

}  // namespace cart::server::http
