// Scheduler::ApplyPlan: a seed plan made into runs (docs/study.md "Planning seeds"). Each side of a
// planned test is a config of an existing sweep; its new seeds are copies of the sweep's first
// training run of that config with the seed changed, and each copy brings copies of the jobs
// derived from that run (the variable-R evaluations, in this sweep or another), so that the new
// seed is measured the way the old ones were.

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/config.h"
#include "server/scheduler.h"

namespace cart::server {
namespace {

using store::RunRecord;

// Whether the run has every key of `config` (the seed aside) at the same value.
bool HasConfig(const RunRecord& run, const std::map<std::string, std::string>& config) {
  for (const auto& [key, value] : config) {
    if (key == "seed") continue;
    auto it = run.params.find(key);
    if (it == run.params.end() || it->second != value) return false;
  }
  return true;
}

std::string ConfigText(const std::map<std::string, std::string>& config) {
  std::string out;
  for (const auto& [key, value] : config) {
    if (key == "seed") continue;
    out += StrCat(out.empty() ? "" : ", ", key, "=", value);
  }
  return "{" + out + "}";
}

// `run` as a new run with seed `seed` (its config re-resolved), deriving from an earlier entry.
absl::StatusOr<store::NewPlanRun> CopyWithSeed(store::RunStore& store, const RunRecord& run,
                                               int64_t seed, int parent_entry) {
  CART_ASSIGN_OR_RETURN(
      config::RunConfig config,
      config::ParseRunConfigYaml(run.config_yaml, StrCat("run ", run.id, "'s config")));
  CART_RETURN_IF_ERROR(config::SetKey(config, "seed", StrCat(seed)));
  store::NewPlanRun out;
  out.sweep = run.sweep_name;
  out.parent_entry = parent_entry;
  store::NewRun& r = out.run;
  r.config_yaml = config::ToYaml(config);
  r.params = config::RunParams(config, config::DerivedName(run.params));
  r.stored_params = run.stored_params;
  r.effective_params = run.effective_params;
  r.memory_estimate_bytes = run.memory_estimate_bytes;
  r.min_memory_bytes = run.min_memory_bytes;
  r.max_attempts = run.max_attempts;
  r.kind = run.kind;
  r.eval_loops = run.eval_loops;
  r.work_hours = run.work_hours;
  r.any_device_class = run.any_device_class;
  r.seed_group = run.seed_group;
  if (run.parent_run_id) {
    r.parent_checkpoint = run.parent_checkpoint;
    if (parent_entry < 0) r.parent_run_id = run.parent_run_id;  // a seed copy of a derived run
  }
  // Its data files by path, identities left to the first worker that opens them (the new run
  // reads the same files; a file changed since is then recorded as it is).
  CART_ASSIGN_OR_RETURN(std::vector<store::RunDataRecord> data, store.RunData(run.id));
  for (store::RunDataRecord& file : data) {
    file.identity.reset();
    file.recorded_by.clear();
    file.recorded_us = 0;
    r.data.push_back(std::move(file));
  }
  return out;
}

}  // namespace

absl::StatusOr<PlanApplied> Scheduler::ApplyPlan(PlanRequest request) {
  CART_RETURN_IF_ERROR(room_.CheckRoom("queuing a seed plan"));
  if (request.sides.empty()) {
    return absl::InvalidArgumentError("plan: no side to add seeds to");
  }
  const std::string who = request.who.empty() ? "user" : request.who;
  // One plan at a time: two would read the same seeds as free and queue them twice.
  static absl::Mutex* const plans = new absl::Mutex;
  absl::MutexLock one_at_a_time(plans);
  // Every run once, to find each template's derived jobs (in any sweep): a plan is rare.
  CART_ASSIGN_OR_RETURN(std::vector<RunRecord> all, store_->ListRuns({}));
  std::map<int64_t, std::vector<const RunRecord*>> children;
  for (const RunRecord& run : all) {
    if (run.parent_run_id) children[*run.parent_run_id].push_back(&run);
  }
  std::map<int64_t, const RunRecord*> ids;
  for (const RunRecord& run : all) ids.emplace(run.id, &run);
  auto by_id = [&](int64_t id) -> const RunRecord* {
    auto it = ids.find(id);
    return it == ids.end() ? nullptr : it->second;
  };
  std::set<std::string> checked;  // sweeps whose owner was checked
  auto check_owner = [&](const std::string& sweep) -> absl::Status {
    if (!checked.insert(sweep).second) return absl::OkStatus();
    absl::Status owner = CheckSweepOwner(sweep, who, "add planned seeds to");
    if (absl::IsNotFound(owner)) {
      return absl::NotFoundError(StrCat("sweep '", sweep,
                                        "' does not exist: it was deleted after the plan was "
                                        "made; plan again (`cart plan`) from the runs there are "
                                        "now"));
    }
    return owner;
  };
  // Each side resolved to the sweep and config its seeds are added to; two sides that resolve
  // to the same (a training side and an evaluation of it) are one, at the larger count.
  struct Resolved {
    const RunRecord* templ = nullptr;
    std::set<int64_t> seeds;  // the config's seeds so far
    int64_t runs = 0;
  };
  std::map<std::pair<std::string, std::string>, Resolved> resolved;  // (sweep, config) -> side
  std::vector<std::pair<std::string, std::string>> order;
  for (const PlanSide& side : request.sides) {
    if (side.runs < 1 || side.runs > 1000) {
      return absl::InvalidArgumentError(StrCat("plan: side ", ConfigText(side.config),
                                               " of sweep '", side.sweep, "' asks for ", side.runs,
                                               " new seeds; give 1 to 1000"));
    }
    std::string sweep = side.sweep;
    std::map<std::string, std::string> config = side.config;
    const RunRecord* templ = nullptr;
    if (side.template_run_id > 0) {
      // An evaluation side adds seeds to the training runs it evaluates.
      templ = by_id(side.template_run_id);
      while (templ != nullptr && templ->kind == JobKind::kEval && templ->parent_run_id) {
        templ = by_id(*templ->parent_run_id);
      }
      if (templ == nullptr || templ->kind != JobKind::kTrain) {
        return absl::NotFoundError(
            StrCat("plan: run ", side.template_run_id, " (of sweep '", side.sweep,
                   "') or the training run it derives from was deleted after the plan was "
                   "made; plan again (`cart plan`)"));
      }
      sweep = templ->sweep_name;
      config = templ->params;
    }
    CART_RETURN_IF_ERROR(check_owner(sweep));
    const std::pair<std::string, std::string> key(sweep, ConfigText(config));
    auto [at, fresh] = resolved.emplace(key, Resolved{});
    Resolved& r = at->second;
    r.runs = std::max(r.runs, side.runs);
    if (!fresh) continue;
    order.push_back(key);
    std::set<int64_t> parents;
    for (const RunRecord& run : all) {
      if (run.sweep_name != sweep || run.kind != JobKind::kTrain) continue;
      if (!HasConfig(run, config)) continue;
      r.seeds.insert(run.seed);
      parents.insert(run.parent_run_id.value_or(0));
      if (templ == nullptr) templ = &run;  // by id: the first
    }
    if (templ == nullptr || r.seeds.empty()) {
      return absl::FailedPreconditionError(
          StrCat("plan: sweep '", sweep, "' has no training run with ", ConfigText(config),
                 "; the runs the plan was made from are gone: plan again (`cart plan`)"));
    }
    // A new seed copies its template's parent: right when every seed continues the same
    // checkpoint, wrong when each continues its own (a new seed would not be a new replicate).
    if (parents.size() > 1) {
      return absl::FailedPreconditionError(
          StrCat("plan: the seeds of ", ConfigText(config), " in sweep '", sweep,
                 "' continue different parent runs; new seeds would need new parents: add "
                 "seeds to the parents' sweep and derive these from them"));
    }
    r.templ = templ;
  }
  std::vector<store::NewPlanRun>& entries = request.plan.runs;
  entries.clear();
  for (const auto& key : order) {
    Resolved& r = resolved.at(key);
    int64_t seed = *r.seeds.rbegin();
    for (int64_t i = 0; i < r.runs; ++i) {
      while (r.seeds.count(++seed)) {
      }
      r.seeds.insert(seed);
      // The new seed, then its derived jobs breadth first, each after its parent.
      std::vector<std::pair<const RunRecord*, int>> queue = {{r.templ, -1}};
      for (size_t q = 0; q < queue.size(); ++q) {
        const auto [run, parent_entry] = queue[q];
        if (run != r.templ) CART_RETURN_IF_ERROR(check_owner(run->sweep_name));
        CART_ASSIGN_OR_RETURN(store::NewPlanRun entry,
                              CopyWithSeed(*store_, *run, seed, parent_entry));
        const int index = static_cast<int>(entries.size());
        entries.push_back(std::move(entry));
        auto it = children.find(run->id);
        if (it == children.end()) continue;
        for (const RunRecord* child : it->second) queue.emplace_back(child, index);
      }
    }
  }
  all.clear();
  CART_ASSIGN_OR_RETURN(store::AppliedPlan applied,
                        store_->ApplyPlan(request.plan, store::Audit{NowMicros(), who, ""}));
  PlanApplied out;
  out.plan_id = applied.plan_id;
  for (int64_t id : applied.run_ids) {
    CART_ASSIGN_OR_RETURN(RunRecord run, store_->GetRun(id));
    out.runs.push_back(std::move(run));
  }
  WakePollers();
  return out;
}

}  // namespace cart::server
