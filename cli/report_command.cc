// cart report: the study's tables beside the paper's figures, CSVs and plots, from cartd over
// gRPC or straight from a database file (report/report.h).

#include "cli/report_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/table.h"
#include "common/status.h"
#include "common/strings.h"
#include "report/plan.h"
#include "report/plan_json.h"
#include "report/report.h"
#include "store/run_store.h"

namespace cart::cli {
namespace {

// The runs of a sweep through ListRuns, their latest values through GetRun (one call per run:
// ListRuns carries no metrics), series through QueryTable.
class ServiceStudySource : public report::StudySource {
 public:
  explicit ServiceStudySource(Client client) : client_(std::move(client)) {}

  absl::StatusOr<std::vector<report::StudyRun>> Runs(const std::string& sweep) override {
    std::vector<report::StudyRun> out;
    if (!ReadSweeps().count(sweep)) return out;
    cart::v1::ListRunsRequest req;
    req.set_sweep(sweep);
    cart::v1::ListRunsResponse runs = ListAllRuns(client_, req);
    for (const cart::v1::RunView& listed : runs.runs()) {
      cart::v1::GetRunRequest get;
      get.set_run_id(listed.run_id());
      cart::v1::GetRunResponse full =
          client_.Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
              &cart::v1::SchedulerService::Stub::GetRun, get);
      const cart::v1::RunView& v = full.run();
      report::StudyRun r;
      r.id = v.run_id();
      r.sweep = v.sweep();
      r.name = v.name();
      r.kind = v.kind() == cart::v1::JOB_KIND_EVAL ? JobKind::kEval : JobKind::kTrain;
      r.state = cart::v1::RunState_Name(v.state()).substr(10);  // without "RUN_STATE_"
      r.finished = v.state() == cart::v1::RUN_STATE_SUCCEEDED;
      r.params.insert(v.params().begin(), v.params().end());
      r.values.insert(v.latest().begin(), v.latest().end());
      r.step = v.step();
      r.total_steps = v.total_steps();
      r.stored_params = v.stored_params();
      r.device_classes.assign(v.device_classes().begin(), v.device_classes().end());
      const cart::v1::SpendingView& spent = full.spending();
      r.spending.attempts = spent.attempts();
      r.spending.measured_attempts = spent.measured_attempts();
      r.spending.energy_j = spent.energy_kwh() * 3.6e6;
      r.spending.device_hours = spent.device_hours();
      r.spending.sources.assign(spent.sources().begin(), spent.sources().end());
      out.push_back(std::move(r));
    }
    return out;
  }

