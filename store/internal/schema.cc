#include "store/internal/schema.h"

#include "common/status.h"
#include "common/strings.h"

namespace cart::store::internal {
namespace {

constexpr char kCreateMeta[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID";
constexpr char kHasMeta[] =
    "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'meta'";
constexpr char kSelectVersion[] = "SELECT value FROM meta WHERE key = 'schema_version'";
constexpr char kUpsertVersion[] =
    "INSERT INTO meta(key, value) VALUES('schema_version', ?) "
    "ON CONFLICT(key) DO UPDATE SET value = excluded.value";

// Version 1: sweeps, runs with their config, workers, attempts (leases), metrics, artifacts,
// checkpoints, events.
//
// Notes on the layout:
// - runs.params_json holds every config key of a run as one JSON object of strings
//   ({"d": "512", "R": "6", "kv": "frozen", ...}); results queries group and filter by any key with
//   SQLite's JSON1 json_extract(params_json, '$."key"'). Chosen over a run_params(run_id, key,
//   value) table after measuring both on this machine: inserting 10,000 runs × 30 keys took
//   ~0.4 s of CPU as 300,000 rows and ~0.03 s as 10,000 JSON texts, while finding one key's value
//   in 10,000 runs took ~28 ms either way (a JSON parse per run vs a B-tree probe per run), and
//   queries read tens to thousands of runs. A key that ever needs an index gets an expression
//   index on json_extract(params_json, '$."key"').
// - metric_names interns metric names; metrics is WITHOUT ROWID keyed (run_id, name_id, step),
//   which is both the idempotency key and the order a series is read in, and keeps a point at
//   about 30 bytes on disk. value NULL means NaN (a diverged loss).
// - States and outcomes are TEXT with CHECK constraints: readable in the sqlite3 shell.
constexpr char kSchemaV1[] = R"sql(
CREATE TABLE sweeps(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  client_request_id TEXT NOT NULL UNIQUE,
  spec_text TEXT NOT NULL,
  status TEXT NOT NULL CHECK(status IN ('ACTIVE', 'CANCELLED')),
  priority INTEGER NOT NULL,
  created_by TEXT NOT NULL,
  created_us INTEGER NOT NULL
);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  name TEXT NOT NULL,
  config_yaml TEXT NOT NULL,
  params_json TEXT NOT NULL CHECK(json_valid(params_json)),
  d INTEGER NOT NULL,
  r INTEGER,
  p INTEGER,
  seed INTEGER NOT NULL,
  steps INTEGER NOT NULL,
  stored_params INTEGER NOT NULL,
  effective_params INTEGER NOT NULL,
  memory_estimate_bytes INTEGER NOT NULL,
  status TEXT NOT NULL CHECK(status IN
    ('QUEUED', 'BLOCKED', 'LEASED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
  priority INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL CHECK(max_attempts >= 1),
  attempt_floor INTEGER NOT NULL,
  cancel_requested INTEGER NOT NULL CHECK(cancel_requested IN (0, 1)),
  parent_run_id INTEGER REFERENCES runs(id),
  parent_checkpoint TEXT,
  created_us INTEGER NOT NULL,
  updated_us INTEGER NOT NULL,
  UNIQUE(sweep_id, name),
  CHECK((parent_run_id IS NULL) = (parent_checkpoint IS NULL))
);
CREATE INDEX runs_queue ON runs(status, priority DESC, created_us, id);
CREATE INDEX runs_by_parent ON runs(parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE TABLE workers(
  id TEXT PRIMARY KEY,
  device TEXT NOT NULL,
  memory_bytes INTEGER NOT NULL,
  registered_us INTEGER NOT NULL,
  last_seen_us INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE attempts(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  worker_id TEXT NOT NULL REFERENCES workers(id),
  leased_us INTEGER NOT NULL,
  lease_expires_us INTEGER NOT NULL,
  started_us INTEGER,
  ended_us INTEGER,
  outcome TEXT CHECK(outcome IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST', 'RELEASED')),
  reason TEXT,
  PRIMARY KEY(run_id, attempt)
) WITHOUT ROWID;
CREATE INDEX attempts_live ON attempts(lease_expires_us) WHERE outcome IS NULL;
CREATE TABLE metric_names(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
CREATE TABLE metrics(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  name_id INTEGER NOT NULL REFERENCES metric_names(id),
  step INTEGER NOT NULL,
  value REAL,
  wall_time_us INTEGER NOT NULL,
  PRIMARY KEY(run_id, name_id, step)
) WITHOUT ROWID;
CREATE TABLE artifacts(
  sha256 TEXT PRIMARY KEY,
  size_bytes INTEGER NOT NULL,
  path TEXT NOT NULL,
  created_us INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE checkpoints(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  step INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  sha256 TEXT NOT NULL REFERENCES artifacts(sha256),
  created_us INTEGER NOT NULL,
  PRIMARY KEY(run_id, step)
) WITHOUT ROWID;
CREATE TABLE events(
  id INTEGER PRIMARY KEY,
  run_id INTEGER REFERENCES runs(id),
  sweep_id INTEGER REFERENCES sweeps(id),
  from_state TEXT,
  to_state TEXT NOT NULL,
  who TEXT NOT NULL,
  at_us INTEGER NOT NULL,
  why TEXT NOT NULL
);
CREATE INDEX events_by_run ON events(run_id, id) WHERE run_id IS NOT NULL;
)sql";

// Version 2: per-run metric summaries, so that results tables over millions of metric rows read
// one row per (run, metric). Backfilled from the metrics already stored: latest = the value at the
// highest step; final = latest for runs that have succeeded.
constexpr char kSchemaV2[] = R"sql(
CREATE TABLE run_summaries(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  name_id INTEGER NOT NULL REFERENCES metric_names(id),
  latest_step INTEGER NOT NULL,
  latest_value REAL,
  latest_wall_time_us INTEGER NOT NULL,
  final_step INTEGER,
  final_value REAL,
  PRIMARY KEY(run_id, name_id)
) WITHOUT ROWID;
INSERT INTO run_summaries(run_id, name_id, latest_step, latest_value, latest_wall_time_us)
  SELECT m.run_id, m.name_id, m.step, m.value, m.wall_time_us
  FROM metrics AS m
  WHERE m.step = (SELECT max(x.step) FROM metrics AS x
                  WHERE x.run_id = m.run_id AND x.name_id = m.name_id);
UPDATE run_summaries SET final_step = latest_step, final_value = latest_value
  WHERE run_id IN (SELECT id FROM runs WHERE status = 'SUCCEEDED');
)sql";

// Version 3: the placement floor of a run that ran out of device memory. A run is only placed on a
// device with more memory than oom_memory_bytes (0: no floor), so an OOM is never repeated on the
// same device size.
constexpr char kSchemaV3[] = R"sql(
ALTER TABLE runs ADD COLUMN oom_memory_bytes INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 4: the lines workers log for a run (resumes, skipped checkpoints, errors), kept with the
// run so that `cart runs logs` and backups have them. (run_id, attempt, seq) makes a resent line
// idempotent; seq NULL (a worker that numbers nothing) never collides.
constexpr char kSchemaV4[] = R"sql(
CREATE TABLE run_logs(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  seq INTEGER,
  wall_time_us INTEGER NOT NULL,
  text TEXT NOT NULL,
  UNIQUE(run_id, attempt, seq)
);
)sql";

// Version 5: the least memory a run can train in (micro-batch lowered, gradient accumulation
// raised, same global batch); placement compares devices with it. Existing runs keep their
// estimate.
constexpr char kSchemaV5[] = R"sql(
ALTER TABLE runs ADD COLUMN min_memory_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET min_memory_bytes = memory_estimate_bytes;
)sql";

// Version 6: a run's job kind and an eval job's loop counts as columns of their own. They were
// kept in params_json under "kind" and "eval_loops", beside the config keys, where they leaked
// into filters, pivots and the list of varying keys; they move out of it here.
constexpr char kSchemaV6[] = R"sql(
ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'train' CHECK(kind IN ('train', 'eval'));
ALTER TABLE runs ADD COLUMN eval_loops TEXT NOT NULL DEFAULT '';
UPDATE runs SET
  kind = CASE json_extract(params_json, '$.kind') WHEN 'eval' THEN 'eval' ELSE 'train' END,
  eval_loops = coalesce(json_extract(params_json, '$.eval_loops'), ''),
  params_json = json_remove(params_json, '$.kind', '$.eval_loops');
)sql";

// Version 7: one vocabulary for how an attempt ends (store/types.h AttemptOutcome): a drained
// attempt is DRAINED (was RELEASED), and an attempt that ran out of device memory is recorded as
// OUT_OF_MEMORY instead of FAILED from now on. SQLite cannot change a CHECK constraint in place, so
// the table is rebuilt.
constexpr char kSchemaV7[] = R"sql(
CREATE TABLE attempts_v7(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  worker_id TEXT NOT NULL REFERENCES workers(id),
  leased_us INTEGER NOT NULL,
  lease_expires_us INTEGER NOT NULL,
  started_us INTEGER,
  ended_us INTEGER,
  outcome TEXT CHECK(outcome IN
    ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DRAINED', 'OUT_OF_MEMORY', 'LOST')),
  reason TEXT,
  PRIMARY KEY(run_id, attempt)
) WITHOUT ROWID;
INSERT INTO attempts_v7(run_id, attempt, worker_id, leased_us, lease_expires_us, started_us,
                        ended_us, outcome, reason)
  SELECT run_id, attempt, worker_id, leased_us, lease_expires_us, started_us, ended_us,
         CASE outcome WHEN 'RELEASED' THEN 'DRAINED' ELSE outcome END, reason
  FROM attempts ORDER BY run_id, attempt;
DROP TABLE attempts;
ALTER TABLE attempts_v7 RENAME TO attempts;
CREATE INDEX attempts_live ON attempts(lease_expires_us) WHERE outcome IS NULL;
)sql";

// Version 8: runs by (sweep, state), so that a sweep's counts per state (its progress, every
// dashboard view of it) read a covering index instead of every run row of the sweep.
constexpr char kSchemaV8[] = R"sql(
CREATE INDEX runs_by_sweep_status ON runs(sweep_id, status);
)sql";

// Version 9: checkpoints by artifact, so that retention finds whether an artifact is still named
// without reading every checkpoint row.
constexpr char kSchemaV9[] = R"sql(
CREATE INDEX checkpoints_by_sha256 ON checkpoints(sha256);
)sql";

// Version 10: each run's work, in hours of one RTX 3090 (config::EstimateRunCost over its config),
// so that placement can put the longest jobs first and weigh a device's speed. Existing runs keep
// 0: unknown, placed after the runs whose work is known, oldest first as before.
// Also events by sweep, so that deleting a sweep finds its own events without reading them all.
constexpr char kSchemaV10[] = R"sql(
ALTER TABLE runs ADD COLUMN work_hours REAL NOT NULL DEFAULT 0;
CREATE INDEX events_by_sweep ON events(sweep_id) WHERE sweep_id IS NOT NULL;
)sql";

// Version 11: tags and notes on runs and sweeps (RunStore::AnnotateRun/AnnotateSweep). A tag is
// a row of its own with who set it and when, keyed (owner, tag) so that setting it again is a
// no-op, and indexed by tag so that a filter on it (RunFilter::tags) probes an index. A note is
// one text per run or sweep, replaced as a whole, with who wrote it last and when.
constexpr char kSchemaV11[] = R"sql(
CREATE TABLE run_tags(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  tag TEXT NOT NULL,
  who TEXT NOT NULL,
  at_us INTEGER NOT NULL,
  PRIMARY KEY(run_id, tag)
) WITHOUT ROWID;
CREATE INDEX run_tags_by_tag ON run_tags(tag, run_id);
CREATE TABLE sweep_tags(
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  tag TEXT NOT NULL,
  who TEXT NOT NULL,
  at_us INTEGER NOT NULL,
  PRIMARY KEY(sweep_id, tag)
) WITHOUT ROWID;
ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN note_by TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN note_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sweeps ADD COLUMN note TEXT NOT NULL DEFAULT '';
ALTER TABLE sweeps ADD COLUMN note_by TEXT NOT NULL DEFAULT '';
ALTER TABLE sweeps ADD COLUMN note_us INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 12: data lineage. data_files holds each distinct data file identity once (a 10,000-run
// sweep on one training file stores its 64-digit hash once, not 10,000 times); run_data maps a
// run's roles ("train", "val:NAME", "task:NAME") to a path and, once recorded, to an identity.
// A row with file_id NULL is a file the run reads whose identity nobody has taken yet: the first
// worker that opens it fills it in, and so do derived runs reading the same path.
constexpr char kSchemaV12[] = R"sql(
CREATE TABLE data_files(
  id INTEGER PRIMARY KEY,
  sha256 TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  tokenizer TEXT NOT NULL,
  tokenizer_sha256 TEXT NOT NULL,
  UNIQUE(sha256, size_bytes, tokens, tokenizer, tokenizer_sha256)
);
CREATE TABLE run_data(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  role TEXT NOT NULL,
  path TEXT NOT NULL,
  file_id INTEGER REFERENCES data_files(id),
  recorded_by TEXT NOT NULL,
  recorded_us INTEGER NOT NULL,
  PRIMARY KEY(run_id, role)
) WITHOUT ROWID;
)sql";

// Version 13: where a run diverged (a non-finite loss). Such a run fails without retries: resume
// is exact, so every retry would replay the same steps to the same loss.
constexpr char kSchemaV13[] = R"sql(
ALTER TABLE runs ADD COLUMN diverged_step INTEGER;
ALTER TABLE runs ADD COLUMN diverged_loss TEXT;
)sql";

