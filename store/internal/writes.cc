#include "store/internal/writes.h"

#include "common/strings.h"
#include "store/internal/records.h"

namespace cart::store::internal {

namespace {
constexpr char kSetConfigAndParams[] =
    "UPDATE runs SET config_yaml = ?, params_json = ? WHERE id = ?";
constexpr char kClearDiverged[] =
    "UPDATE runs SET diverged_step = NULL, diverged_loss = NULL WHERE id = ?";
}  // namespace
namespace {

constexpr char kUpdateSweepStatus[] = "UPDATE sweeps SET status = ? WHERE id = ?";
constexpr char kSelectRunIdsOfSweep[] = "SELECT id FROM runs WHERE sweep_id = ? ORDER BY id";
constexpr char kInsertEvent[] =
    "INSERT INTO events(run_id, sweep_id, from_state, to_state, who, at_us, why, cause) "
    "VALUES(?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kUpdateRunState[] = "UPDATE runs SET status = ?, updated_us = ? WHERE id = ?";
constexpr char kSelectRunFence[] =
    "SELECT status, attempt, cancel_requested FROM runs WHERE id = ?";
constexpr char kEndAttempt[] =
    "UPDATE attempts SET ended_us = ?, outcome = ?, reason = ? WHERE run_id = ? AND attempt = ?";

}  // namespace

absl::Status InsertEvent(Database& db, std::optional<int64_t> run_id,
                         std::optional<int64_t> sweep_id, std::optional<std::string_view> from,
                         std::string_view to, const Audit& audit) {
  CART_ASSIGN_OR_RETURN(auto insert, db.Cached(kInsertEvent));
  const std::string_view cause = EventCauseName(audit.cause);
  insert->BindAll(run_id, sweep_id, from, to, audit.who, audit.at_us, audit.why,
                  cause.empty() ? std::nullopt : std::optional<std::string_view>(cause));
  return insert->Run();
}

// The one way a run's state changes: checks the lifecycle, updates, writes the event row.
absl::Status ChangeState(Database& db, int64_t run_id, RunState from, RunState to,
                         const Audit& audit) {
  if (!IsLegalTransition(from, to)) {
    return absl::FailedPreconditionError(StrCat("run ", run_id, " is ", RunStateName(from),
                                                "; it cannot move to ", RunStateName(to)));
  }
  CART_ASSIGN_OR_RETURN(auto update, db.Cached(kUpdateRunState));
  update->BindAll(RunStateName(to), audit.at_us, run_id);
  CART_RETURN_IF_ERROR(update->Run());
  return InsertEvent(db, run_id, std::nullopt, RunStateName(from), RunStateName(to), audit);
}

absl::StatusOr<Fence> LoadFence(Database& db, int64_t run_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunFence));
  select->BindAll(run_id);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::NotFoundError(StrCat("run ", run_id, " does not exist"));
  std::optional<RunState> state = ParseRunState(select->ColumnText(0));
  if (!state) return absl::InternalError(StrCat("run ", run_id, " has an unknown state"));
  return Fence{*state, select->ColumnInt64(1), select->ColumnInt64(2) != 0};
}

// Fencing: only the run's current attempt, while it holds the lease, may report.
absl::StatusOr<Fence> CheckFence(Database& db, int64_t run_id, int64_t attempt,
                                 std::string_view action) {
  CART_ASSIGN_OR_RETURN(Fence fence, LoadFence(db, run_id));
  const bool holds_lease = fence.state == RunState::kLeased || fence.state == RunState::kRunning;
  if (fence.attempt != attempt || !holds_lease) {
    return absl::FailedPreconditionError(
        StrCat(action, " rejected: attempt ", attempt, " of run ", run_id, " is stale (run is ",
               RunStateName(fence.state), ", current attempt ", fence.attempt, ")"));
  }
  return fence;
}

absl::Status EndAttempt(Database& db, int64_t run_id, int64_t attempt, AttemptOutcome outcome,
                        int64_t at_us, std::string_view reason) {
  return Exec(db, kEndAttempt, at_us, AttemptOutcomeName(outcome), reason, run_id, attempt);
}

// ---- Cancel and resume, shared by the run and sweep versions. Each returns whether it changed
// anything.

