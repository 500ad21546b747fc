// RunStore's writes: users' actions on one run (cancel, resume, extend), and tags and notes on
// runs and sweeps. Each public method
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
using internal::InsertEvent;
using internal::kSetAttemptFloor;
using internal::ResumeOne;
using internal::WriteContext;

namespace {

constexpr char kSetDeviceClassPolicy[] = "UPDATE runs SET device_class_policy = ? WHERE id = ?";

constexpr char kSetStepsAndConfig[] =
    "UPDATE runs SET steps = ?, config_yaml = ?, params_json = ? WHERE id = ?";
// A run's work is linear in its steps (tokens = steps x batch x accum x seq_len): an extended run's
// grows with them. Run before kSetStepsAndConfig, which changes `steps`.
constexpr char kScaleWork[] =
    "UPDATE runs SET work_hours = work_hours * ?1 / steps WHERE id = ?2 AND steps > 0";

// Tags and notes, for runs and for sweeps: the same statements over the two owners' tables.
struct AnnotationSql {
  const char* insert_tag;    // (owner id, tag, who, at_us)
  const char* delete_tag;    // (owner id, tag)
  const char* count_tags;    // (owner id)
  const char* set_note;      // (text, who, at_us, owner id)
  const char* tag_setter;    // (owner id, tag) -> who
  const char* note_of;       // (owner id) -> note
  const char* add_history;   // (owner id, at_us, who, kind, value, previous)
  const char* trim_history;  // (owner id, rows kept)
};
constexpr AnnotationSql kRunAnnotation = {
    "INSERT INTO run_tags(run_id, tag, who, at_us) VALUES(?, ?, ?, ?) "
    "ON CONFLICT(run_id, tag) DO NOTHING",
    "DELETE FROM run_tags WHERE run_id = ? AND tag = ?",
    "SELECT count(*) FROM run_tags WHERE run_id = ?",
    "UPDATE runs SET note = ?, note_by = ?, note_us = ? WHERE id = ?",
    "SELECT who FROM run_tags WHERE run_id = ? AND tag = ?",
    "SELECT note FROM runs WHERE id = ?",
    "INSERT INTO annotation_history(run_id, at_us, who, kind, value, previous) "
    "VALUES(?, ?, ?, ?, ?, ?)",
    "DELETE FROM annotation_history WHERE run_id = ?1 AND id <= (SELECT id FROM "
    "annotation_history WHERE run_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
};
constexpr AnnotationSql kSweepAnnotation = {
    "INSERT INTO sweep_tags(sweep_id, tag, who, at_us) VALUES(?, ?, ?, ?) "
    "ON CONFLICT(sweep_id, tag) DO NOTHING",
    "DELETE FROM sweep_tags WHERE sweep_id = ? AND tag = ?",
    "SELECT count(*) FROM sweep_tags WHERE sweep_id = ?",
    "UPDATE sweeps SET note = ?, note_by = ?, note_us = ? WHERE id = ?",
    "SELECT who FROM sweep_tags WHERE sweep_id = ? AND tag = ?",
    "SELECT note FROM sweeps WHERE id = ?",
    "INSERT INTO annotation_history(sweep_id, at_us, who, kind, value, previous) "
    "VALUES(?, ?, ?, ?, ?, ?)",
    "DELETE FROM annotation_history WHERE sweep_id = ?1 AND id <= (SELECT id FROM "
    "annotation_history WHERE sweep_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
};

// The one text column `sql` selects for `owner_id` and `key` (none: "").
template <class... Keys>
absl::StatusOr<std::string> SelectText(Database& db, const char* sql, const Keys&... keys) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(sql));
  select->BindAll(keys...);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  return row ? select->ColumnText(0) : std::string();
}

// Applies `change` to the owner's rows, and keeps each change that changed something in its
// history; FailedPrecondition (the caller's savepoint undoes everything) when it would leave
// more than kMaxTags tags.
absl::Status ApplyAnnotation(Database& db, const AnnotationSql& sql, int64_t owner_id,
                             const AnnotationChange& change, const Audit& audit,
                             const std::string& what) {
  auto remember = [&](AnnotationEvent::Kind kind, const std::string& value,
                      const std::string& previous) {
    return Exec(db, sql.add_history, owner_id, audit.at_us, audit.who, static_cast<int64_t>(kind),
                value, previous);
  };
  for (const std::string& tag : change.remove_tags) {
    CART_ASSIGN_OR_RETURN(std::string setter, SelectText(db, sql.tag_setter, owner_id, tag));
    CART_RETURN_IF_ERROR(Exec(db, sql.delete_tag, owner_id, tag));
    if (db.Changes() > 0) {
      CART_RETURN_IF_ERROR(remember(AnnotationEvent::Kind::kTagRemoved, tag, setter));
    }
  }
  for (const std::string& tag : change.add_tags) {
    CART_RETURN_IF_ERROR(Exec(db, sql.insert_tag, owner_id, tag, audit.who, audit.at_us));
    if (db.Changes() > 0) CART_RETURN_IF_ERROR(remember(AnnotationEvent::Kind::kTagAdded, tag, ""));
  }
  CART_ASSIGN_OR_RETURN(auto count, db.Cached(sql.count_tags));
  count->BindAll(owner_id);
  CART_ASSIGN_OR_RETURN(bool row, count->Step());
  const int64_t tags = row ? count->ColumnInt64(0) : 0;
  if (tags > static_cast<int64_t>(kMaxTags)) {
    return absl::FailedPreconditionError(
        StrCat(what, " would carry ", tags, " tags; at most ", kMaxTags, " (remove some first)"));
  }
  if (change.note) {
    CART_ASSIGN_OR_RETURN(std::string before, SelectText(db, sql.note_of, owner_id));
    CART_RETURN_IF_ERROR(Exec(db, sql.set_note, *change.note, audit.who, audit.at_us, owner_id));
    if (before != *change.note) {
      CART_RETURN_IF_ERROR(remember(AnnotationEvent::Kind::kNote, *change.note, before));
    }
  }
  return Exec(db, sql.trim_history, owner_id, kMaxAnnotationHistory);
}

}  // namespace

