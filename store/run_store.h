#pragma once

// RunStore: everything cartd remembers (docs/design.md "Storage"), behind a domain API.
//
// Concurrency. One writer path: every mutating call is queued to a single writer thread that owns
// the only write connection and commits whatever has queued up in one transaction (group commit),
// each call inside its own savepoint, so one call's failure never undoes another's. A call is
// atomic: its rows (a state change and its event row; a metric batch and its summaries) commit
// together or not at all. Blocking calls return once their transaction has committed; the *Async
// calls return a future that is ready at that point. Queries run on reader connections from a
// pool, each in its own read transaction, so a query sees one consistent snapshot and never waits
// for the writer (WAL). All methods are thread-safe.
//
// Durability (StoreOptions::synchronous_full): with false, a call that returned has survived the
// death of the process (SIGKILL included); a power cut may lose the last commits (a submitted
// sweep, acknowledged metrics) but never corrupts the file. With true (cartd's default,
// store_sync: full) a call that returned has also survived a power cut (PowerCutTest).
//
// Errors: InvalidArgument for malformed input (message names the field), NotFound for an unknown
// run / sweep / worker / metric, AlreadyExists for a taken sweep name, FailedPrecondition for an
// operation the run's state does not allow or a stale attempt number (message names the run and
// its state), Unavailable when the database is locked by another process past the busy timeout,
// Internal only for broken invariants.

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/notify_store.h"
#include "store/pages.h"
#include "store/results.h"
#include "store/types.h"

namespace cart::store {

namespace internal {
class Database;
class Writer;
class ReaderPool;
}  // namespace internal

struct StoreOptions {
  // The SQLite file; created with the latest schema when missing, migrated when older.
  std::string path;
  // How long a lease lasts after a claim or heartbeat, microseconds.
  int64_t lease_ttl_us = kDefaultLeaseTtlUs;
  // fsync every commit (power-loss safe) instead of relying on the OS (process-crash safe).
  bool synchronous_full = false;
  // How long to wait for a lock held by another process (an admin backup), milliseconds.
  int busy_timeout_ms = 5000;
  // Page cache of the writer connection and of each reader connection, KiB.
  int writer_cache_kib = 64 * 1024;
  int reader_cache_kib = 16 * 1024;
  // The WAL is folded back into the database file when it reaches this many pages (4 KiB each).
  int wal_checkpoint_pages = 10'000;
  // At most this many queued calls share one commit.
  int max_calls_per_commit = 1000;
  // Limits on input (docs/design.md "Security").
  int64_t max_runs_per_sweep = 100'000;
  int64_t max_points_per_batch = 100'000;
  // Log lines stored per attempt (worker lines, numbered from seq 1). The next one is replaced by
  // a line saying that later lines are not stored; the rest are acknowledged and dropped.
  int64_t max_log_lines_per_attempt = 20'000;
};

// What ClaimNextRun hands to a worker.
struct Claim {
  RunRecord run;    // state LEASED
  int64_t attempt;  // the fencing token every later report must carry
  int64_t lease_expires_us;
  // The run's own latest checkpoint to resume from (after a lost lease, a resume or an extend).
  std::optional<CheckpointRecord> resume_from;
  // For a derived run without its own checkpoint: the parent checkpoint it starts from.
  std::optional<CheckpointRecord> parent_checkpoint;
  // The data files it reads and their recorded identities (RunData).
  std::vector<RunDataRecord> data;
};

// How RetryAttempt requeues a run whose attempt the worker reported as failed.
struct RetryRequest {
  // Whether the attempt counts against max_attempts: true for a crash or an error, false when the
  // device was too small (the run itself is not at fault).
  bool counted = true;
  // > 0: the attempt ran out of memory on a device with this much memory, bytes. The run's
  // placement floor (RunRecord::oom_memory_bytes) rises to it, never falls.
  int64_t oom_memory_bytes = 0;
  // > 0: the attempt ran out of memory and the run retries at a micro-batch of at most this
  // (RunRecord::micro_batch_cap; it only falls). The attempt is recorded as OUT_OF_MEMORY.
  int64_t micro_batch_cap = 0;
};

struct HeartbeatReply {
  int64_t lease_expires_us = 0;
  bool cancel_requested = false;  // the worker should checkpoint, stop and report kCancelled
};

// A lease that ExpireLeases took back.
struct ExpiredLease {
  int64_t run_id = 0;
  int64_t attempt = 0;
  std::string worker_id;
  RunState new_state = RunState::kQueued;  // QUEUED, or FAILED when max_attempts were spent
};

// Result of `PRAGMA integrity_check` and `PRAGMA foreign_key_check`.
struct IntegrityReport {
  bool ok = false;
  std::vector<std::string> problems;  // empty when ok
};

class RunStore {
 public:
  // Opens (creating or migrating) the database and starts the writer thread.
  // FailedPrecondition when the file's schema is newer than this build; DataLoss when it is not a
  // database; InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<RunStore>> Open(const StoreOptions& options);
  // Finishes every queued call, then closes.
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  // ---- Sweeps