// Version 14: what fair share and preemption must remember. deleted_usage keeps the attempts'
// hours of a deleted sweep's runs, per owner, so that deleting a sweep does not give its owner a
// clean slate; runs.last_preempted_us keeps when a run was last asked to stop for other work, so
// that a restarted cartd does not preempt it again within the interval.
constexpr char kSchemaV14[] = R"sql(
CREATE TABLE deleted_usage(
  owner TEXT NOT NULL,
  started_us INTEGER NOT NULL,
  ended_us INTEGER NOT NULL
);
CREATE INDEX deleted_usage_by_end ON deleted_usage(ended_us);
ALTER TABLE runs ADD COLUMN last_preempted_us INTEGER;
CREATE INDEX runs_preempted ON runs(last_preempted_us) WHERE last_preempted_us IS NOT NULL;
)sql";

// Version 15: the largest micro-batch a run may train at, set when it ran out of memory at a
// larger one (0: no cap). cartd lowers the micro-batch, keeping the global batch, before it waits
// for a device with more memory.
constexpr char kSchemaV15[] = R"sql(
ALTER TABLE runs ADD COLUMN micro_batch_cap INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 16: the history of tags and notes (RunStore::RunAnnotationHistory): each change that
// changed something, with who made it and when, so that any user's removal of another's tag or
// replacement of their note is kept. Rows of a run (run_id) or of a sweep (sweep_id, run_id
// NULL); `previous` holds who had set a removed tag, or the note a new one replaced.
constexpr char kSchemaV16[] = R"sql(
CREATE TABLE annotation_history(
  id INTEGER PRIMARY KEY,
  run_id INTEGER REFERENCES runs(id),
  sweep_id INTEGER REFERENCES sweeps(id),
  at_us INTEGER NOT NULL,
  who TEXT NOT NULL,
  kind INTEGER NOT NULL,
  value TEXT NOT NULL,
  previous TEXT NOT NULL DEFAULT ''
);
CREATE INDEX annotation_history_by_run ON annotation_history(run_id, id) WHERE run_id IS NOT NULL;
CREATE INDEX annotation_history_by_sweep ON annotation_history(sweep_id, id)
  WHERE sweep_id IS NOT NULL;
)sql";

