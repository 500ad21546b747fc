// RunStore's writes: sweeps (create, cancel, resume). Each public method validates its input on the
// calling thread, then hands a closure to the writer thread (internal/writer.h); the closure
// reads what it needs, checks the state, and writes, all inside its savepoint.
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "store/internal/records.h"
#include "store/internal/sql.h"
#include "store/internal/validate.h"
#include "store/internal/writer.h"
#include "store/internal/writes.h"
#include "store/run_store.h"

namespace cart::store {

using internal::ApplyToSweep;
using internal::Database;
using internal::Exec;
using internal::InsertEvent;
using internal::RunIdsOfSweep;
using internal::WriteContext;

namespace {

constexpr char kInsertProvenance[] =
    "INSERT INTO sweep_provenance(sweep_id, items, git_diff) VALUES(?, ?, ?)";
constexpr char kInsertSweep[] =
    "INSERT INTO sweeps(name, client_request_id, spec_text, status, priority, created_by, "
    "created_us, budget_device_hours) VALUES(?, ?, ?, 'ACTIVE', ?, ?, ?, ?)";
constexpr char kInsertRun[] =
    "INSERT INTO runs(sweep_id, name, config_yaml, params_json, d, r, p, seed, steps, "
    "stored_params, effective_params, memory_estimate_bytes, min_memory_bytes, status, priority, "
    "attempt, max_attempts, attempt_floor, cancel_requested, parent_run_id, parent_checkpoint, "
    "created_us, updated_us, kind, eval_loops, work_hours, device_class_policy, seed_group, "
    "plan_id) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0, 0, ?, ?, ?, ?, ?, ?, ?, "
    "?, ?, ?)";
constexpr char kInsertPlan[] =
    "INSERT INTO plans(created_us, created_by, power, alpha, budget_hours, spending, text) "
    "VALUES(?, ?, ?, ?, ?, ?, ?)";
constexpr char kInsertPlanClaim[] =
    "INSERT INTO plan_claims(plan_id, claim, seeds_now, seeds_target, runs, hours) "
    "VALUES(?, ?, ?, ?, ?, ?)";
// The run names of a sweep that are whole numbers (those ExpandSweep gives), the largest first.
constexpr char kLargestIndexName[] =
    "SELECT max(CAST(name AS INTEGER)) FROM runs WHERE sweep_id = ? AND name GLOB '[0-9]*' AND "
    "name NOT GLOB '*[^0-9]*'";
constexpr char kRunNameTaken[] = "SELECT 1 FROM runs WHERE sweep_id = ? AND name = ?";

constexpr char kSetSweepPriority[] = "UPDATE sweeps SET priority = ? WHERE id = ?";
constexpr char kSetRunsPriority[] =
    "UPDATE runs SET priority = ?1 WHERE sweep_id = ?2 AND priority != ?1 AND status IN "
    "('QUEUED', 'BLOCKED', 'LEASED', 'RUNNING')";

// DeleteSweep's reads: what still works on the sweep, what depends on it, what it holds.
constexpr char kActiveRunsOfSweep[] =
    "SELECT count(*), min(id) FROM runs WHERE sweep_id = ? AND status IN ('LEASED', 'RUNNING')";
constexpr char kDerivedFromSweep[] =
    "SELECT s.name, count(*) FROM runs AS child JOIN runs AS parent ON child.parent_run_id = "
    "parent.id JOIN sweeps AS s ON s.id = child.sweep_id WHERE parent.sweep_id = ?1 AND "
    "child.sweep_id != ?1 GROUP BY s.name ORDER BY s.name";
constexpr char kArtifactsOfSweep[] =
    "SELECT DISTINCT c.sha256 FROM checkpoints AS c JOIN runs AS r ON r.id = c.run_id "
    "WHERE r.sweep_id = ?";
// The hours the sweep's attempts ran, kept for fair share (its owner's usage outlives the sweep).
constexpr char kKeepUsageOfSweep[] =
    "INSERT INTO deleted_usage(owner, started_us, ended_us) SELECT ?2, a.started_us, "
    "coalesce(a.ended_us, a.lease_expires_us) FROM attempts AS a JOIN runs AS r ON r.id = "
    "a.run_id WHERE r.sweep_id = ?1 AND a.started_us IS NOT NULL AND "
    "coalesce(a.ended_us, a.lease_expires_us) > a.started_us";
// Child rows before their runs, runs before the sweep (foreign keys are on). Each uses an index:
// one that starts with run_id, or events_by_sweep.
constexpr const char* kDeleteSweepRows[] = {
    "DELETE FROM metrics WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM run_summaries WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM run_logs WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM checkpoints WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM attempts WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM events WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM events WHERE sweep_id = ?1",
    "DELETE FROM run_tags WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM sweep_tags WHERE sweep_id = ?1",
    "DELETE FROM sweep_provenance WHERE sweep_id = ?1",
    "DELETE FROM annotation_history WHERE sweep_id = ?1 OR run_id IN "
    "(SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM run_data WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    "DELETE FROM eval_items WHERE run_id IN (SELECT id FROM runs WHERE sweep_id = ?1)",
    // Subscriptions to the sweep or one of its runs go with it, and their notifications; other
    // subscriptions' notifications about it stay (their text names it) without the reference.
    "DELETE FROM notification_tries WHERE notification_id IN (SELECT n.id FROM notifications AS n "
    "JOIN subscriptions AS s ON s.id = n.subscription_id WHERE s.sweep_id = ?1 OR s.run_id IN "
    "(SELECT id FROM runs WHERE sweep_id = ?1))",
    "DELETE FROM notifications WHERE subscription_id IN (SELECT id FROM subscriptions WHERE "
    "sweep_id = ?1 OR run_id IN (SELECT id FROM runs WHERE sweep_id = ?1))",
    "DELETE FROM subscriptions WHERE sweep_id = ?1 OR run_id IN (SELECT id FROM runs WHERE "
    "sweep_id = ?1)",
    "UPDATE notifications SET run_id = NULL WHERE run_id IN (SELECT id FROM runs WHERE "
    "sweep_id = ?1)",
    "UPDATE notifications SET sweep_id = NULL WHERE sweep_id = ?1",
    "DELETE FROM runs WHERE sweep_id = ?1",
    "DELETE FROM sweeps WHERE id = ?1",
};

// Data file identities no run refers to any more.
constexpr char kDeleteUnusedDataFiles[] =
    "DELETE FROM data_files WHERE id NOT IN (SELECT file_id FROM run_data WHERE file_id IS NOT "
    "NULL)";
// Environment records no attempt refers to any more.
constexpr char kDeleteUnusedEnvironments[] =
    "DELETE FROM environments WHERE id NOT IN (SELECT environment_id FROM attempts WHERE "
    "environment_id IS NOT NULL)";

// Inserts one run of sweep `sweep_id` (QUEUED, or BLOCKED while its parent lacks the checkpoint
// it starts from) with its event and data rows; returns its id.
absl::StatusOr<int64_t> InsertRun(Database& db, int64_t sweep_id, int64_t sweep_priority,
                                  const NewRun& run, const std::string& name,
                                  std::optional<int64_t> parent_id, std::optional<int64_t> plan_id,
                                  const Audit& audit) {
  RunState state = RunState::kQueued;
  if (parent_id) {
    CART_ASSIGN_OR_RETURN(auto ready,
                          internal::ParentCheckpoint(db, parent_id, run.parent_checkpoint));
    if (!ready) state = RunState::kBlocked;
  }
  const internal::RunColumns cols = internal::RunColumnsOf(run);
  CART_ASSIGN_OR_RETURN(auto insert_run, db.Cached(kInsertRun));
  insert_run->BindAll(
      sweep_id, name, run.config_yaml, internal::ParamsJson(run.params), cols.d, cols.r, cols.p,
      cols.seed, cols.steps, run.stored_params, run.effective_params, run.memory_estimate_bytes,
      run.min_memory_bytes > 0 ? run.min_memory_bytes : run.memory_estimate_bytes,
      RunStateName(state), run.priority.value_or(sweep_priority), run.max_attempts, parent_id,
      parent_id ? std::optional<std::string>(run.parent_checkpoint) : std::nullopt, audit.at_us,
      audit.at_us, std::string(JobKindName(run.kind)), StrJoin(run.eval_loops, ","), run.work_hours,
      run.any_device_class ? "any" : "same", run.seed_group, plan_id);
  CART_RETURN_IF_ERROR(insert_run->Run());
  insert_run->Reset();
  const int64_t run_id = db.LastInsertRowId();
  CART_RETURN_IF_ERROR(InsertEvent(db, run_id, sweep_id, std::nullopt, RunStateName(state), audit));
  if (!run.data.empty()) {
    CART_RETURN_IF_ERROR(internal::WriteRunData(db, run_id, run.data, audit.at_us));
    if (parent_id) {
      CART_RETURN_IF_ERROR(internal::InheritRunData(db, run_id, *parent_id, audit.at_us));
    }
  }
  return run_id;
}

}  // namespace

absl::StatusOr<CreatedSweep> RunStore::CreateSweep(const NewSweep& sweep, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateNewSweep(sweep, options_.max_runs_per_sweep));
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (sweep.provenance) {
    const std::string who = StrCat("sweep '", sweep.name, "' provenance");
    CART_RETURN_IF_ERROR(internal::ValidateItems(sweep.provenance->items, who, "item", 32));
    if (sweep.provenance->git_diff.size() > kMaxProvenanceDiffBytes) {
      return absl::InvalidArgumentError(StrCat(who, ": the git diff is ",
                                               sweep.provenance->git_diff.size(),
                                               " bytes; at most ", kMaxProvenanceDiffBytes));
    }
  }
  return writer_->Run<CreatedSweep>([&](WriteContext& ctx) -> absl::StatusOr<CreatedSweep> {
    Database& db = ctx.db();
    CreatedSweep out;
    CART_ASSIGN_OR_RETURN(auto existing,
                          internal::FindSweepByRequestId(db, sweep.client_request_id));
    if (existing) {
      if (existing->name != sweep.name || existing->spec_text != sweep.spec_text) {
        return absl::AlreadyExistsError(StrCat("client request id '", sweep.client_request_id,
                                               "' was used for sweep '", existing->name,
                                               "' with a different spec"));
      }
      CART_ASSIGN_OR_RETURN(out.run_ids, RunIdsOfSweep(db, existing->id));
      out.sweep = *std::move(existing);
      out.created = false;
      return out;
    }
    absl::StatusOr<SweepRecord> taken = internal::LoadSweepByName(db, sweep.name);
    if (taken.ok()) {
      return absl::AlreadyExistsError(
          StrCat("sweep '", sweep.name, "' already exists (id ", taken->id, ")"));
    }
    if (taken.status().code() != absl::StatusCode::kNotFound) return taken.status();

    CART_RETURN_IF_ERROR(Exec(db, kInsertSweep, sweep.name, sweep.client_request_id,
                              sweep.spec_text, sweep.priority, audit.who, audit.at_us,
                              sweep.budget_device_hours));
    const int64_t sweep_id = db.LastInsertRowId();
    CART_RETURN_IF_ERROR(InsertEvent(db, std::nullopt, sweep_id, std::nullopt, "ACTIVE", audit));
    if (sweep.provenance) {
      CART_RETURN_IF_ERROR(Exec(db, kInsertProvenance, sweep_id,
                                internal::EnvironmentText(sweep.provenance->items),
                                sweep.provenance->git_diff));
    }

    std::unordered_map<std::string_view, int64_t> ids_by_name;
    for (const NewRun& run : sweep.runs) {
      std::optional<int64_t> parent_id = run.parent_run_id;
      if (!run.parent_name.empty()) {
        auto it = ids_by_name.find(run.parent_name);
        if (it == ids_by_name.end()) {
          return absl::InvalidArgumentError(StrCat("run '", run.name, "' of sweep '", sweep.name,
                                                   "' names parent '", run.parent_name,
                                                   "', which is not an earlier run of the sweep"));
        }
        parent_id = it->second;
      } else if (parent_id) {
        const absl::Status exists = internal::RequireRun(db, *parent_id);
        if (absl::IsNotFound(exists)) {
          return absl::NotFoundError(StrCat("run '", run.name, "' of sweep '", sweep.name,
                                            "' names parent run ", *parent_id,
                                            ", which does not exist"));
        }
        CART_RETURN_IF_ERROR(exists);
      }
      CART_ASSIGN_OR_RETURN(
          const int64_t run_id,
          InsertRun(db, sweep_id, sweep.priority, run, run.name, parent_id, std::nullopt, audit));
      ids_by_name.emplace(run.name, run_id);
      out.run_ids.push_back(run_id);
    }
    CART_ASSIGN_OR_RETURN(out.sweep, internal::LoadSweepById(db, sweep_id));
    out.created = true;
    return out;
  });
}