  // Writes the sweep and all its runs (QUEUED, or BLOCKED while a parent checkpoint is missing)
  // with one event per run, in one transaction. The same client_request_id again returns the
  // existing sweep with created = false, provided name and spec_text match (AlreadyExists if
  // not). AlreadyExists when the name is taken; NotFound for an unknown parent_run_id;
  // InvalidArgument for malformed runs (message names the run and the field).
  absl::StatusOr<CreatedSweep> CreateSweep(const NewSweep& sweep, const Audit& audit);
  // Cancels every run of the sweep that can be (see CancelRun) and marks it cancelled.
  // Returns the number of runs that changed state or got a cancel request.
  absl::StatusOr<int64_t> CancelSweep(const std::string& name, const Audit& audit);
  // Resumes every CANCELLED or FAILED run of the sweep; returns how many.
  absl::StatusOr<int64_t> ResumeSweep(const std::string& name, const Audit& audit);
  // Deletes the sweep with its runs, their metrics, summaries, logs, attempts, events and
  // checkpoints, in one transaction, and returns the artifacts left unnamed. Refused
  // (FailedPrecondition, nothing deleted) while one of its runs is LEASED or RUNNING (a worker
  // still writes to it), and while runs of another sweep derive from its runs: their start
  // checkpoints are kept as long as they exist (the message names those sweeps). NotFound for an
  // unknown sweep. The hours its attempts ran stay in its owner's fair-share usage.
  absl::StatusOr<DeletedSweep> DeleteSweep(const std::string& name);
  // Sets sweep `name`'s device-hour budget, with an event on the sweep; a user's (over cartd's
  // config). InvalidArgument for hours not > 0; FailedPrecondition, naming what is spent, for a
  // budget below the device-hours already spent (up to audit.at_us); NotFound for an unknown
  // sweep.
  absl::Status SetSweepBudget(const std::string& name, double hours, const Audit& audit);
  absl::Status SetUserBudget(const std::string& user, double hours, const Audit& audit);
  // Sets the sweep's priority and that of its runs not yet finished (QUEUED, BLOCKED, LEASED,
  // RUNNING), with an event on the sweep. Returns how many runs changed. NotFound for an unknown
  // sweep.
  absl::StatusOr<int64_t> SetSweepPriority(const std::string& name, int64_t priority,
                                           const Audit& audit);
  // Seed plans (docs/study.md "Planning seeds"): records the plan with its claims' looks and
  // adds its runs to their sweeps (each named by the sweep's next free index, QUEUED or BLOCKED as
  // a submitted run, with plan_id set), in one transaction. NotFound, nothing written, for a
  // sweep or parent run deleted since the plan was made; FailedPrecondition for a cancelled
  // sweep; InvalidArgument for a malformed plan.
  absl::StatusOr<AppliedPlan> ApplyPlan(const NewPlan& plan, const Audit& audit);
  // Every plan, oldest first, with its claims and the runs it queued that still exist.
  absl::StatusOr<std::vector<PlanRecord>> ListPlans();
  // GPU-hours used per sweep owner (sweeps.created_by), each hour of an attempt weighed by
  // 2^(-age / half_life), age measured back from now_us; attempts that ended more than ten
  // half-lives ago are left out. A running attempt counts up to now. Deleted sweeps' attempts
  // count as they did before the deletion.
  absl::StatusOr<std::map<std::string, double>> DecayedUsage(int64_t now_us, int64_t half_life_us);
  // Preemption's memory: RecordPreemption notes that the run was asked to stop for other work at
  // now_us; RecentPreemptions returns each run's last such time at or after since_us, by run id.
  absl::Status RecordPreemption(int64_t run_id, int64_t now_us);
  absl::StatusOr<std::map<int64_t, int64_t>> RecentPreemptions(int64_t since_us);

