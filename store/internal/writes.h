#pragma once

// Write helpers shared by RunStore's write files (sweep_writes.cc, lease_writes.cc,
// ingest_writes.cc, action_writes.cc). Everything here runs on the writer thread, inside the
// savepoint of the call that uses it.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status.h"
#include "store/internal/sql.h"
#include "store/types.h"

namespace cart::store::internal {

inline constexpr char kSetAttemptFloor[] = "UPDATE runs SET attempt_floor = ? WHERE id = ?";
inline constexpr char kSetCancelRequested[] = "UPDATE runs SET cancel_requested = ? WHERE id = ?";
inline constexpr char kSelectBlockedChildren[] =
    "SELECT id, parent_checkpoint FROM runs WHERE parent_run_id = ? AND status = 'BLOCKED' "
    "ORDER BY id";

// An event row: a run's (run_id set) or a sweep's (sweep_id set) state change or notice.
absl::Status InsertEvent(Database& db, std::optional<int64_t> run_id,
                         std::optional<int64_t> sweep_id, std::optional<std::string_view> from,
                         std::string_view to, const Audit& audit);

// The one way a run's state changes: checks the lifecycle, updates, writes the event row.
absl::Status ChangeState(Database& db, int64_t run_id, RunState from, RunState to,
                         const Audit& audit);

template <typename... Args>
absl::Status Exec(Database& db, const char* sql, const Args&... args) {
  CART_ASSIGN_OR_RETURN(auto statement, db.Cached(sql));
  statement->BindAll(args...);
  return statement->Run();
}

// Data lineage rows (store/data_writes.cc). Writes `files` for `run_id`: a role without a row
// gets one; a row without an identity takes the one given (same path only); a recorded identity
// stays. Then derived runs of run_id at any depth take each newly recorded identity for their
// unrecorded rows of the same role and path, as "run N (its parent)".
absl::Status WriteRunData(Database& db, int64_t run_id, const std::vector<RunDataRecord>& files,
                          int64_t now_us);
// A new derived run's unrecorded rows take its parent's identities of the same role and path.
absl::Status InheritRunData(Database& db, int64_t run_id, int64_t parent_id, int64_t now_us);

struct Fence {
  RunState state;
  int64_t attempt;
  bool cancel_requested;
};

absl::StatusOr<Fence> LoadFence(Database& db, int64_t run_id);

// Fencing: only the run's current attempt, while it holds the lease, may report.
absl::StatusOr<Fence> CheckFence(Database& db, int64_t run_id, int64_t attempt,
                                 std::string_view action);

absl::Status EndAttempt(Database& db, int64_t run_id, int64_t attempt, AttemptOutcome outcome,
                        int64_t at_us, std::string_view reason);

// Moves BLOCKED children of `parent_id` whose checkpoint selector `ready` accepts to QUEUED.
template <typename Ready>
absl::Status UnblockChildren(Database& db, int64_t parent_id, Ready ready, const std::string& why,
                             int64_t at_us) {
  std::vector<int64_t> ids;
  {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectBlockedChildren));
    select->BindAll(parent_id);
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
      if (ready(cur.ColumnText(1))) ids.push_back(cur.ColumnInt64(0));
      return absl::OkStatus();
    }));
  }
  const Audit audit{at_us, "scheduler", why};
  for (int64_t id : ids) {
    CART_RETURN_IF_ERROR(ChangeState(db, id, RunState::kBlocked, RunState::kQueued, audit));
  }
  return absl::OkStatus();
}

// Cancel and resume, shared by the run and sweep versions. Each returns whether it changed
// anything.
absl::StatusOr<bool> CancelOne(Database& db, int64_t run_id, const Audit& audit,
                               bool skip_finished);
// A run that diverged resumes only with `change` (skip_others: it is skipped; else refused).
absl::StatusOr<bool> ResumeOne(Database& db, int64_t run_id, const Audit& audit, bool skip_others,
                               const std::optional<ConfigChange>& change = {});
absl::StatusOr<std::vector<int64_t>> RunIdsOfSweep(Database& db, int64_t sweep_id);
// Deletes the artifact rows of `shas` that no checkpoint names any more and returns those (the
// caller deletes their blobs): checkpoint retention and sweep deletion.
template <typename Shas>
absl::StatusOr<std::vector<std::string>> ReleaseUnnamedArtifacts(Database& db, const Shas& shas);
absl::StatusOr<int64_t> ApplyToSweep(Database& db, const std::string& name, bool cancel,
                                     const Audit& audit);

inline constexpr char kDeleteUnnamedArtifact[] =
    "DELETE FROM artifacts WHERE sha256 = ?1 "
    "AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE sha256 = ?1)";

template <typename Shas>
absl::StatusOr<std::vector<std::string>> ReleaseUnnamedArtifacts(Database& db, const Shas& shas) {
  std::vector<std::string> released;
  for (const std::string& sha : shas) {
    CART_ASSIGN_OR_RETURN(auto del, db.Cached(kDeleteUnnamedArtifact));
    del->BindAll(sha);
    CART_RETURN_IF_ERROR(del->Run());
    if (db.Changes() > 0) released.push_back(sha);
  }
  return released;
}

}  // namespace cart::store::internal
