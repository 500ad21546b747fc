#include "report/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/strings.h"
#include "config/accounting.h"
#include "config/config.h"
#include "report/sequential.h"
#include "report/stats.h"

namespace cart::report {
namespace {

// A side's config rebuilt from its keys (docs/model.md §9), costed as `cart sweep submit
// --dry-run` costs it: RTX 3090 hours and the least memory per run; zeros when its keys do not
// make a config.
SideSeeds Side(const std::map<std::string, std::string>& keys, int64_t template_run, int64_t runs) {
  SideSeeds side;
  side.config = keys;
  side.template_run = template_run;
  side.runs = runs;
  config::RunConfig config;
  for (const auto& [key, value] : keys) {
    if (!config::SetKey(config, key, value).ok()) return side;
  }
  side.hours_each = config::EstimateRunCost(config, /*eval=*/false, {}).rtx3090_hours;
  side.memory_bytes_each = config::MinTrainingBytes(config, config::GpuWorkerKernels());
  return side;
}

// The seeds a sequential design needs for the power of a fixed design of `fixed` seeds: looks at
// the seeds of the claim's earlier looks and now, then at the last; inflated until stable.
int64_t SequentialSeeds(int64_t fixed, const std::vector<int64_t>& looks, double level,
                        double power) {
  int64_t n = fixed;
  for (int i = 0; i < 4; ++i) {
    std::vector<double> fractions;
    for (int64_t l : looks) {
      if (l >= 1 && l < n) fractions.push_back(static_cast<double>(l) / static_cast<double>(n));
    }
    fractions.push_back(1);
    const double inflation =
        stats::InflationFactor(fractions, level, stats::Spending::kOBrienFleming, power);
    if (std::isnan(inflation)) return n;
    const int64_t next = std::max<int64_t>(
        fixed, static_cast<int64_t>(std::ceil(static_cast<double>(fixed) * inflation - 1e-9)));
    if (next == n) break;
    n = next;
  }
  return n;
}

TestPlan PlanTest(const TestNumbers& t, double target, const PlanOptions& options, int tests,
                  const SequentialStatus& sequential) {
  TestPlan plan;
  plan.label = t.label;
  if (t.kind == "trend" || t.kind == "best_at") {
    plan.note = fmt::format("a {} test: not planned (only compare and value tests are)", t.kind);
    return plan;
  }
  if (t.over_items) {
    plan.note =
        "a test over items (each item's outcome, paired): not planned (the planner sizes seeds "
        "of per-run tests)";
    return plan;
  }
  if (t.within) {
    plan.note = "a band or margin test: not planned (an equivalence test needs its own design)";
    return plan;
  }
  if (sequential.futile) {
    plan.note = fmt::format(
        "stopped for futility: conditional power {:.2f} at look {} is below the floor; more "
        "seeds are unlikely to decide it at the paper's effect",
        sequential.conditional_power, sequential.look);
    return plan;
  }
  if (sequential.awaiting) {
    plan.note = fmt::format(
        "plan {} queued seeds for it up to {} per side and none has finished yet: its next look "
        "comes when they do (`cart runs ls --sweep ...` shows them; resume any that failed)",
        sequential.plan_id, sequential.seeds_target);
    return plan;
  }
  if (t.confounded) {
    plan.note =
        "confounded with the device class: more seeds do not help; balance the sweep's "
        "seeds over classes (device_classes: {balance: true})";
    return plan;
  }
  if (std::isnan(target) || target == 0) {
    plan.note = "no effect to plan for: the paper gives none; give --smallest-effect CLAIM=VALUE";
    return plan;
  }
  const bool no_runs = t.arms.empty() || std::any_of(t.arms.begin(), t.arms.end(),
                                                     [](const auto& arm) { return arm.empty(); });
  if (no_runs) {
    plan.note =
        "a side has no finished run: submit (or finish) its sweep first; the plan adds "
        "seeds to configs that have run";
    return plan;
  }
  const bool two_arms = t.kind == "compare" && !t.paired;
  plan.design = t.kind == "value" ? "one-sample t" : t.paired ? "paired t" : "Welch t";
  plan.seeds_now = two_arms ? std::min(t.n, t.n2) : t.n;
  // The spread of one seed from the effect's standard error: se √n for one sample or pairs;
  // se / √(1/n + 1/n2) for two arms (their pooled spread, as the power solver assumes).
  double sd = std::numeric_limits<double>::quiet_NaN();
  if (!std::isnan(t.se) && t.se > 0) {
    sd = two_arms ? t.se / std::sqrt(1.0 / t.n + 1.0 / t.n2)
                  : t.se * std::sqrt(static_cast<double>(t.n));
  } else if (!std::isnan(options.prior_sd)) {
    sd = options.prior_sd;
    plan.prior = true;
  } else {
    plan.note = fmt::format(
        "{} seed(s) per side: no spread measured and no prior; give --prior-sd (the spread of "
        "one seed{}, in the test's own scale{})",
        plan.seeds_now, t.paired ? "'s difference" : "", t.log_scale ? ": log values" : "");
    return plan;
  }
  plan.sd = sd;
  const double level = options.alpha / std::max(1, tests);
  const double raw = t.log_scale ? std::log1p(target / 100) : target;
  plan.effect = target;
  const double n = stats::SeedsForPower(
      std::abs(raw) / sd, two_arms ? stats::Design::kTwoArms : stats::Design::kOneSample, level,
      options.power);
  if (std::isnan(n)) {
    plan.note = "the power solver found no number of seeds (over a billion)";
    return plan;
  }
  plan.fixed_seeds = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(n - 1e-9)));
  // The looks the claim has had (this one included), so that deciding at the next look spends
  // the level by the boundary and still has the power asked for.
  std::vector<int64_t> looks = sequential.look_seeds;
  if (looks.empty() || looks.back() < plan.seeds_now) looks.push_back(plan.seeds_now);
  plan.looks = static_cast<int>(looks.size()) + 1;
  plan.seeds_needed = SequentialSeeds(plan.fixed_seeds, looks, level, options.power);
  // Each side lacks what it has not: the second side of two arms has n2 runs, not n.
  for (size_t i = 0; i < t.arms.size(); ++i) {
    const int64_t now = two_arms && i == 1 ? t.n2 : t.n;
    SideSeeds side = Side(t.arms[i], i < t.arm_runs.size() ? t.arm_runs[i] : 0,
                          std::max<int64_t>(0, plan.seeds_needed - now));
    plan.runs += side.runs;
    plan.hours += static_cast<double>(side.runs) * side.hours_each;
    plan.sides.push_back(std::move(side));
  }
  return plan;
}

}  // namespace