  // ---- Workers and leases

  // Registers a worker or updates its device and memory (idempotent).
  absl::Status RegisterWorker(const std::string& worker_id, const std::string& device,
                              int64_t memory_bytes, int64_t now_us);
  // Leases the highest-priority, then oldest QUEUED run whose memory estimate fits in
  // device_memory_bytes, and whose OOM floor (RunRecord::oom_memory_bytes) is below it, to a
  // registered worker: run -> LEASED, a new attempt row, lease until now + lease_ttl. nullopt
  // when nothing fits. NotFound for an unregistered worker.
  absl::StatusOr<std::optional<Claim>> ClaimNextRun(const std::string& worker_id,
                                                    int64_t device_memory_bytes, int64_t now_us);
  // Leases run `run_id` to the worker as ClaimNextRun does, if it is still QUEUED and fits
  // device_memory_bytes (placement chose it from ListQueuedWork); nullopt when it no longer is
  // (another worker took it meanwhile). NotFound for an unregistered worker.
  absl::StatusOr<std::optional<Claim>> ClaimRun(const std::string& worker_id, int64_t run_id,
                                                int64_t device_memory_bytes, int64_t now_us);
  // The QUEUED runs as placement weighs them (server/placement.h), at most `limit`: highest
  // priority first, then longest whole-run work (unknown work last), then oldest. Only runs
  // that fit a device of max_memory_bytes (the largest live worker's), so that runs no worker
  // can take do not fill the page.
  absl::StatusOr<std::vector<PlaceableRun>> ListQueuedWork(int64_t limit, int64_t max_memory_bytes);
  // For each seed group that has queued runs (a sweep balancing its seeds over device classes),
  // how many of its runs are on each class: a leased or ended run on its latest attempt's, a
  // queued one on the class its checkpoint pins it to.
  absl::StatusOr<SeedGroupClasses> ListSeedGroupClasses();
  // LEASED -> RUNNING for the current attempt (the worker started training). Repeating it for a
  // RUNNING attempt is a no-op. FailedPrecondition for a stale attempt or another state.
  absl::Status MarkRunning(int64_t run_id, int64_t attempt, int64_t now_us);
  // Extends the lease of the current attempt to now + lease_ttl. FailedPrecondition when
  // `attempt` is not the run's current attempt or the run holds no lease (fencing).
  absl::StatusOr<HeartbeatReply> Heartbeat(int64_t run_id, int64_t attempt, int64_t now_us);
  // Takes back every lease that expired at or before now: attempt outcome LOST, run -> QUEUED
  // (attempt budget left) or FAILED. One transaction, one event per run.
  absl::StatusOr<std::vector<ExpiredLease>> ExpireLeases(int64_t now_us);
  // Ends the current attempt as the worker reports: kSucceeded, kCancelled, kDrained, or kFailed
  // for a failure not worth retrying (run -> FAILED); InvalidArgument for kLost (lease expiry's)
  // and kOutOfMemory (RetryAttempt's). kSucceeded needs RUNNING and fixes the final value of every
  // metric (the value at the last step) and unblocks derived runs waiting for the parent's "final"
  // checkpoint. FailedPrecondition for a stale attempt or a state that does not allow it.
  // `diverged` (kFailed only): the loss became non-finite; the run records where
  // (RunRecord::diverged), and ResumeRun then needs a config change.
  absl::StatusOr<RunRecord> RecordAttemptOutcome(int64_t run_id, int64_t attempt,
                                                 AttemptOutcome outcome, const Audit& audit,
                                                 std::optional<Divergence> diverged = {});
  // Ends the current attempt with outcome FAILED, or OUT_OF_MEMORY when retry.oom_memory_bytes is
  // set (reason: audit.why), and puts the run back in the
  // queue to resume from its latest checkpoint (LEASED | RUNNING -> QUEUED), or -> FAILED when
  // the counted attempts reach max_attempts, or -> CANCELLED when a cancel was requested. See
  // RetryRequest for counting and the OOM placement floor. FailedPrecondition for a stale attempt.
  absl::StatusOr<RunRecord> RetryAttempt(int64_t run_id, int64_t attempt, const RetryRequest& retry,
                                         const Audit& audit);
  // The largest memory of any registered worker; nullopt when none is registered. A QUEUED run
  // whose estimate exceeds it waits for a bigger device.
  absl::StatusOr<std::optional<int64_t>> MaxWorkerMemory();
  absl::StatusOr<std::vector<WorkerRecord>> ListWorkers();