absl::StatusOr<int64_t> RunStore::CancelSweep(const std::string& name, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<int64_t>(
      [&](WriteContext& ctx) { return ApplyToSweep(ctx.db(), name, /*cancel=*/true, audit); });
}

absl::StatusOr<int64_t> RunStore::ResumeSweep(const std::string& name, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<int64_t>(
      [&](WriteContext& ctx) { return ApplyToSweep(ctx.db(), name, /*cancel=*/false, audit); });
}

absl::StatusOr<int64_t> RunStore::SetSweepPriority(const std::string& name, int64_t priority,
                                                   const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<int64_t>([&](WriteContext& ctx) -> absl::StatusOr<int64_t> {
    Database& db = ctx.db();
    CART_ASSIGN_OR_RETURN(SweepRecord sweep, internal::LoadSweepByName(db, name));
    CART_RETURN_IF_ERROR(Exec(db, kSetRunsPriority, priority, sweep.id));
    const int64_t changed = db.Changes();
    CART_RETURN_IF_ERROR(Exec(db, kSetSweepPriority, priority, sweep.id));
    const std::string state = sweep.cancelled ? "CANCELLED" : "ACTIVE";
    CART_RETURN_IF_ERROR(InsertEvent(db, std::nullopt, sweep.id, state, state, audit));
    return changed;
  });
}