  absl::StatusOr<std::vector<report::StudyPoint>> Series(int64_t run_id, const std::string& metric,
                                                         int64_t max_points) override {
    cart::v1::QueryTableRequest req;
    req.set_table("series");
    req.set_run_id(run_id);
    req.set_metric(metric);
    req.set_max_points(static_cast<int32_t>(max_points > 0 ? max_points : 100'000));
    grpc::ClientContext ctx;
    rpc::PrepareContext(ctx, client_.config(), 60'000);
    cart::v1::Table table;
    grpc::Status s = client_.stub().QueryTable(&ctx, req, &table);
    std::vector<report::StudyPoint> out;
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) return out;  // never logged
    if (!s.ok()) client_.Fail(s);
    for (const cart::v1::TableRow& row : table.rows()) {
      if (row.cells_size() < 2) continue;
      out.push_back({static_cast<int64_t>(row.cells(0).mean()), row.cells(1).mean()});
    }
    return out;
  }

  absl::StatusOr<std::vector<report::ItemOutcomes>> EvalItems(int64_t run_id) override {
    cart::v1::GetEvalItemsRequest req;
    req.set_run_id(run_id);
    const cart::v1::GetEvalItemsResponse items =
        client_.Call<cart::v1::GetEvalItemsRequest, cart::v1::GetEvalItemsResponse>(
            &cart::v1::SchedulerService::Stub::GetEvalItems, req);
    std::vector<report::ItemOutcomes> out;
    for (const cart::v1::EvalItems& e : items.tasks()) {
      out.push_back({e.task(), e.loops(), e.correct(), e.correct_norm(),
                     std::vector<double>(e.logprob().begin(), e.logprob().end())});
    }
    return out;
  }

  // cartd's prices, as ListSweeps gave them.
  absl::StatusOr<store::EnergyPrices> Prices() override {
    ReadSweeps();
    return prices_;
  }

  absl::StatusOr<std::vector<report::ClaimLook>> Looks() override {
    const cart::v1::ListPlansResponse plans =
        client_.Call<cart::v1::ListPlansRequest, cart::v1::ListPlansResponse>(
            &cart::v1::SchedulerService::Stub::ListPlans, {});
    std::vector<report::ClaimLook> out;
    for (const cart::v1::PlanView& p : plans.plans()) {
      for (const cart::v1::PlanClaimLook& c : p.claims()) {
        out.push_back({c.claim(), p.plan_id(), c.seeds_now(), c.seeds_target(), p.alpha(),
                       p.spending(), std::vector<int64_t>(p.run_ids().begin(), p.run_ids().end())});
      }
    }
    return out;
  }

 private:
  // cartd's sweep names, and its prices with them: one ListSweeps per report, on first use by
  // either Runs or Prices.
  const std::set<std::string>& ReadSweeps() {
    if (!sweep_names_) {
      cart::v1::ListSweepsResponse sweeps =
          client_.Call<cart::v1::ListSweepsRequest, cart::v1::ListSweepsResponse>(
              &cart::v1::SchedulerService::Stub::ListSweeps, {});
      sweep_names_.emplace();
      for (const auto& s : sweeps.sweeps()) sweep_names_->insert(s.name());
      prices_.per_kwh = sweeps.prices().per_kwh();
      prices_.currency = sweeps.prices().currency();
      prices_.co2_grams_per_kwh = sweeps.prices().co2_grams_per_kwh();
    }
    return *sweep_names_;
  }

  Client client_;
  std::optional<std::set<std::string>> sweep_names_;  // cartd's sweeps, read on first use
  store::EnergyPrices prices_;                        // cartd's, read with them
};

struct ReportArgs {
  Conn conn;
  std::string db;
  std::string format = "md";
  bool no_plots = false;
  std::optional<double> price_per_kwh, co2_per_kwh;
  std::string currency = "EUR";
  report::ReportOptions options;
};

absl::Status Write(report::StudySource& source, const report::ReportOptions& options) {
  CART_ASSIGN_OR_RETURN(report::Report built, report::BuildReport(source, options));
  CART_RETURN_IF_ERROR(report::WriteReport(built, options));
  int tables = 0, plots = 0, incomplete = 0;
  for (const report::Section& s : built.sections) {
    tables += static_cast<int>(s.tables.size());
    plots += static_cast<int>(s.plots.size());
    incomplete += !s.status.empty();
  }
  std::cout << fmt::format("report: {} sections ({} not complete), {} tables, {} plots\n",
                           built.sections.size(), incomplete, tables, options.plots ? plots : 0);
  const std::filesystem::path out(options.out_dir);
  std::cout << (out / "report.md").string() << "\n";
  if (options.html) std::cout << (out / "report.html").string() << "\n";
  return absl::OkStatus();
}

void RunReport(ReportArgs& a) {
  a.options.plots = !a.no_plots;
  a.options.html = a.format == "html";
  if (a.price_per_kwh || a.co2_per_kwh) {
    // Given here, they price the report instead of cartd's (or the none of a database file).
    a.options.prices.emplace();
    a.options.prices->per_kwh = a.price_per_kwh.value_or(0);
    a.options.prices->currency = a.currency;
    a.options.prices->co2_grams_per_kwh = a.co2_per_kwh.value_or(0);
  }
  absl::Status status;
  if (!a.db.empty()) {
    std::unique_ptr<store::RunStore> opened = OpenDatabaseFile(a.db, "--db");
    std::unique_ptr<report::StudySource> source = report::StoreSource(*opened);
    status = Write(*source, a.options);
  } else {
    ServiceStudySource source(Client::Connect(a.conn));
    status = Write(source, a.options);
  }
  if (!status.ok()) ExitWith(status);
}

// The flags that say which study a report or a plan reads: its validation set, claims file and
// the sweep of each part.
void AddStudyFlags(CLI::App* cmd, report::ReportOptions& options) {
  cmd->add_option("--val-set", options.val_set,
                  "Validation set of the perplexity tables (default: wiki, else the first)");
  cmd->add_option("--claims", options.claims_file,
                  "Claims file to decide instead of the paper's compiled-in claims (the form of "
                  "report/claims.yaml; docs/study.md, \"Claims and verdicts\")");
  for (auto [part, field] : report::StudyParts(options.sweeps)) {
    std::string flag = "--" + part;  // --variable-r
    std::replace(flag.begin(), flag.end(), '_', '-');
    cmd->add_option(flag, *field, StrCat("Sweep holding this part of the study"))
        ->capture_default_str();
  }
}

struct PlanArgs {
  Conn conn;
  std::string db;
  bool apply = false;
  std::optional<double> budget;  // RTX 3090 hours
  std::vector<std::string> smallest;
  double prior_sd = std::numeric_limits<double>::quiet_NaN();
  report::ReportOptions options;
  report::PlanOptions plan;
};

// Each planned claim's expected finish: its new runs queued now behind cartd's queue, placed on
// the live fleet by cartd's own plan (ForecastRuns), each claim alone.
void ForecastPlans(Client& client, std::vector<report::ClaimPlan>& plans) {
  for (report::ClaimPlan& p : plans) {
    if (!p.planned || p.runs == 0) continue;
    cart::v1::ForecastRunsRequest req;
    for (const report::SideSeeds& side : p.sides) {
      if (side.hours_each <= 0) continue;
      for (int64_t i = 0; i < side.runs; ++i) {
        cart::v1::ForecastRun* run = req.add_runs();
        run->set_rtx3090_hours(side.hours_each);
        run->set_memory_bytes(side.memory_bytes_each);
      }
    }
    if (req.runs_size() == 0) continue;
    const cart::v1::ForecastRunsResponse resp =
        client.Call<cart::v1::ForecastRunsRequest, cart::v1::ForecastRunsResponse>(
            &cart::v1::SchedulerService::Stub::ForecastRuns, req);
    int64_t last = 0;
    bool all = true;
    for (int64_t at : resp.expected_finish_us()) {
      all = all && at > 0;
      last = std::max(last, at);
    }
    p.expected_finish_us = all ? last : 0;
  }
}

// RTX 3090 hours for reading: one decimal, or two significant digits below 0.1 (a CPU-scale
// study's runs take seconds).
std::string Hours(double h) {
  return h < 0.1 ? fmt::format("{:.2g}", h) : fmt::format("{:.1f}", h);
}

// The sweeps' device-hour budgets a plan's seeds count against: each side's new seeds go into
// the sweep of the run they copy (SideSeeds::template_run).
struct SweepBudgets {
  std::map<std::string, double> left;           // sweep -> device-hours left (those with a budget)
  std::map<int64_t, std::string> sweep_of_run;  // template run -> its sweep
};

// The claims a budget takes, cheapest decision first, each whole or not at all; InvalidArgument
// when the budget is below the cheapest run any plan queues.
// `which` names the budget in those errors ("--budget 3", or the caller's device-hour budget).
// With `sweeps`, a claim is also left out when its seeds would pass what is left of a sweep's
// budget; `left_out` then says which (claim id -> why).
absl::StatusOr<std::vector<const report::ClaimPlan*>> WithinBudget(
    const std::vector<report::ClaimPlan>& plans, std::optional<double> budget,
    const std::string& which, const SweepBudgets* sweeps = nullptr,
    std::map<std::string, std::string>* left_out = nullptr) {
  std::vector<const report::ClaimPlan*> out;
  double cheapest = std::numeric_limits<double>::infinity(), spent = 0;
  std::map<std::string, double> sweep_spent;
  for (const report::ClaimPlan& p : plans) {
    if (!p.planned || p.runs == 0) continue;
    std::map<std::string, double> need;  // by sweep with a budget
    for (const report::SideSeeds& side : p.sides) {
      if (side.runs > 0) cheapest = std::min(cheapest, side.hours_each);
      if (sweeps == nullptr || side.runs == 0) continue;
      auto sweep = sweeps->sweep_of_run.find(side.template_run);
      if (sweep != sweeps->sweep_of_run.end() && sweeps->left.count(sweep->second)) {
        need[sweep->second] += static_cast<double>(side.runs) * side.hours_each;
      }
    }
    if (budget && spent + p.hours > *budget + 1e-9) {
      if (left_out)
        (*left_out)[p.id] = fmt::format("{} hours would pass the budget", Hours(p.hours));
      continue;
    }
    std::string over;
    for (const auto& [sweep, hours] : need) {
      const double left = sweeps->left.at(sweep) - sweep_spent[sweep];
      if (hours > left + 1e-9) {
        over = fmt::format("its seeds in sweep '{}' take {} hours; its budget has {} left", sweep,
                           Hours(hours), Hours(std::max(left, 0.0)));
        break;
      }
    }
    if (!over.empty()) {
      if (left_out) (*left_out)[p.id] = over;
      continue;
    }
    for (const auto& [sweep, hours] : need) sweep_spent[sweep] += hours;
    spent += p.hours;
    out.push_back(&p);
  }
  if (budget && std::isfinite(cheapest) && *budget < cheapest) {
    return absl::InvalidArgumentError(
        fmt::format("{} is smaller than one run: the cheapest run the plan queues takes {} "
                    "hours",
                    which, Hours(cheapest)));
  }
  if (budget && out.empty()) {
    double least = std::numeric_limits<double>::infinity();
    for (const report::ClaimPlan& p : plans) {
      if (p.planned && p.runs > 0) least = std::min(least, p.hours);
    }
    if (std::isfinite(least)) {
      return absl::InvalidArgumentError(
          fmt::format("{} takes no whole claim: the cheapest claim's seeds take {} hours", which,
                      Hours(least)));
    }
  }
  return out;
}

// Queues the plans a budget takes through cartd (ApplyPlan) and prints what it queued.
absl::Status ApplyPlans(Client& client, const PlanArgs& a,
                        const std::vector<report::ClaimPlan>& plans) {
  // The caller's device-hour budget holds what is queued too (docs/operations.md "Budgets"): a
  // plan's RTX 3090 hours are its runs' device-hours on a 3090, as placement counts them there.
  std::optional<double> budget = a.budget;
  std::string which = a.budget ? fmt::format("--budget {:g} RTX 3090 hours", *a.budget) : "";
  const auto budgets = client.Call<cart::v1::ListBudgetsRequest, cart::v1::ListBudgetsResponse>(
      &cart::v1::SchedulerService::Stub::ListBudgets, cart::v1::ListBudgetsRequest());
  for (const cart::v1::BudgetView& b : budgets.budgets()) {
    if (b.scope() != "user" || b.name() != budgets.caller()) continue;
    const double left = std::max(b.left_device_hours(), 0.0);
    if (!budget || left < *budget) {
      budget = left;
      which = fmt::format("user '{}''s budget, {} device-hours left,", b.name(), Hours(left));
    }
  }
  // Each sweep's budget holds the seeds queued into it: the sweeps of the runs they copy.
  SweepBudgets sweeps;
  for (const cart::v1::BudgetView& b : budgets.budgets()) {
    if (b.scope() == "sweep") sweeps.left[b.name()] = std::max(b.left_device_hours(), 0.0);
  }
  for (const report::ClaimPlan& p : plans) {
    for (const report::SideSeeds& side : p.sides) {
      if (sweeps.left.empty() || side.runs == 0 || side.template_run == 0 ||
          sweeps.sweep_of_run.count(side.template_run)) {
        continue;
      }
      cart::v1::GetRunRequest get;
      get.set_run_id(side.template_run);
      sweeps.sweep_of_run[side.template_run] =
          client
              .Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
                  &cart::v1::SchedulerService::Stub::GetRun, get)
              .run()
              .sweep();
    }
  }
  std::map<std::string, std::string> left_out;
  CART_ASSIGN_OR_RETURN(std::vector<const report::ClaimPlan*> chosen,
                        WithinBudget(plans, budget, which, &sweeps, &left_out));
  if (chosen.empty()) {
    if (a.conn.json) {
      std::cout << R"({"plan_id": 0, "runs": []})"
                << "\n";
    } else if (left_out.empty()) {
      std::cout << "nothing to queue: no claim that cannot tell has a plan\n";
    } else {
      std::cout << "nothing to queue: every planned claim passes a budget\n";
      for (const auto& [claim, why] : left_out)
        std::cout << "left out: " << claim << " (" << why << ")\n";
    }
    return absl::OkStatus();
  }
  cart::v1::ApplyPlanRequest req;
  // A side two claims share (one baseline against two changes) once, at the most seeds.
  std::map<std::pair<int64_t, std::map<std::string, std::string>>, cart::v1::PlanSide*> sides;
  std::vector<report::ClaimPlan> kept;
  for (const report::ClaimPlan* p : chosen) {
    cart::v1::PlanClaimLook* look = req.add_claims();
    look->set_claim(p->id);
    int64_t target = p->seeds_now;
    for (const report::TestPlan& t : p->tests) target = std::max(target, t.seeds_needed);
    look->set_seeds_now(p->seeds_now);
    look->set_seeds_target(target);
    look->set_runs(p->runs);
    look->set_rtx3090_hours(p->hours);
    for (const report::SideSeeds& side : p->sides) {
      if (side.runs == 0) continue;
      auto [it, fresh] = sides.emplace(std::make_pair(side.template_run, side.config), nullptr);
      if (fresh) {
        it->second = req.add_sides();
        it->second->mutable_config()->insert(side.config.begin(), side.config.end());
        it->second->set_template_run_id(side.template_run);
      }
      it->second->set_runs(std::max(it->second->runs(), side.runs));
    }
    kept.push_back(*p);
  }
  req.set_power(a.plan.power);
  req.set_alpha(a.plan.alpha);
  req.set_has_budget(a.budget.has_value());
  req.set_budget_hours(a.budget.value_or(0));
  req.set_spending("obrien-fleming");
  req.set_text(report::PlansJson(kept).dump());
  const cart::v1::ApplyPlanResponse resp =
      client.Call<cart::v1::ApplyPlanRequest, cart::v1::ApplyPlanResponse>(
          &cart::v1::SchedulerService::Stub::ApplyPlan, req);
  if (a.conn.json) {
    nlohmann::json runs = nlohmann::json::array();
    for (const cart::v1::PlannedRun& r : resp.runs()) {
      runs.push_back({{"run_id", r.run_id()},
                      {"sweep", r.sweep()},
                      {"name", r.name()},
                      {"seed", r.seed()},
                      {"kind", r.kind() == cart::v1::JOB_KIND_EVAL ? "eval" : "train"},
                      {"parent_run_id", r.parent_run_id()}});
    }
    std::cout << nlohmann::json{{"plan_id", resp.plan_id()}, {"runs", runs}}.dump(1) << "\n";
    return absl::OkStatus();
  }
  double hours = 0;
  std::vector<std::string> ids;
  for (const report::ClaimPlan& p : kept) {
    hours += p.hours;
    ids.push_back(p.id);
  }
  int64_t train = 0;
  for (const cart::v1::PlannedRun& r : resp.runs()) train += r.kind() != cart::v1::JOB_KIND_EVAL;
  std::cout << fmt::format(
      "plan {} queued: {} runs ({} new seeds, {} derived jobs) for {}; {} RTX 3090 hours{}\n",
      resp.plan_id(), resp.runs_size(), train, resp.runs_size() - train, StrJoin(ids, ", "),
      Hours(hours), a.budget ? fmt::format(" of a {:g}-hour budget", *a.budget) : std::string());
  // By sweep and kind: how many runs, their seeds and ids (every run: --json).
  struct Group {
    int64_t runs = 0, first = 0, last = 0;
    std::set<int64_t> seeds;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  for (const cart::v1::PlannedRun& r : resp.runs()) {
    Group& g = groups[{r.sweep(), r.kind() == cart::v1::JOB_KIND_EVAL ? "eval" : "train"}];
    if (g.runs++ == 0) g.first = r.run_id();
    g.last = r.run_id();
    g.seeds.insert(r.seed());
  }
  Table t;
  t.Header({"sweep", "kind", "runs", "seeds", "run ids"});
  for (const auto& [key, g] : groups) {
    t.Row({key.first, key.second, StrCat(g.runs),
           g.seeds.size() == 1 ? StrCat(*g.seeds.begin())
                               : StrCat(*g.seeds.begin(), "–", *g.seeds.rbegin()),
           StrCat(g.first, "–", g.last)});
  }
  t.Print(std::cout);
  for (const auto& [claim, why] : left_out) {
    std::cout << fmt::format("left out: {} ({})\n", claim, why);
  }
  std::cout << "each claim's next look spends its level by the O'Brien-Fleming-like boundary "
               "(docs/study.md \"Planning seeds\"): `cart report` once the seeds finish\n";
  return absl::OkStatus();
}

absl::Status PrintPlan(report::StudySource& source, PlanArgs& a, Client* client) {
  a.options.plots = false;
  CART_ASSIGN_OR_RETURN(report::Report built, report::BuildReport(source, a.options));
  CART_ASSIGN_OR_RETURN(std::vector<report::ClaimPlan> plans, report::PlanSeeds(built, a.plan));
  if (client != nullptr) ForecastPlans(*client, plans);
  if (a.apply) return ApplyPlans(*client, a, plans);
  if (a.conn.json) {
    std::cout << report::PlansJson(plans).dump(1) << "\n";
    return absl::OkStatus();
  }
  if (plans.empty()) {
    std::cout << "every claim is decided: nothing to plan\n";
    return absl::OkStatus();
  }
  const bool any =
      std::any_of(plans.begin(), plans.end(), [](const report::ClaimPlan& p) { return p.planned; });
  std::cout << (any ? fmt::format("seeds per side to decide each claim that cannot tell at power "
                                  "{:.2f} (alpha {:.2f} over its tests, Holm's strictest step), "
                                  "looking now and again at the needed seeds with the level "
                                  "spent by an O'Brien-Fleming-like boundary (the fixed design: "
                                  "one look at the end), cheapest first:\n",
                                  a.plan.power, a.plan.alpha)
                    : std::string("no claim that cannot tell can be planned yet:\n"));
  Table t;
  if (any) {
    t.Header({"claim", "test", "design", "seeds", "needed", "fixed design", "new runs", "3090 h"});
  }
  for (const report::ClaimPlan& p : plans) {
    if (!p.planned) continue;
    for (const report::TestPlan& test : p.tests) {
      t.Row({p.id, test.label, test.design + (test.prior ? " (prior sd)" : ""),
             StrCat(test.seeds_now), StrCat(test.seeds_needed), StrCat(test.fixed_seeds),
             StrCat(test.runs), Hours(test.hours)});
    }
  }
  if (any) t.Print(std::cout);
  for (const report::ClaimPlan& p : plans) {
    if (p.planned) {
      std::cout << fmt::format("{}: {} new runs, {} RTX 3090 hours{}\n", p.id, p.runs,
                               Hours(p.hours),
                               client == nullptr ? std::string()
                               : p.expected_finish_us > 0
                                   ? ", done " + ExpectedAt(p.expected_finish_us) + " if queued now"
                                   : ", no finish estimate (no live worker fits)");
    }
  }
  for (const report::ClaimPlan& p : plans) {
    if (!p.planned) std::cout << fmt::format("not planned: {}: {}\n", p.id, p.note);
  }
  return absl::OkStatus();
}

void RunPlan(PlanArgs& a) {
  a.plan.prior_sd = a.prior_sd;
  for (const std::string& entry : a.smallest) {
    const size_t eq = entry.find('=');
    std::optional<double> value =
        eq == std::string::npos ? std::nullopt : ParseDouble(entry.substr(eq + 1));
    if (!value) {
      ExitWith(absl::InvalidArgumentError(
          StrCat("--smallest-effect '", entry, "' is not CLAIM=NUMBER")));
    }
    a.plan.smallest_effect[entry.substr(0, eq)] = *value;
  }
  if (a.apply && !a.db.empty()) {
    ExitWith(absl::InvalidArgumentError(
        "--apply queues runs through cartd; drop --db (cartd owns the database it writes)"));
  }
  if (a.budget && !(*a.budget >= 0 && std::isfinite(*a.budget))) {
    ExitWith(absl::InvalidArgumentError(
        StrCat("--budget ", *a.budget, " must be a number of RTX 3090 hours >= 0")));
  }
  if (a.budget && !a.apply) {
    ExitWith(absl::InvalidArgumentError("--budget holds what --apply queues; give --apply too"));
  }
  absl::Status status;
  if (!a.db.empty()) {
    std::unique_ptr<store::RunStore> opened = OpenDatabaseFile(a.db, "--db");
    std::unique_ptr<report::StudySource> source = report::StoreSource(*opened);
    status = PrintPlan(*source, a, nullptr);
  } else {
    Client client = Client::Connect(a.conn);
    ServiceStudySource source(Client::Connect(a.conn));
    status = PrintPlan(source, a, &client);
  }
  if (!status.ok()) ExitWith(status);
}

}  // namespace

absl::Status ApplyReportSweeps(const std::vector<std::string>& overrides,
                               report::StudySweeps& sweeps) {
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos ||
        !report::SetStudyPart(sweeps, o.substr(0, eq), o.substr(eq + 1)).ok()) {
      return absl::InvalidArgumentError(
          StrCat("report sweep '", o,
                 "' is not ROLE=SWEEP with ROLE one of stage1, stage2, baselines, ablations, "
                 "faithfulness, leak, variable_r"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteServiceReport(const rpc::ClientConfig& client,
                                const report::ReportOptions& options) {
  ServiceStudySource source(Client::FromConfig(client));
  return Write(source, options);
}

void RegisterReportCommand(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  a->options.out_dir = "report";
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write the study's report: each claim of the paper with its computed verdict, every table "
      "beside its published figures, a CSV per table and plots (gnuplot), from cartd or a "
      "database file (docs/study.md)");
  cmd->add_option("--out", a->options.out_dir, "Directory to write (report.md, tables/, plots/)")
      ->capture_default_str();
  cmd->add_option("--db", a->db,
                  "Read this SQLite database file directly instead of asking cartd (opened as "
                  "cartd opens it: an older schema is migrated, so stop an older cartd first)");
  cmd->add_option("--format", a->format, "md, or html (report.html beside report.md)")
      ->check(CLI::IsMember({"md", "html"}))
      ->capture_default_str();
  cmd->add_flag("--no-plots", a->no_plots, "Tables and CSVs only (no gnuplot needed)");
  cmd->add_option("--title", a->options.title, "Report title")->capture_default_str();
  cmd->add_option("--gnuplot", a->options.gnuplot, "gnuplot binary")->capture_default_str();
  cmd->add_option("--price-per-kwh", a->price_per_kwh,
                  "Price of a kWh in \"What the study cost\" (default: cartd's "
                  "energy_price_per_kwh; none from --db)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--currency", a->currency, "Currency of --price-per-kwh")->capture_default_str();
  cmd->add_option("--co2-per-kwh", a->co2_per_kwh,
                  "Grams of CO2 per kWh in \"What the study cost\" (default: cartd's "
                  "co2_grams_per_kwh; none from --db)")
      ->check(CLI::NonNegativeNumber);
  AddStudyFlags(cmd, a->options);
  AddConnFlags(cmd, a->conn);
  OnRun(cmd, [a] { RunReport(*a); });
}

void RegisterPlanCommand(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "For each claim the report cannot tell, the seeds per side that would decide it at a "
      "power, the runs that adds and their RTX 3090 hours, cheapest decision first "
      "(docs/study.md \"Planning seeds\")");
  cmd->add_option("--power", a->plan.power, "Power to detect the effect with, in (0, 1)")
      ->capture_default_str();
  cmd->add_option("--alpha", a->plan.alpha, "Each claim's family-wise level, in (0, 1)")
      ->capture_default_str();
  cmd->add_option("--smallest-effect", a->smallest,
                  "CLAIM=VALUE: the smallest effect worth detecting for a claim, in its test's "
                  "units (percent for perplexity); default the paper's (repeatable)");
  cmd->add_option("--prior-sd", a->prior_sd,
                  "The spread of one seed where a side has fewer than two runs, in the test's "
                  "own scale (log values for perplexity)");
  cmd->add_option("--db", a->db, "Read this SQLite database file instead of asking cartd");
  cmd->add_flag("--apply", a->apply,
                "Queue the planned seeds through cartd: new seeds of the same sweeps with copies "
                "of their derived jobs, cheapest decision first, and record the plan (each "
                "claim's next look then spends its level sequentially)");
  cmd->add_option("--budget", a->budget,
                  "With --apply: queue only whole claims whose RTX 3090 hours fit this budget "
                  "(the new seeds' training; the evaluations derived from them are not counted)");
  AddStudyFlags(cmd, a->options);
  AddConnFlags(cmd, a->conn);
  OnRun(cmd, [a] { RunPlan(*a); });
}

}  // namespace cart::cli