// Version 17: what each attempt ran on (RunStore::RecordEnvironment): the worker's environment
// record, its items one per line ("key<TAB>value"; keys are [a-z0-9_.], values one line),
// stored once per distinct content (sha256 of that text) and referenced by the attempts that
// ran on it.
constexpr char kSchemaV17[] = R"sql(
CREATE TABLE environments(
  id INTEGER PRIMARY KEY,
  sha256 TEXT NOT NULL UNIQUE,
  items TEXT NOT NULL
);
ALTER TABLE attempts ADD COLUMN environment_id INTEGER REFERENCES environments(id);
)sql";

// Version 18: where each sweep file came from (RunStore::GetSweepProvenance), as its client saw
// it at submit: items as an environment record's ("key<TAB>value" lines) and the git diff.
constexpr char kSchemaV18[] = R"sql(
CREATE TABLE sweep_provenance(
  sweep_id INTEGER PRIMARY KEY REFERENCES sweeps(id),
  items TEXT NOT NULL,
  git_diff TEXT NOT NULL
);
)sql";

// Version 19: the card model as a factor of the experiment (docs/architecture.md "Device
// classes"). attempts.device_class: the device its worker registered as when the attempt was
// leased (backfilled from the worker's current record); runs.device_class_policy: where a run's
// attempts after a checkpoint may go, 'same' (the class that wrote the checkpoint) or 'any';
// runs.seed_group: for a sweep that balances seeds over classes, the run's config without its
// seed ('' when its sweep does not balance).
constexpr char kSchemaV19[] = R"sql(
ALTER TABLE attempts ADD COLUMN device_class TEXT;
UPDATE attempts SET device_class = (SELECT w.device FROM workers AS w WHERE w.id = attempts.worker_id);
ALTER TABLE runs ADD COLUMN device_class_policy TEXT NOT NULL DEFAULT 'same'
  CHECK(device_class_policy IN ('same', 'any'));