absl::StatusOr<DeletedSweep> RunStore::DeleteSweep(const std::string& name) {
  return writer_->Run<DeletedSweep>([&](WriteContext& ctx) -> absl::StatusOr<DeletedSweep> {
    Database& db = ctx.db();
    CART_ASSIGN_OR_RETURN(SweepRecord sweep, internal::LoadSweepByName(db, name));
    {
      CART_ASSIGN_OR_RETURN(auto active, db.Cached(kActiveRunsOfSweep));
      active->BindAll(sweep.id);
      int64_t count = 0, example = 0;
      CART_RETURN_IF_ERROR(active->ForEachRow([&](const auto& row) {
        count = row.ColumnInt64(0);
        example = row.ColumnOptionalInt64(1).value_or(0);
      }));
      if (count > 0) {
        return absl::FailedPreconditionError(
            StrCat("sweep '", name, "' has ", count, count == 1 ? " run" : " runs",
                   " leased or running (run ", example, "): cancel it first (cart sweep cancel ",
                   name, ") and delete it once they have stopped"));
      }
    }
    {
      CART_ASSIGN_OR_RETURN(auto derived, db.Cached(kDerivedFromSweep));
      derived->BindAll(sweep.id);
      std::vector<std::string> users;
      CART_RETURN_IF_ERROR(derived->ForEachRow([&](const auto& row) {
        users.push_back(StrCat("'", row.ColumnText(0), "' (", row.ColumnInt64(1), " runs)"));
      }));
      if (!users.empty()) {
        return absl::FailedPreconditionError(
            StrCat("runs of sweep ", StrJoin(users, ", "), " start from checkpoints of sweep '",
                   name, "', which are kept while those runs exist: delete ",
                   users.size() == 1 ? "that sweep" : "those sweeps", " first"));
      }
    }
    DeletedSweep out;
    std::vector<std::string> named;
    {
      CART_ASSIGN_OR_RETURN(auto select, db.Cached(kArtifactsOfSweep));
      select->BindAll(sweep.id);
      CART_RETURN_IF_ERROR(
          select->ForEachRow([&](const auto& row) { named.push_back(row.ColumnText(0)); }));
      CART_ASSIGN_OR_RETURN(out.run_ids, RunIdsOfSweep(db, sweep.id));
    }
    CART_RETURN_IF_ERROR(Exec(db, kKeepUsageOfSweep, sweep.id, sweep.created_by));
    for (size_t i = 0; i < std::size(kDeleteSweepRows); ++i) {
      CART_ASSIGN_OR_RETURN(auto del, db.Cached(kDeleteSweepRows[i]));
      del->BindAll(sweep.id);
      CART_RETURN_IF_ERROR(del->Run());
      if (i == 0) out.metric_points = db.Changes();
      if (i == 3) out.checkpoints = db.Changes();
    }
    CART_RETURN_IF_ERROR(Exec(db, kDeleteUnusedDataFiles));
    CART_RETURN_IF_ERROR(Exec(db, kDeleteUnusedEnvironments));
    CART_ASSIGN_OR_RETURN(out.released_artifacts, internal::ReleaseUnnamedArtifacts(db, named));
    return out;
  });
}

