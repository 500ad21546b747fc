// A sweep file made into the runs cartd stores (server/submission.h).

#include "server/submission.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/accounting.h"
#include "config/config.h"

namespace cart::server {
namespace {

using store::RunRecord;
using store::RunState;

// Moves what it can out of `expanded`: a 10,000-run sweep is tens of MB of params and YAML.
// A run's seed group when its sweep balances seeds over device classes: its config's keys but
// the seed, hashed (docs/architecture.md "Device classes").
std::string SeedGroup(const std::map<std::string, std::string>& params) {
  Sha256 hash;
  for (const auto& [key, value] : params) {
    if (key == "seed") continue;
    hash.Update(StrCat(key, "=", value, "\n"));
  }
  return hash.HexDigest().substr(0, 32);
}

store::NewRun ToNewRun(config::ExpandedRun&& expanded, const config::SweepSpec& spec,
                       const std::map<std::string, data::FileIdentity>& data_files) {
  store::NewRun run;
  run.any_device_class = spec.resume_any_device_class;
  if (spec.balance_device_classes && expanded.kind == JobKind::kTrain &&
      expanded.parent_index < 0 && expanded.parent_run_id <= 0) {
    run.seed_group = SeedGroup(expanded.params);
  }
  for (config::DataFile& file : config::DataFiles(expanded.config)) {
    store::RunDataRecord record;
    record.role = std::move(file.role);
    if (auto it = data_files.find(file.path); it != data_files.end()) {
      record.identity = it->second;
      record.recorded_by = "submit";
    }
    record.path = std::move(file.path);
    run.data.push_back(std::move(record));
  }
  // Store run names are plain names; the user-facing "<sweep>/<index>" is rebuilt from them.
  run.name = StrCat(expanded.index);
  run.config_yaml = std::move(expanded.config_yaml);
  run.params = std::move(expanded.params);
  run.kind = expanded.kind;
  run.eval_loops = std::move(expanded.eval_loops);
  run.stored_params = expanded.stored_params;
  run.effective_params = expanded.effective_params;
  run.memory_estimate_bytes = expanded.memory_estimate_bytes;
  run.min_memory_bytes = expanded.min_memory_bytes;
  run.work_hours =
      config::EstimateRunCost(expanded.config, expanded.kind == JobKind::kEval, expanded.eval_loops)
          .rtx3090_hours;
  run.max_attempts = static_cast<int>(spec.max_attempts);
  if (expanded.parent_index >= 0 || expanded.parent_run_id > 0) {
    if (expanded.parent_run_id > 0) {
      run.parent_run_id = expanded.parent_run_id;
    } else {
      run.parent_name = StrCat(expanded.parent_index);
    }
    run.parent_checkpoint = expanded.parent_checkpoint_step < 0
                                ? std::string("final")
                                : StrCat(expanded.parent_checkpoint_step);
  }
  return run;
}

// What a dry run shows for a run that is not stored.
RunRecord PreviewRun(const config::SweepSpec& spec, const store::NewRun& run, int64_t now_us) {
  RunRecord record;
  record.sweep_name = spec.name;
  record.name = run.name;
  record.config_yaml = run.config_yaml;
  record.params = run.params;
  auto int_param = [&](const char* key) -> std::optional<int64_t> {
    auto it = run.params.find(key);
    return it == run.params.end() ? std::nullopt : ParseInt64(it->second);
  };
  record.d = int_param("d").value_or(0);
  record.r = int_param("R");
  record.p = int_param("P");
  record.seed = int_param("seed").value_or(0);
  record.steps = int_param("steps").value_or(0);
  record.stored_params = run.stored_params;
  record.effective_params = run.effective_params;
  record.memory_estimate_bytes = run.memory_estimate_bytes;
  record.min_memory_bytes = run.min_memory_bytes;
  record.state =
      run.parent_name.empty() && !run.parent_run_id ? RunState::kQueued : RunState::kBlocked;
  record.parent_run_id = run.parent_run_id;
  record.priority = spec.priority;
  record.max_attempts = run.max_attempts;
  record.parent_checkpoint = run.parent_checkpoint;
  record.created_us = now_us;
  record.updated_us = now_us;
  return record;
}

// FailedPrecondition when a derived run names a step of a run from another sweep that the run has
// passed without keeping a checkpoint there.
absl::Status CheckParentSteps(store::RunStore& store, const store::NewSweep& sweep) {
  // Runs only move forward, so a run whose checkpoints already pass step S will never write S
  // again: a derived run naming a step that retention removed (or that was never saved) would
  // wait for ever. Refuse it at submit instead.
  std::map<int64_t, std::vector<store::CheckpointRecord>> checkpoints;  // by parent run
  for (const store::NewRun& run : sweep.runs) {
    if (!run.parent_run_id || run.parent_checkpoint == "final") continue;
    const std::optional<int64_t> step = ParseInt64(run.parent_checkpoint);
    if (!step) continue;
    auto it = checkpoints.find(*run.parent_run_id);
    if (it == checkpoints.end()) {
      CART_ASSIGN_OR_RETURN(std::vector<store::CheckpointRecord> list,
                            store.ListCheckpoints(*run.parent_run_id));
      it = checkpoints.emplace(*run.parent_run_id, std::move(list)).first;
    }
    const std::vector<store::CheckpointRecord>& have = it->second;
    if (have.empty() || have.back().step < *step) continue;  // it may still get there
    bool found = false;
    std::vector<std::string> steps;
    for (const store::CheckpointRecord& c : have) {
      found |= c.step == *step;
      steps.push_back(StrCat(c.step));
    }
    if (found) continue;
    return absl::FailedPreconditionError(
        StrCat("sweep '", sweep.name, "': run ", run.name, " starts from run ", *run.parent_run_id,
               "'s checkpoint at step ", *step, ", which that run does not have (it has steps ",
               StrJoin(steps, ", "),
               "; cartd keeps the newest keep_checkpoints_per_run of each run and "
               "those derived runs name when submitted): name one of those steps or final"));
  }
  return absl::OkStatus();
}

// The trained runs of each sweep in the store that `spec` derives from, as ExpandSweep takes them;
// a sweep with no runs is left out (ExpandSweep reports it as unknown).
absl::StatusOr<std::map<std::string, std::vector<config::ParentRun>>> StoredParents(
    store::RunStore& store, const config::SweepSpec& spec) {
  std::map<std::string, std::vector<config::ParentRun>> parent_sweeps;
  for (const std::string& name : config::ParentSweeps(spec)) {
    store::RunFilter filter;
    filter.sweeps = {name};
    CART_ASSIGN_OR_RETURN(std::vector<RunRecord> records, store.ListRuns(filter));
    std::vector<config::ParentRun>& parents = parent_sweeps[name];
    for (const RunRecord& record : records) {
      if (record.kind != JobKind::kTrain) continue;
      absl::StatusOr<config::RunConfig> config =
          config::ParseRunConfigYaml(record.config_yaml, StrCat("run ", record.id));
      if (!config.ok()) return absl::InternalError(Message(config.status()));
      config::ParentRun parent;
      parent.run_id = record.id;
      parent.index = ParseInt64(record.name).value_or(-1);
      parent.name = StrCat(name, "/", record.name);
      parent.config = *std::move(config);
      parent.params = record.params;  // as its submit computed them (config::RunParams)
      parents.push_back(std::move(parent));
    }
    if (records.empty()) parent_sweeps.erase(name);
  }
  return parent_sweeps;
}

}  // namespace

absl::StatusOr<PreparedSweep> PrepareSweep(store::RunStore& store, const SubmitRequest& request,
                                           bool admin, const SubmitLimits& limits) {
  const std::string file = request.file_name.empty() ? "sweep" : request.file_name;
  PreparedSweep out;
  config::SweepSpec& spec = out.spec;
  CART_ASSIGN_OR_RETURN(spec, config::ParseSweepYaml(request.spec_yaml, file));
  if (spec.name.empty()) {
    return absl::InvalidArgumentError(StrCat(file, ": name: a sweep needs a name"));
  }
  if (!admin && spec.priority > limits.max_user_priority && !request.dry_run) {
    return absl::PermissionDeniedError(
        StrCat(file, ": priority: ", spec.priority, " is above the highest a user may set (",
               limits.max_user_priority,
               "); an admin may raise a sweep's priority (cart sweep priority NAME N)"));
  }
  // The file's own max_runs may only lower the server's limit.
  spec.max_runs = std::min(spec.max_runs, limits.max_runs_per_sweep);
  spec.max_bytes = limits.max_sweep_bytes;
  // Derived jobs may start from the trained runs of sweeps already in the store.
  CART_ASSIGN_OR_RETURN(auto parent_sweeps, StoredParents(store, spec));
  CART_ASSIGN_OR_RETURN(std::vector<config::ExpandedRun> expanded,
                        config::ExpandSweep(spec, file, parent_sweeps));
  store::NewSweep& sweep = out.sweep;
  sweep.name = spec.name;
  sweep.spec_text = request.spec_yaml;
  sweep.priority = spec.priority;
  sweep.budget_device_hours = spec.budget_device_hours;
  sweep.client_request_id = request.request_id;
  sweep.provenance = request.provenance;
  sweep.runs.reserve(expanded.size());
  for (config::ExpandedRun& run : expanded) {
    sweep.runs.push_back(ToNewRun(std::move(run), spec, request.data_files));
  }
  expanded = {};
  CART_RETURN_IF_ERROR(CheckParentSteps(store, sweep));
  return out;
}

SubmitResult PreviewSweep(const PreparedSweep& prepared, int64_t run_limit, int64_t now_us) {
  const config::SweepSpec& spec = prepared.spec;
  SubmitResult result;
  result.sweep.name = spec.name;
  result.sweep.spec_text = prepared.sweep.spec_text;
  result.sweep.priority = spec.priority;
  result.sweep.budget_device_hours = spec.budget_device_hours;
  result.sweep.created_us = now_us;
  for (const store::NewRun& run : prepared.sweep.runs) {
    RunRecord preview = PreviewRun(spec, run, now_us);
    ++result.sweep.run_counts[preview.state];
    if (run_limit <= 0 || static_cast<int64_t>(result.runs.size()) < run_limit) {
      result.runs.push_back(std::move(preview));
    }
  }
  return result;
}

}  // namespace cart::server