  // ---- Metrics and checkpoints (fenced by attempt: the run must be LEASED or RUNNING under
  // `attempt`, else FailedPrecondition and nothing is written)

  // Appends a batch idempotently on (run, step, name): a point already stored is kept and the
  // resent one ignored. Updates the run's summaries in the same transaction. Returns the highest
  // step in the batch: every point up to it is acknowledged. InvalidArgument for an empty or
  // oversized batch, a negative step or a bad name.
  absl::StatusOr<int64_t> AppendMetrics(int64_t run_id, int64_t attempt,
                                        std::vector<MetricPoint> points);
  // As AppendMetrics, without waiting: many appends in flight share commits.
  std::future<absl::StatusOr<int64_t>> AppendMetricsAsync(int64_t run_id, int64_t attempt,
                                                          std::vector<MetricPoint> points);
  // Appends lines a worker logged for the attempt it holds (fenced like metrics). Idempotent on
  // (run, attempt, seq) for seq > 0: a resent line is stored once. Lines longer than
  // kMaxLogLineBytes are cut; lines past max_log_lines_per_attempt are dropped (one line says so).
  // Returns how many lines were new.
  absl::StatusOr<int64_t> AppendLog(int64_t run_id, int64_t attempt,
                                    const std::vector<LogLine>& lines);
  // Records a checkpoint (and its artifact, content-addressed by sha256). The same step again
  // points the checkpoint at the new artifact. Derived runs waiting for this step go QUEUED.
  // InvalidArgument for a malformed sha256 or path; FailedPrecondition when the sha256 is already
  // recorded with another size. `blob_present`, when given, is asked inside the write whether the
  // blob is on disk (its error is returned and nothing is recorded): with RemoveUnnamedArtifacts
  // it makes "recorded" and "deleted from disk" exclusive, so no checkpoint names a deleted blob.
  absl::StatusOr<CheckpointRecord> RecordCheckpoint(
      int64_t run_id, int64_t attempt, const NewCheckpoint& checkpoint, int64_t now_us,
      const std::function<absl::Status()>& blob_present = nullptr);
  // Calls `remove` (which deletes a blob from disk) for each of `shas` that no artifact names,
  // inside the write, one at a time: a checkpoint recorded for the same content since it was
  // released (blobs are shared by content) keeps its blob. What DeleteSweep and PruneCheckpoints
  // release goes through here.
  absl::Status RemoveUnnamedArtifacts(const std::vector<std::string>& shas,
                                      const std::function<void(const std::string&)>& remove);
  // Records what `attempt` runs on (its worker's environment record: ordered key, value items),
  // stored once per distinct content and read back with the attempt (AttemptRecord::environment).
  // The attempt must be the run's current one (the fence, as for metrics). InvalidArgument
  // naming the item past the bounds: at most kMaxEnvironmentItems items, keys of 1 to 64
  // characters [a-z0-9_.], values of at most 1,024 bytes.
  static constexpr size_t kMaxEnvironmentItems = 96;
  // Records the energy `attempt` has used so far (joules since it began, from `source`: "nvml"
  // or "rapl"; docs/operations.md "Energy"); a reading lower than the one stored is ignored (a
  // heartbeat overtaken by a later one). Fenced as metrics are. InvalidArgument for a negative
  // or non-finite value or another source.
  absl::Status RecordEnergy(int64_t run_id, int64_t attempt, double joules,
                            const std::string& source);
  absl::Status RecordEnvironment(int64_t run_id, int64_t attempt,
                                 const std::vector<std::pair<std::string, std::string>>& items);
  // Records the identities of data files the attempt opened (data lineage): a role the run has
  // no identity for takes this one (a role it has no row for gets one), and so do its derived
  // runs, at any depth, whose row of the same role and path has none; a role already recorded
  // keeps its identity. Returns the run's rows as they then are. InvalidArgument naming a
  // malformed entry (role, path, sha256, sizes; at most kMaxDataFiles).
  absl::StatusOr<std::vector<RunDataRecord>> RecordRunData(int64_t run_id, int64_t attempt,
                                                           const std::vector<RunDataRecord>& files,
                                                           int64_t now_us);
  // Per-item outcomes of zero-shot tasks (docs/study.md "Paired tests over items"), fenced like
  // metrics: replaces the run's row of each (task, loop count) given, in one transaction.
  // InvalidArgument naming the task and field: a task name that is not a config key, loops
  // outside 1..16, correct not all '0'/'1' or empty or past kMaxEvalItems, correct_norm or
  // logprob neither empty nor as long as correct, a non-finite log-likelihood, more than
  // kMaxEvalTasks tasks or one task twice.
  absl::Status RecordEvalItems(int64_t run_id, int64_t attempt, const std::vector<EvalItems>& items,
                               int64_t now_us);
  // The run's per-item outcomes by task, then loop count. NotFound for an unknown run.
  absl::StatusOr<std::vector<EvalItems>> ListEvalItems(int64_t run_id);
  // Checkpoint retention (store/retention.cc): forgets the checkpoints of `run_id` (every run
  // when nullopt) that have `keep` (>= 1) newer ones, except those a derived run starts from, and
  // returns the artifacts no checkpoint names any more (their rows are gone; the caller deletes
  // the blobs). The latest checkpoint, which resume and "final" children use, is always kept.
  absl::StatusOr<std::vector<std::string>> PruneCheckpoints(std::optional<int64_t> run_id,
                                                            int64_t keep);