ALTER TABLE runs ADD COLUMN seed_group TEXT NOT NULL DEFAULT '';
CREATE INDEX runs_by_seed_group ON runs(sweep_id, seed_group) WHERE seed_group != '';
)sql";

// Version 20: attempts.kept_work, set once an attempt records a checkpoint: its work stays part
// of the run (its device class among the run's) after checkpoint retention deletes the
// checkpoint's row. Backfilled from the checkpoints still there.
constexpr char kSchemaV20[] = R"sql(
ALTER TABLE attempts ADD COLUMN kept_work INTEGER NOT NULL DEFAULT 0 CHECK(kept_work IN (0, 1));
UPDATE attempts SET kept_work = 1 WHERE EXISTS (SELECT 1 FROM checkpoints AS c
  WHERE c.run_id = attempts.run_id AND c.attempt = attempts.attempt);
)sql";

// Version 21: plans and plan_claims, what `cart plan --apply` queued (each claim's look of its
// group-sequential design), and runs.plan_id, the plan that added a run.
constexpr char kSchemaV21[] = R"sql(
CREATE TABLE plans(
  id INTEGER PRIMARY KEY,
  created_us INTEGER NOT NULL,
  created_by TEXT NOT NULL,
  power REAL NOT NULL,
  alpha REAL NOT NULL,
  budget_hours REAL,
  spending TEXT NOT NULL CHECK(spending IN ('obrien-fleming', 'pocock')),
  text TEXT NOT NULL
);
CREATE TABLE plan_claims(
  plan_id INTEGER NOT NULL REFERENCES plans(id),
  claim TEXT NOT NULL,
  seeds_now INTEGER NOT NULL,
  seeds_target INTEGER NOT NULL,
  runs INTEGER NOT NULL,
  hours REAL NOT NULL,
  PRIMARY KEY(plan_id, claim)
) WITHOUT ROWID;
ALTER TABLE runs ADD COLUMN plan_id INTEGER REFERENCES plans(id);
CREATE INDEX runs_by_plan ON runs(plan_id) WHERE plan_id IS NOT NULL;
)sql";