absl::StatusOr<bool> CancelOne(Database& db, int64_t run_id, const Audit& audit,
                               bool skip_finished) {
  CART_ASSIGN_OR_RETURN(Fence fence, LoadFence(db, run_id));
  switch (fence.state) {
    case RunState::kQueued:
    case RunState::kBlocked:
      CART_RETURN_IF_ERROR(ChangeState(db, run_id, fence.state, RunState::kCancelled, audit));
      return true;
    case RunState::kLeased:
      // The worker has not started: its later reports fail the fence.
      CART_RETURN_IF_ERROR(EndAttempt(db, run_id, fence.attempt, AttemptOutcome::kCancelled,
                                      audit.at_us, audit.why));
      CART_RETURN_IF_ERROR(ChangeState(db, run_id, fence.state, RunState::kCancelled, audit));
      return true;
    case RunState::kRunning: {
      if (fence.cancel_requested) return false;
      CART_RETURN_IF_ERROR(Exec(db, kSetCancelRequested, 1, run_id));
      Audit request = audit;
      request.why = StrCat("cancel requested", audit.why.empty() ? "" : ": ", audit.why);
      CART_RETURN_IF_ERROR(InsertEvent(db, run_id, std::nullopt, RunStateName(fence.state),
                                       RunStateName(fence.state), request));
      return true;
    }
    case RunState::kSucceeded:
    case RunState::kFailed:
    case RunState::kCancelled:
      if (skip_finished) return false;
      return absl::FailedPreconditionError(
          StrCat("run ", run_id, " is ", RunStateName(fence.state), "; it cannot be cancelled"));
  }
  return absl::InternalError(StrCat("run ", run_id, " has an unknown state"));
}

absl::StatusOr<bool> ResumeOne(Database& db, int64_t run_id, const Audit& audit, bool skip_others,
                               const std::optional<ConfigChange>& change) {
  CART_ASSIGN_OR_RETURN(RunRecord run, internal::LoadRun(db, run_id));
  if (run.state != RunState::kCancelled && run.state != RunState::kFailed) {
    if (skip_others) return false;
    return absl::FailedPreconditionError(StrCat("run ", run_id, " is ", RunStateName(run.state),
                                                "; only CANCELLED or FAILED runs can resume"));
  }
  if (run.diverged && !change) {
    if (skip_others) return false;
    return absl::FailedPreconditionError(StrCat(
        "run ", run_id, " diverged (loss ", run.diverged->loss, " at step ", run.diverged->step,
        "); resuming it unchanged would replay the same steps to the same loss. Resume it with a "
        "change: cart runs resume ",
        run_id, " --set lr=..."));
  }
  if (change) {
    CART_RETURN_IF_ERROR(
        Exec(db, kSetConfigAndParams, change->config_yaml, ParamsJson(change->params), run_id));
    CART_RETURN_IF_ERROR(Exec(db, kClearDiverged, run_id));
  }
  CART_ASSIGN_OR_RETURN(auto parent_checkpoint,
                        internal::ParentCheckpoint(db, run.parent_run_id, run.parent_checkpoint));
  const bool blocked = run.parent_run_id.has_value() && !parent_checkpoint.has_value();
  CART_RETURN_IF_ERROR(Exec(db, kSetAttemptFloor, run.attempt, run_id));
  CART_RETURN_IF_ERROR(Exec(db, kSetCancelRequested, 0, run_id));
  CART_RETURN_IF_ERROR(
      ChangeState(db, run_id, run.state, blocked ? RunState::kBlocked : RunState::kQueued, audit));
  return true;
}

absl::StatusOr<std::vector<int64_t>> RunIdsOfSweep(Database& db, int64_t sweep_id) {
  std::vector<int64_t> ids;
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunIdsOfSweep));
  select->BindAll(sweep_id);
  CART_RETURN_IF_ERROR(select->ForEachRow(
      [&](const internal::Statement& row) { ids.push_back(row.ColumnInt64(0)); }));
  return ids;
}

// Cancels (cancel) or resumes every run of a sweep that can be, and marks the sweep. Returns how
// many runs changed.
absl::StatusOr<int64_t> ApplyToSweep(Database& db, const std::string& name, bool cancel,
                                     const Audit& audit) {
  CART_ASSIGN_OR_RETURN(SweepRecord sweep, internal::LoadSweepByName(db, name));
  CART_ASSIGN_OR_RETURN(std::vector<int64_t> ids, RunIdsOfSweep(db, sweep.id));
  int64_t changed = 0;
  for (int64_t id : ids) {
    CART_ASSIGN_OR_RETURN(bool did, cancel ? CancelOne(db, id, audit, /*skip_finished=*/true)
                                           : ResumeOne(db, id, audit, /*skip_others=*/true));
    changed += did ? 1 : 0;
  }
  if (sweep.cancelled != cancel) {
    const char* from = cancel ? "ACTIVE" : "CANCELLED";
    const char* to = cancel ? "CANCELLED" : "ACTIVE";
    CART_RETURN_IF_ERROR(Exec(db, kUpdateSweepStatus, to, sweep.id));
    CART_RETURN_IF_ERROR(InsertEvent(db, std::nullopt, sweep.id, from, to, audit));
  }
  return changed;
}

}  // namespace cart::store::internal