  // ---- User actions on runs

  // QUEUED | BLOCKED | LEASED -> CANCELLED at once; RUNNING gets a cancel request (reported by
  // the next Heartbeat) and turns CANCELLED when the worker reports kCancelled.
  // FailedPrecondition for a finished run.
  absl::StatusOr<RunRecord> CancelRun(int64_t run_id, const Audit& audit);
  // CANCELLED | FAILED -> QUEUED (BLOCKED while its parent checkpoint is missing), with a fresh
  // attempt budget. `change` replaces its config and params first (and clears a divergence).
  // FailedPrecondition, changing nothing, for a run that diverged and no change: resuming it
  // as it is would replay the same steps to the same loss.
  absl::StatusOr<RunRecord> ResumeRun(int64_t run_id, const Audit& audit,
                                      const std::optional<ConfigChange>& change = {});
  // SUCCEEDED -> QUEUED to train on to new_total_steps (> the current steps), resuming from its
  // latest checkpoint. `change` is the re-resolved config (with the new steps and schedule) and
  // its params; both replace the stored ones. FailedPrecondition for another state or
  // new_total_steps not above the current steps.
  absl::StatusOr<RunRecord> ExtendRun(int64_t run_id, int64_t new_total_steps,
                                      const ConfigChange& change, const Audit& audit);
  // Lets the run's later attempts go to any device class (`any`), or only to the class that
  // wrote its latest checkpoint (docs/architecture.md "Device classes"), with an event of the
  // run saying which and why. Any state; a no-op (no event) when it already is so.
  absl::StatusOr<RunRecord> SetDeviceClassPolicy(int64_t run_id, bool any, const Audit& audit);