// Version 22: eval_items, the per-item outcomes of zero-shot tasks that evaluation jobs score,
// one row per run, task and loop count (the paired tests over items read them).
constexpr char kSchemaV22[] = R"sql(
CREATE TABLE eval_items(
  run_id INTEGER NOT NULL REFERENCES runs(id),
  task TEXT NOT NULL,
  loops INTEGER NOT NULL,
  items INTEGER NOT NULL,
  correct TEXT NOT NULL,
  correct_norm TEXT NOT NULL,
  logprob BLOB NOT NULL,
  recorded_us INTEGER NOT NULL,
  PRIMARY KEY(run_id, task, loops)
) WITHOUT ROWID;
)sql";

// Version 23: notifications (server/notify/): events.cause, what a notification needs to tell a
// lost worker, a preemption and a divergence apart; subscriptions; the outbox `notifications`
// (one row per subscription and happening, unique on its key, delivered at least once) with each
// delivery try in `notification_tries`; `notify_marks`, what the notifier last saw (its cursor
// over events, a claim's verdict, a sweep's expected finish).
//
// events is rebuilt with AUTOINCREMENT and the cause column: the notifier's mark is an event id,
// and without AUTOINCREMENT SQLite hands a deleted sweep's newest ids out again, below the mark.
constexpr char kSchemaV23[] = R"sql(
CREATE TABLE events_v23(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER REFERENCES runs(id),
  sweep_id INTEGER REFERENCES sweeps(id),
  from_state TEXT,
  to_state TEXT NOT NULL,
  who TEXT NOT NULL,
  at_us INTEGER NOT NULL,
  why TEXT NOT NULL,
  cause TEXT CHECK(cause IS NULL OR cause IN ('lease_expired', 'preempted', 'diverged'))
);
INSERT INTO events_v23(id, run_id, sweep_id, from_state, to_state, who, at_us, why)
  SELECT id, run_id, sweep_id, from_state, to_state, who, at_us, why FROM events;