absl::StatusOr<AppliedPlan> RunStore::ApplyPlan(const NewPlan& plan, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateNewPlan(plan));
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<AppliedPlan>([&](WriteContext& ctx) -> absl::StatusOr<AppliedPlan> {
    Database& db = ctx.db();
    AppliedPlan out;
    CART_RETURN_IF_ERROR(Exec(db, kInsertPlan, audit.at_us, audit.who, plan.power, plan.alpha,
                              plan.budget_hours, plan.spending, plan.text));
    out.plan_id = db.LastInsertRowId();
    for (const PlanClaim& c : plan.claims) {
      CART_RETURN_IF_ERROR(Exec(db, kInsertPlanClaim, out.plan_id, c.claim, c.seeds_now,
                                c.seeds_target, c.runs, c.hours));
    }
    // Each sweep once: its id, priority and the next index its new runs are named by.
    struct Target {
      int64_t id = 0, priority = 0, next_index = 0;
    };
    std::map<std::string, Target> sweeps;
    Audit why = audit;
    if (why.why.empty()) why.why = StrCat("seed plan ", out.plan_id);
    for (const NewPlanRun& entry : plan.runs) {
      auto it = sweeps.find(entry.sweep);
      if (it == sweeps.end()) {
        absl::StatusOr<SweepRecord> sweep = internal::LoadSweepByName(db, entry.sweep);
        if (absl::IsNotFound(sweep.status())) {
          return absl::NotFoundError(
              StrCat("sweep '", entry.sweep,
                     "' does not exist: it was deleted after the plan was made; plan again "
                     "(`cart plan`) from the runs there are now"));
        }
        CART_RETURN_IF_ERROR(sweep.status());
        if (sweep->cancelled) {
          return absl::FailedPreconditionError(
              StrCat("sweep '", entry.sweep,
                     "' is cancelled: resume it (`cart sweep resume`) before adding planned "
                     "seeds to it"));
        }
        CART_ASSIGN_OR_RETURN(auto largest, db.Cached(kLargestIndexName));
        largest->BindAll(sweep->id);
        CART_ASSIGN_OR_RETURN(bool row, largest->Step());
        const int64_t next = row && !largest->ColumnIsNull(0) ? largest->ColumnInt64(0) + 1 : 0;
        largest->Reset();
        it = sweeps.emplace(entry.sweep, Target{sweep->id, sweep->priority, next}).first;
      }
      Target& target = it->second;
      std::string name;
      CART_ASSIGN_OR_RETURN(auto taken, db.Cached(kRunNameTaken));
      for (;; ++target.next_index) {  // a run named by hand may hold an index
        name = StrCat(target.next_index);
        taken->BindAll(target.id, name);
        CART_ASSIGN_OR_RETURN(bool row, taken->Step());
        taken->Reset();
        if (!row) break;
      }
      ++target.next_index;
      std::optional<int64_t> parent_id = entry.run.parent_run_id;
      if (entry.parent_entry >= 0) {
        parent_id = out.run_ids[entry.parent_entry];
      } else if (parent_id) {
        const absl::Status exists = internal::RequireRun(db, *parent_id);
        if (absl::IsNotFound(exists)) {
          return absl::NotFoundError(StrCat("plan: a new run of sweep '", entry.sweep,
                                            "' derives from run ", *parent_id,
                                            ", which was deleted after the plan was made"));
        }
        CART_RETURN_IF_ERROR(exists);
      }
      CART_ASSIGN_OR_RETURN(
          const int64_t run_id,
          InsertRun(db, target.id, target.priority, entry.run, name, parent_id, out.plan_id, why));
      out.run_ids.push_back(run_id);
    }
    return out;
  });
}

}  // namespace cart::store