  // ---- Tags and notes (types.h: Tag, Note, AnnotationChange)

  // Removes, then adds tags (each with audit.who and audit.at_us), then replaces the note when
  // change.note is set, in one transaction; returns the run as it then is. Any state; not an
  // event of the run, but each change that changed something is kept in its annotation history
  // (RunAnnotationHistory). InvalidArgument naming the tag or the note's fault (spelling, size,
  // control characters, a tag both added and removed); FailedPrecondition, changing nothing,
  // when the run would carry more than kMaxTags tags; NotFound for an unknown run.
  absl::StatusOr<RunRecord> AnnotateRun(int64_t run_id, const AnnotationChange& change,
                                        const Audit& audit);
  // The same for a sweep (its own tags and note, not its runs').
  absl::StatusOr<SweepRecord> AnnotateSweep(const std::string& name, const AnnotationChange& change,
                                            const Audit& audit);
  // What AnnotateRun / AnnotateSweep changed on a run or a sweep, oldest first (types.h
  // AnnotationEvent; the newest kMaxAnnotationHistory). NotFound for an unknown run or sweep.
  absl::StatusOr<std::vector<AnnotationEvent>> RunAnnotationHistory(int64_t run_id);
  absl::StatusOr<std::vector<AnnotationEvent>> SweepAnnotationHistory(const std::string& name);
  // Where the sweep's file came from, as its client sent it at submit; nullopt when it sent none.
  // NotFound for an unknown sweep.
  absl::StatusOr<std::optional<SweepProvenance>> GetSweepProvenance(const std::string& name);

  // ---- Queries (each one consistent snapshot)

  absl::StatusOr<SweepRecord> GetSweep(const std::string& name);
  absl::StatusOr<std::vector<SweepRecord>> ListSweeps();  // by id
  absl::StatusOr<RunRecord> GetRun(int64_t run_id);
  // The run with store name `name` (its index, e.g. "3") in sweep `sweep`: one indexed lookup.
  // NotFound names "<sweep>/<name>".
  absl::StatusOr<RunRecord> FindRun(const std::string& sweep, const std::string& name);
  absl::StatusOr<std::vector<RunRecord>> ListRuns(const RunFilter& filter);  // by id
  absl::StatusOr<std::vector<AttemptRecord>> ListAttempts(int64_t run_id);   // by attempt
  // What each sweep's attempts used (Spending), by sweep id; attempts still running count up to
  // `now_us`. One query, whatever the number of runs.
  absl::StatusOr<std::map<int64_t, Spending>> SweepSpending(int64_t now_us);
  // The same for each run of one sweep, by run id (runs with no attempt are absent); NotFound
  // names a sweep that does not exist.
  absl::StatusOr<std::map<int64_t, Spending>> RunSpending(const std::string& sweep, int64_t now_us);
  // What device-hour budgets are kept from (docs/operations.md "Budgets"): every sweep's owner,
  // budget and spent device-hours (running attempts up to `now_us`), deleted sweeps' hours by
  // owner, and the user budgets an admin set.
  absl::StatusOr<BudgetUse> ReadBudgetUse(int64_t now_us);
  // Whether any sweep or user has a budget in the store (one cheap read: placement skips the
  // ledger when none does and cartd's config sets none).
  absl::StatusOr<bool> AnyBudget();
  absl::StatusOr<std::vector<EventRecord>> RunEvents(int64_t run_id);  // oldest first
  // A run's log lines with id > after_id, oldest first, at most `limit` (0: all).
  absl::StatusOr<std::vector<LogLine>> RunLog(int64_t run_id, int64_t after_id, int64_t limit);
  absl::StatusOr<std::vector<MetricSummary>> RunSummaries(int64_t run_id);        // by name
  absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(int64_t run_id);  // by step
  // The data files a run reads: train first, then by role.
  absl::StatusOr<std::vector<RunDataRecord>> RunData(int64_t run_id);
  absl::StatusOr<std::optional<CheckpointRecord>> LatestCheckpoint(int64_t run_id);
  // The sha256 of every artifact a checkpoint names.
  absl::StatusOr<std::vector<std::string>> ArtifactNames();

