// RunStore's writes: users' actions on one run (cancel, resume, extend). Each public method
// validates its input on the calling thread, then hands a closure to the writer thread
// (internal/writer.h); the closure reads what it needs, checks the state, and writes, all inside
// its savepoint.
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

using internal::CancelOne;
using internal::ChangeState;
using internal::Database;
using internal::Exec;
using internal::kSetAttemptFloor;
using internal::ResumeOne;
using internal::WriteContext;

namespace {

constexpr char kSetStepsParam[] =
    "UPDATE runs SET params_json = json_set(params_json, '$.\"steps\"', ?) WHERE id = ?";
constexpr char kSetStepsAndConfig[] = "UPDATE runs SET steps = ?, config_yaml = ? WHERE id = ?";
// A run's work is linear in its steps (tokens = steps x batch x accum x seq_len): an extended run's
// grows with them. Run before kSetStepsAndConfig, which changes `steps`.
constexpr char kScaleWork[] =
    "UPDATE runs SET work_hours = work_hours * ?1 / steps WHERE id = ?2 AND steps > 0";

}  // namespace

absl::StatusOr<RunRecord> RunStore::CancelRun(int64_t run_id, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    CART_RETURN_IF_ERROR(CancelOne(ctx.db(), run_id, audit, /*skip_finished=*/false).status());
    return internal::LoadRun(ctx.db(), run_id);
  });
}

absl::StatusOr<RunRecord> RunStore::ResumeRun(int64_t run_id, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    CART_RETURN_IF_ERROR(ResumeOne(ctx.db(), run_id, audit, /*skip_others=*/false).status());
    return internal::LoadRun(ctx.db(), run_id);
  });
}

absl::StatusOr<RunRecord> RunStore::ExtendRun(int64_t run_id, int64_t new_total_steps,
                                              const std::string& new_config_yaml,
                                              const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (new_config_yaml.empty()) {
    return absl::InvalidArgumentError(StrCat("extend of run ", run_id, ": config is empty"));
  }
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    Database& db = ctx.db();
    CART_ASSIGN_OR_RETURN(RunRecord run, internal::LoadRun(db, run_id));
    if (run.state != RunState::kSucceeded) {
      return absl::FailedPreconditionError(StrCat("run ", run_id, " is ", RunStateName(run.state),
                                                  "; only SUCCEEDED runs can be extended"));
    }
    if (new_total_steps <= run.steps) {
      return absl::FailedPreconditionError(StrCat("run ", run_id, " already trains for ", run.steps,
                                                  " steps; extending to ", new_total_steps,
                                                  " would add none"));
    }
    CART_RETURN_IF_ERROR(Exec(db, kScaleWork, static_cast<double>(new_total_steps), run_id));
    CART_RETURN_IF_ERROR(Exec(db, kSetStepsAndConfig, new_total_steps, new_config_yaml, run_id));
    CART_RETURN_IF_ERROR(Exec(db, kSetStepsParam, StrCat(new_total_steps), run_id));
    CART_RETURN_IF_ERROR(Exec(db, kSetAttemptFloor, run.attempt, run_id));
    Audit extend = audit;
    extend.why = StrCat("extend from ", run.steps, " to ", new_total_steps, " steps",
                        audit.why.empty() ? "" : ": ", audit.why);
    CART_RETURN_IF_ERROR(ChangeState(db, run_id, run.state, RunState::kQueued, extend));
    return internal::LoadRun(db, run_id);
  });
}

}  // namespace cart::store