absl::StatusOr<RunRecord> RunStore::AnnotateRun(int64_t run_id, const AnnotationChange& change,
                                                const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  const std::string what = StrCat("run ", run_id);
  CART_RETURN_IF_ERROR(internal::ValidateAnnotationChange(change, what));
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    CART_RETURN_IF_ERROR(internal::RequireRun(ctx.db(), run_id));
    CART_RETURN_IF_ERROR(ApplyAnnotation(ctx.db(), kRunAnnotation, run_id, change, audit, what));
    return internal::LoadRun(ctx.db(), run_id);
  });
}

absl::StatusOr<SweepRecord> RunStore::AnnotateSweep(const std::string& name,
                                                    const AnnotationChange& change,
                                                    const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  const std::string what = StrCat("sweep '", ValidUtf8(name), "'");
  CART_RETURN_IF_ERROR(internal::ValidateAnnotationChange(change, what));
  return writer_->Run<SweepRecord>([&](WriteContext& ctx) -> absl::StatusOr<SweepRecord> {
    CART_ASSIGN_OR_RETURN(SweepRecord sweep, internal::LoadSweepByName(ctx.db(), name));
    CART_RETURN_IF_ERROR(
        ApplyAnnotation(ctx.db(), kSweepAnnotation, sweep.id, change, audit, what));
    return internal::LoadSweepById(ctx.db(), sweep.id);
  });
}

absl::StatusOr<RunRecord> RunStore::CancelRun(int64_t run_id, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    CART_RETURN_IF_ERROR(CancelOne(ctx.db(), run_id, audit, /*skip_finished=*/false).status());
    return internal::LoadRun(ctx.db(), run_id);
  });
}

absl::StatusOr<RunRecord> RunStore::ResumeRun(int64_t run_id, const Audit& audit,
                                              const std::optional<ConfigChange>& change) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (change && change->config_yaml.empty()) {
    return absl::InvalidArgumentError(StrCat("resume of run ", run_id, ": config is empty"));
  }
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    CART_RETURN_IF_ERROR(
        ResumeOne(ctx.db(), run_id, audit, /*skip_others=*/false, change).status());
    return internal::LoadRun(ctx.db(), run_id);
  });
}

absl::StatusOr<RunRecord> RunStore::ExtendRun(int64_t run_id, int64_t new_total_steps,
                                              const ConfigChange& change, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  if (change.config_yaml.empty()) {
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
    CART_RETURN_IF_ERROR(Exec(db, kSetStepsAndConfig, new_total_steps, change.config_yaml,
                              internal::ParamsJson(change.params), run_id));
    CART_RETURN_IF_ERROR(Exec(db, kSetAttemptFloor, run.attempt, run_id));
    Audit extend = audit;
    extend.why = StrCat("extend from ", run.steps, " to ", new_total_steps, " steps",
                        audit.why.empty() ? "" : ": ", audit.why);
    CART_RETURN_IF_ERROR(ChangeState(db, run_id, run.state, RunState::kQueued, extend));
    return internal::LoadRun(db, run_id);
  });
}

absl::StatusOr<RunRecord> RunStore::SetDeviceClassPolicy(int64_t run_id, bool any,
                                                         const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  return writer_->Run<RunRecord>([&](WriteContext& ctx) -> absl::StatusOr<RunRecord> {
    Database& db = ctx.db();
    CART_ASSIGN_OR_RETURN(RunRecord run, internal::LoadRun(db, run_id));
    if (run.any_device_class == any) return run;
    CART_RETURN_IF_ERROR(Exec(db, kSetDeviceClassPolicy, any ? "any" : "same", run_id));
    Audit notice = audit;
    notice.why = StrCat(any ? "unpinned: later attempts may go to any device class"
                            : "pinned: later attempts go to the device class of its latest "
                              "checkpoint",
                        run.checkpoint_class.empty() ? "" : StrCat(" (", run.checkpoint_class, ")"),
                        audit.why.empty() ? "" : ": ", audit.why);
    const std::string state(RunStateName(run.state));
    CART_RETURN_IF_ERROR(InsertEvent(db, run_id, run.sweep_id, state, state, notice));
    return internal::LoadRun(db, run_id);
  });
}

}  // namespace cart::store