  // Paged reads (store/pages.h). RunPage: InvalidArgument for an unknown sort or a negative
  // offset or limit. SweepKeys: NotFound for an unknown sweep.
  absl::StatusOr<RunPage> ListRunPage(const RunPageRequest& request);
  absl::StatusOr<std::vector<SweepProgress>> ListSweepProgress();  // by sweep id
  absl::StatusOr<SweepKeys> GetSweepKeys(const std::string& sweep);
  absl::StatusOr<StoreTotals> Totals();

  // The results layer (store/results.h). NotFound when the metric was never logged, or when
  // nothing matched and a config key occurs in no run (a misspelt key).
  absl::StatusOr<PivotTable> Pivot(const PivotRequest& request);
  // InvalidArgument for duplicate labels or a baseline that is not a group; FailedPrecondition
  // when the baseline group matches no run with the metric.
  absl::StatusOr<std::vector<AblationRow>> Ablation(const AblationRequest& request);
  absl::StatusOr<Series> MetricSeries(const SeriesRequest& request);
  absl::StatusOr<StageComparison> CompareStages(const StageComparisonRequest& request);

  // ---- Administration

  // Online backup with SQLite's backup API from a reader's snapshot: writers go on meanwhile, the
  // copy is consistent as of the start. Writes dest_path atomically (temporary file + rename).
  // AlreadyExists when dest_path exists.
  absl::Status Backup(const std::string& dest_path);
  // PRAGMA integrity_check and foreign_key_check on a reader connection.
  absl::StatusOr<IntegrityReport> IntegrityCheck();

  const StoreOptions& options() const { return options_; }

  // Subscriptions, the notification outbox and the notifier's marks, in the same database and
  // through the same writer (notify_store.h).
  NotifyStore& notify() { return *notify_; }

 private:
  RunStore(StoreOptions options, std::unique_ptr<internal::Writer> writer,
           std::unique_ptr<internal::ReaderPool> readers);
  // ClaimNextRun and ClaimRun: marks the worker seen, asks `pick` (inside the same write) which
  // QUEUED run to lease, and leases it; nullopt when `pick` gives none.
  absl::StatusOr<std::optional<Claim>> ClaimPicked(
      const std::string& worker_id, int64_t now_us,
      const std::function<absl::StatusOr<std::optional<int64_t>>(internal::Database&)>& pick);

  // Constant after construction.
  const StoreOptions options_;
  std::unique_ptr<internal::Writer> writer_;
  std::unique_ptr<internal::ReaderPool> readers_;
  std::unique_ptr<NotifyStore> notify_;
};

// The same two admin operations on a database file that no RunStore in this process has open
// (`cart admin backup/check`): the file is opened read-only and never migrated. NotFound when
// db_path does not exist.
absl::Status BackupDatabase(const std::string& db_path, const std::string& dest_path);
absl::StatusOr<IntegrityReport> CheckDatabase(const std::string& db_path);

}  // namespace cart::store