DROP TABLE events;
ALTER TABLE events_v23 RENAME TO events;
CREATE INDEX events_by_run ON events(run_id, id) WHERE run_id IS NOT NULL;
CREATE INDEX events_by_sweep ON events(sweep_id) WHERE sweep_id IS NOT NULL;
CREATE TABLE subscriptions(
  id INTEGER PRIMARY KEY,
  owner TEXT NOT NULL,
  scope TEXT NOT NULL CHECK(scope IN ('run', 'sweep', 'mine')),
  run_id INTEGER REFERENCES runs(id),
  sweep_id INTEGER REFERENCES sweeps(id),
  events TEXT NOT NULL,
  channel TEXT NOT NULL CHECK(channel IN ('webhook', 'slack', 'email')),
  target TEXT NOT NULL,
  lost_after_us INTEGER NOT NULL CHECK(lost_after_us > 0),
  stuck_factor REAL NOT NULL CHECK(stuck_factor > 1),
  slip_share REAL NOT NULL CHECK(slip_share > 0),
  created_us INTEGER NOT NULL,
  removed_us INTEGER,
  CHECK((scope = 'run') = (run_id IS NOT NULL)),
  CHECK((scope = 'sweep') = (sweep_id IS NOT NULL))
);
CREATE INDEX subscriptions_by_owner ON subscriptions(owner, id);
CREATE TABLE notifications(
  id INTEGER PRIMARY KEY,
  subscription_id INTEGER NOT NULL REFERENCES subscriptions(id),
  key TEXT NOT NULL,
  event TEXT NOT NULL,
  run_id INTEGER REFERENCES runs(id),
  sweep_id INTEGER REFERENCES sweeps(id),
  happened_us INTEGER NOT NULL,
  summary TEXT NOT NULL,
  payload TEXT NOT NULL,
  created_us INTEGER NOT NULL,
  state TEXT NOT NULL CHECK(state IN ('PENDING', 'DELIVERED', 'GAVE_UP')),
  tries INTEGER NOT NULL DEFAULT 0,
  next_try_us INTEGER NOT NULL,
  done_us INTEGER,
  UNIQUE(subscription_id, key)
);
CREATE INDEX notifications_due ON notifications(next_try_us, id) WHERE state = 'PENDING';
CREATE TABLE notification_tries(
  notification_id INTEGER NOT NULL REFERENCES notifications(id),
  try INTEGER NOT NULL,
  at_us INTEGER NOT NULL,
  ok INTEGER NOT NULL CHECK(ok IN (0, 1)),
  detail TEXT NOT NULL,
  PRIMARY KEY(notification_id, try)
) WITHOUT ROWID;
CREATE TABLE notify_marks(
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL,
  at_us INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

// Version 24: attempts.energy_j and energy_source, what each attempt used from its device's own
// energy counter (NVML on a GPU, RAPL on a CPU; NULL: not measured).
constexpr char kSchemaV24[] = R"sql(
ALTER TABLE attempts ADD COLUMN energy_j REAL CHECK(energy_j IS NULL OR energy_j >= 0);
ALTER TABLE attempts ADD COLUMN energy_source TEXT
  CHECK(energy_source IS NULL OR energy_source IN ('nvml', 'rapl'));
)sql";

// Version 25: device-hour budgets (docs/operations.md "Budgets"): a sweep's, from its file or an
// admin; a user's, set by an admin over cartd's config.
constexpr char kSchemaV25[] = R"sql(
ALTER TABLE sweeps ADD COLUMN budget_device_hours REAL
  CHECK(budget_device_hours IS NULL OR budget_device_hours > 0);
