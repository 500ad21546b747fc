// RunStore's writes: sweeps (create, cancel, resume). Each public method validates its input on the
// calling thread, then hands a closure to the writer thread (internal/writer.h); the closure
// reads what it needs, checks the state, and writes, all inside its savepoint.
#include <algorithm>
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

constexpr char kInsertSweep[] =
    "INSERT INTO sweeps(name, client_request_id, spec_text, status, priority, created_by, "
    "created_us) VALUES(?, ?, ?, 'ACTIVE', ?, ?, ?)";
constexpr char kInsertRun[] =
    "INSERT INTO runs(sweep_id, name, config_yaml, params_json, d, r, p, seed, steps, "
    "stored_params, effective_params, memory_estimate_bytes, min_memory_bytes, status, priority, "
    "attempt, max_attempts, attempt_floor, cancel_requested, parent_run_id, parent_checkpoint, "
    "created_us, updated_us, kind, eval_loops) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
    "0, ?, 0, 0, ?, ?, ?, ?, ?, ?)";

}  // namespace

absl::StatusOr<CreatedSweep> RunStore::CreateSweep(const NewSweep& sweep, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateNewSweep(sweep, options_.max_runs_per_sweep));
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
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
                              sweep.spec_text, sweep.priority, audit.who, audit.at_us));
    const int64_t sweep_id = db.LastInsertRowId();
    CART_RETURN_IF_ERROR(InsertEvent(db, std::nullopt, sweep_id, std::nullopt, "ACTIVE", audit));

    std::unordered_map<std::string_view, int64_t> ids_by_name;
    CART_ASSIGN_OR_RETURN(auto insert_run, db.Cached(kInsertRun));
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
      RunState state = RunState::kQueued;
      if (parent_id) {
        CART_ASSIGN_OR_RETURN(auto ready,
                              internal::ParentCheckpoint(db, parent_id, run.parent_checkpoint));
        if (!ready) state = RunState::kBlocked;
      }
      const internal::RunColumns cols = internal::RunColumnsOf(run);
      insert_run->BindAll(
          sweep_id, run.name, run.config_yaml, internal::ParamsJson(run.params), cols.d, cols.r,
          cols.p, cols.seed, cols.steps, run.stored_params, run.effective_params,
          run.memory_estimate_bytes,
          run.min_memory_bytes > 0 ? run.min_memory_bytes : run.memory_estimate_bytes,
          RunStateName(state), run.priority.value_or(sweep.priority), run.max_attempts, parent_id,
          parent_id ? std::optional<std::string>(run.parent_checkpoint) : std::nullopt, audit.at_us,
          audit.at_us, std::string(JobKindName(run.kind)), StrJoin(run.eval_loops, ","));
      CART_RETURN_IF_ERROR(insert_run->Run());
      insert_run->Reset();
      const int64_t run_id = db.LastInsertRowId();
      CART_RETURN_IF_ERROR(
          InsertEvent(db, run_id, sweep_id, std::nullopt, RunStateName(state), audit));
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

}  // namespace cart::store
