#include "server/http/study_view.h"

#include <cmath>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "report/plan.h"
#include "report/plan_json.h"
#include "report/report.h"

namespace cart::server {
namespace {

using nlohmann::json;

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json LookJson(const report::SequentialStatus& s) {
  if (!s.sequential) return nullptr;
  return json{{"look", s.look},
              {"seeds", s.look_seeds.empty() ? 0 : s.look_seeds.back()},
              {"seeds_target", s.seeds_target},
              {"fraction", Num(s.fraction)},
              {"alpha", Num(s.alpha)},
              {"alpha_spent", Num(s.alpha_spent)},
              {"boundary_z", Num(s.boundary)},
              {"boundary_p", Num(s.nominal)},
              {"crossed", s.crossed},
              {"conditional_power", Num(s.conditional_power)},
              {"futile", s.futile},
              {"awaiting", s.awaiting},
              {"text", report::LookText(s)}};
}

}  // namespace

json SpendingJson(const store::Spending& s, const store::EnergyPrices& prices) {
  const store::SpendingFigures f = store::FiguresOf(s, prices);
  return json{
      {"attempts", s.attempts},
      {"measured_attempts", s.measured_attempts},
      {"energy_kwh", s.measured_attempts > 0 ? json(f.kwh) : json(nullptr)},
      {"sources", s.sources},
      {"device_hours", s.device_hours},
      {"cost", prices.per_kwh > 0 && s.measured_attempts > 0 ? json(f.cost) : json(nullptr)},
      {"currency", prices.currency},
      {"co2_grams",
       prices.co2_grams_per_kwh > 0 && s.measured_attempts > 0 ? json(f.co2_grams) : json(nullptr)},
      {"text", store::SpendingLine(s, prices)}};
}

absl::StatusOr<json> StudyJson(store::RunStore& store, const StudyQuery& query) {
  report::ReportOptions options;
  options.plots = false;
  for (const auto& [part, sweep] : query.sweeps) {
    CART_RETURN_IF_ERROR(report::SetStudyPart(options.sweeps, part, sweep));
  }
  std::unique_ptr<report::StudySource> source = report::StoreSource(store, query.prices);
  CART_ASSIGN_OR_RETURN(report::Report built, report::BuildReport(*source, options));
  report::PlanOptions plan_options;
  plan_options.power = query.power;
  plan_options.alpha = query.alpha;
  CART_ASSIGN_OR_RETURN(std::vector<report::ClaimPlan> plans,
                        report::PlanSeeds(built, plan_options));
  json claims = json::array();
  for (const report::ClaimLine& c : built.claims) {
    claims.push_back({{"id", c.id},
                      {"claim", c.claim},
                      {"published", c.published},
                      {"verdict", c.verdict},
                      {"evidence", c.evidence},
                      {"confounded", c.confounded},
                      {"look", LookJson(c.sequential)},
                      {"runs", c.runs},
                      {"spending", SpendingJson(c.spending, built.prices)}});
  }
  // What each sweep of the study cost (Report::costs), the claims' runs counted once each there.
  json costs = json::array();
  for (const report::PartCost& p : built.costs) {
    costs.push_back({{"part", p.part},
                     {"sweep", p.sweep},
                     {"runs", p.runs},
                     {"spending", SpendingJson(p.spending, built.prices)}});
  }
  const json planned = report::PlansJson(plans);
  CART_ASSIGN_OR_RETURN(std::vector<store::PlanRecord> records, store.ListPlans());
  json applied = json::array();
  for (const store::PlanRecord& r : records) {
    json looks = json::array();
    for (const store::PlanClaim& c : r.claims) {
      looks.push_back({{"claim", c.claim},
                       {"seeds_now", c.seeds_now},
                       {"seeds_target", c.seeds_target},
                       {"runs", c.runs},
                       {"rtx3090_hours", Num(c.hours)}});
    }
    applied.push_back({{"plan_id", r.id},
                       {"created_us", r.created_us},
                       {"created_by", r.created_by},
                       {"power", Num(r.power)},
                       {"alpha", Num(r.alpha)},
                       {"budget_hours", r.budget_hours ? Num(*r.budget_hours) : json(nullptr)},
                       {"spending", r.spending},
                       {"claims", looks},
                       {"runs", r.run_ids.size()}});
  }
  return json{{"power", query.power}, {"alpha", query.alpha}, {"claims", claims},
              {"costs", costs},       {"plans", planned},     {"applied", applied}};
}

}  // namespace cart::server