absl::StatusOr<std::vector<ClaimPlan>> PlanSeeds(const Report& report, const PlanOptions& options) {
  if (!(options.power > 0 && options.power < 1)) {
    return absl::InvalidArgumentError(
        StrCat("power ", options.power, " is outside (0, 1): give a probability such as 0.8"));
  }
  if (!(options.alpha > 0 && options.alpha < 1)) {
    return absl::InvalidArgumentError(StrCat("alpha ", options.alpha, " is outside (0, 1)"));
  }
  if (!std::isnan(options.prior_sd) && !(options.prior_sd > 0 && std::isfinite(options.prior_sd))) {
    return absl::InvalidArgumentError(
        StrCat("prior sd ", options.prior_sd, " must be a positive number"));
  }
  std::vector<std::string> ids;
  for (const ClaimLine& c : report.claims) ids.push_back(c.id);
  for (const auto& [id, effect] : options.smallest_effect) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
      return absl::InvalidArgumentError(
          StrCat("smallest effect for claim '", id,
                 "', which the report does not have (claims: ", StrJoin(ids, ", "), ")"));
    }
    if (!std::isfinite(effect) || effect == 0) {
      return absl::InvalidArgumentError(
          StrCat("smallest effect for claim '", id, "' must be a non-zero number"));
    }
  }
  std::vector<ClaimPlan> plans;
  for (const ClaimLine& c : report.claims) {
    if (c.verdict != "cannot tell") continue;
    ClaimPlan plan;
    plan.id = c.id;
    plan.claim = c.claim;
    plan.planned = true;
    const auto smallest = options.smallest_effect.find(c.id);
    const int tests = static_cast<int>(c.numbers.size());
    plan.seeds_now = c.seeds;
    for (const TestNumbers& t : c.numbers) {
      if (t.verdict != "cannot tell") continue;
      const double target = smallest != options.smallest_effect.end() ? smallest->second
                            : std::isnan(t.published)                 ? t.published
                            : t.log_scale ? std::expm1(t.published) * 100
                                          : t.published;
      TestPlan test = PlanTest(t, target, options, tests, c.sequential);
      if (!test.note.empty()) {
        plan.planned = false;
        if (plan.note.empty()) plan.note = StrCat(test.label, ": ", test.note);
      }
      // A side shared by several tests (one baseline against several changes) is counted once,
      // at the most seeds any of them needs.
      for (const SideSeeds& side : test.sides) {
        auto same = std::find_if(plan.sides.begin(), plan.sides.end(),
                                 [&](const SideSeeds& s) { return s.config == side.config; });
        if (same == plan.sides.end()) {
          plan.sides.push_back(side);
        } else {
          same->runs = std::max(same->runs, side.runs);
        }
      }
      plan.tests.push_back(std::move(test));
    }
    for (const SideSeeds& side : plan.sides) {
      plan.runs += side.runs;
      plan.hours += static_cast<double>(side.runs) * side.hours_each;
    }
    if (plan.tests.empty()) {
      plan.planned = false;
      plan.note =
          "no test of it cannot tell by itself (the claim waits on runs that have not "
          "finished)";
    }
    plans.push_back(std::move(plan));
  }
  std::stable_sort(plans.begin(), plans.end(), [](const ClaimPlan& a, const ClaimPlan& b) {
    if (a.planned != b.planned) return a.planned;
    return a.planned && a.hours < b.hours;
  });
  return plans;
}

}  // namespace cart::report