CREATE TABLE user_budgets(
  user TEXT PRIMARY KEY,
  device_hours REAL NOT NULL CHECK(device_hours > 0),
  set_by TEXT NOT NULL,
  set_us INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

absl::Status Apply(Database& db, const Migration& migration) {
  Transaction txn(&db);
  CART_RETURN_IF_ERROR(txn.Begin(Transaction::Mode::kImmediate));
  // Re-read under the write lock: another process may have migrated meanwhile.
  CART_ASSIGN_OR_RETURN(int current, SchemaVersion(db));
  if (current >= migration.version) return absl::OkStatus();
  CART_RETURN_IF_ERROR(db.Execute(kCreateMeta));
  absl::Status applied = db.Execute(migration.sql);
  if (!applied.ok()) {
    return absl::InternalError(StrCat("schema migration to version ", migration.version, " (",
                                      migration.description, ") failed on ", db.path(), ": ",
                                      Message(applied)));
  }
  CART_ASSIGN_OR_RETURN(auto set, db.Cached(kUpsertVersion));
  set->BindAll(StrCat(migration.version));
  CART_RETURN_IF_ERROR(set->Run());
  return txn.Commit();
}

}  // namespace

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration>* const kAll = new std::vector<Migration>{
      {1, "sweeps, runs, workers, attempts, metrics, artifacts, checkpoints, events", kSchemaV1},
      {2, "run_summaries, backfilled from metrics", kSchemaV2},
      {3, "runs.oom_memory_bytes: placement floor after a device ran out of memory", kSchemaV3},
      {4, "run_logs: the lines workers log for a run", kSchemaV4},
      {5, "runs.min_memory_bytes: placement with a lowered micro-batch", kSchemaV5},
      {6, "runs.kind and runs.eval_loops out of params_json", kSchemaV6},
      {7, "attempts.outcome: DRAINED and OUT_OF_MEMORY", kSchemaV7},
      {8, "runs_by_sweep_status: a sweep's counts per state from an index", kSchemaV8},
      {9, "checkpoints_by_sha256: checkpoint retention releases unnamed artifacts", kSchemaV9},
      {10, "runs.work_hours: each run's work for speed-aware placement", kSchemaV10},
      {11, "run_tags, sweep_tags, and a note on runs and sweeps", kSchemaV11},
      {12, "data_files and run_data: the data each run reads (lineage)", kSchemaV12},
      {13, "runs.diverged_step, diverged_loss: runs failed on a non-finite loss", kSchemaV13},
      {14, "deleted_usage and runs.last_preempted_us: fair share and preemption kept", kSchemaV14},
      {15, "runs.micro_batch_cap: the micro-batch lowered after an out-of-memory", kSchemaV15},
      {16, "annotation_history: who changed which tag or note, and when", kSchemaV16},
      {17, "environments and attempts.environment_id: what each attempt ran on", kSchemaV17},
      {18, "sweep_provenance: where each sweep file came from", kSchemaV18},
      {19, "attempts.device_class, runs.device_class_policy and seed_group: device classes",
       kSchemaV19},
      {20, "attempts.kept_work: an attempt that recorded a checkpoint", kSchemaV20},
      {21, "plans, plan_claims and runs.plan_id: seeds queued by cart plan --apply", kSchemaV21},
      {22, "eval_items: per-item outcomes of zero-shot tasks", kSchemaV22},
      {23, "events.cause, subscriptions and the notification outbox", kSchemaV23},
      {24, "attempts.energy_j, energy_source: each attempt's measured energy", kSchemaV24},
      {25, "sweeps.budget_device_hours and user_budgets: device-hour budgets", kSchemaV25},
  };
  return *kAll;
}

int LatestSchemaVersion() { return Migrations().back().version; }

absl::StatusOr<int> SchemaVersion(Database& db) {
  CART_ASSIGN_OR_RETURN(auto has_meta, db.Cached(kHasMeta));
  CART_ASSIGN_OR_RETURN(bool row, has_meta->Step());
  if (!row || has_meta->ColumnInt64(0) == 0) return 0;
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectVersion));
  CART_ASSIGN_OR_RETURN(row, select->Step());
  if (!row) return 0;
  const std::string text = select->ColumnText(0);
  std::optional<int64_t> version = ParseInt64(text);
  if (!version || *version < 0) {
    return absl::DataLossError(
        StrCat("database ", db.path(), " has a malformed schema_version '", text, "'"));
  }
  return static_cast<int>(*version);
}

absl::Status Migrate(Database& db) {
  CART_ASSIGN_OR_RETURN(int version, SchemaVersion(db));
  if (version > LatestSchemaVersion()) {
    return absl::FailedPreconditionError(StrCat("database ", db.path(), " has schema version ",
                                                version, ", newer than this build's ",
                                                LatestSchemaVersion(), "; upgrade cartd"));
  }
  for (const Migration& migration : Migrations()) {
    if (migration.version <= version) continue;
    CART_RETURN_IF_ERROR(Apply(db, migration));
  }
  return absl::OkStatus();
}

}  // namespace cart::store::internal
