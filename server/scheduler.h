#pragma once

// Scheduler: cartd's domain object (docs/architecture.md "Data flow of a sweep"), with no gRPC in
// it. It turns sweep files into runs, hands runs to workers by memory fit, keeps their leases
// (TTL, fencing by attempt number), retries, requeues and fails them, pushes cancel and drain
// requests to the attempt streams that are open, and explains why a queued run waits. Every
// durable fact lives in store::RunStore; the scheduler keeps in memory only what a restart may
// lose: which streams are open, which workers were asked to drain, worker host names and versions.
//
// It orchestrates and locks; the rules it applies live beside it (docs/architecture.md "The
// scheduler orchestrates; its rules live beside it"): submission.h makes a sweep file into runs,
// placement.h and preemption.h decide who runs what, worker_registry.h keeps the workers, their
// speeds and when one counts as lost, config/run_changes.h says what a resume or an extension may
// change. Its queries are in scheduler_queries.cc.
//
// Time. Timestamps and lease deadlines come from the injected Clock (a FakeClock in tests). Long
// polls (Acquire) and the expiry thread's period are real time: they pace threads, not leases.
//
// Restart. A scheduler does not expire any lease during its first lease TTL (clock time), so the
// workers of a cartd that was restarted can heartbeat and keep their runs.
//
// Errors: the store's codes pass through unchanged (see store/run_store.h); in addition
// FailedPrecondition for an unregistered or draining worker, InvalidArgument for a malformed
// request (message names the field), ResourceExhausted for a sweep past the run limit (message has
// the count), Unavailable once Shutdown() was called.
//
// Thread-safety: every method is thread-safe.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/auth.h"
#include "server/budgets.h"
#include "server/counters.h"
#include "server/defaults.h"
#include "server/fleet.h"
#include "server/placement.h"
#include "server/store_room.h"
#include "server/submission.h"
#include "server/worker_registry.h"
#include "store/run_store.h"

namespace cart::server {

struct SchedulerOptions {
  // A lease lapses this long after the claim or the last heartbeat. Must equal the store's
  // StoreOptions::lease_ttl_us (RunServer sets both from cartd's config). > 0.
  absl::Duration lease_ttl = absl::Microseconds(store::kDefaultLeaseTtlUs);
  // How often workers should heartbeat; zero: lease_ttl / 4.
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // The longest an Acquire long poll waits; longer requests are capped. Default 30 s.
  absl::Duration max_acquire_wait = defaults::kMaxAcquireWait;
  // Period of the background thread that expires leases (real time). Zero: no thread; the owner
  // calls ExpireLeases() (tests). Default 1 s.
  absl::Duration expiry_interval = absl::Seconds(1);
  // No lease is expired until this long after construction (clock time); negative: lease_ttl.
  absl::Duration startup_grace = absl::Seconds(-1);
  // The most runs one sweep may expand to, whatever its own max_runs says. Default 100,000 (the
  // store's limit).
  int64_t max_runs_per_sweep = defaults::kMaxRunsPerSweep;
  // The most bytes one sweep's runs may hold in configs and keys (SubmitLimits). Default 256 MiB.
  int64_t max_sweep_bytes = defaults::kMaxSweepBytes;
  // Sweep submissions (and dry runs) expanded at once; more get RESOURCE_EXHAUSTED. Expanding a
  // big grid costs up to ~100 MB and a core for a second, so 32 careless parallel submits took
  // cartd to 3 GB; a few at a time keep it bounded and still serve a lab.
  int max_concurrent_submits = 4;
  // Checkpoint retention: each run keeps its newest `keep_checkpoints` checkpoints (and any a
  // derived run starts from); 0 keeps every one. After a checkpoint is recorded, the artifacts no
  // checkpoint names any more go to `release_artifact` (cartd deletes the blob).
  int64_t keep_checkpoints = 0;
  std::function<void(const std::string& sha256)> release_artifact;
  // How a free worker's run is chosen (docs/design.md "Placement"). kEarliestFinish: longest
  // first, each run where it would finish soonest given every worker's speed (server/placement.h);
  // a slow worker may wait rather than take a run a faster one would finish sooner. kFirstFit:
  // the oldest run that fits, whatever the speeds (the policy before; `bench-schedule` compares).
  enum class Placement { kEarliestFinish, kFirstFit };
  Placement placement = Placement::kEarliestFinish;
  // The highest `priority:` a user (not an admin) may give a sweep; more is refused naming this.
  // Admins may set any, and re-prioritise a sweep later (SetSweepPriority). Default 10.
  int64_t max_user_priority = defaults::kMaxUserPriority;
  // Fair share: within a priority level, placement serves first the owner whose GPU-hours, each
  // weighed down by half every `fair_share_half_life` since it was used, are fewest (plus what the
  // plan already gives them). Zero: off (one queue, longest first). Default 24 h.
  absl::Duration fair_share_half_life = defaults::kFairShareHalfLife;
  // cartd's own disk (server/store_room.h): a directory on the database's filesystem (empty:
  // only failed writes tell) and the free space below which cartd takes no new change.
  std::string store_dir;
  int64_t min_free_store_bytes = defaults::kMinFreeStoreBytes;
  // Preemption at a checkpoint (docs/design.md "Preemption"): when no worker is free and a queued
  // run would be served before a running one (a higher priority; or, with fair share on, the same
  // priority, an owner with less decayed usage, and the running run's owner holding at least two
  // more workers than the waiting one's), the running run is asked to stop at its next step with
  // a checkpoint written there; it is requeued DRAINED (no attempt counted) and resumes exactly.
  // Only training runs with a checkpoint are preempted, each at most once per `preempt_interval`.
  // Off by default (a single user's box); the lab config turns it on.
  bool preemption = defaults::kPreemption;
  absl::Duration preempt_interval = defaults::kPreemptInterval;
  // On a GPU worker with room, a run configured with accumulation gets a larger micro-batch and
  // less accumulation, the global batch kept (config::MicroBatchOnDevice): fewer, larger kernels.
  // On by default; the tests whose fake workers say "cuda" turn it off unless they test it.
  bool raise_micro_batch = defaults::kRaiseMicroBatch;
  // Device-hour budgets (server/budgets.h; docs/operations.md "Budgets"): each user's unless an
  // admin set theirs (SetBudget), from `user_budgets` by name, else `user_budget_device_hours`
  // (0: none). Sweeps carry their own.
  double user_budget_device_hours = 0;
  std::map<std::string, double> user_budgets;
};

// The typed mark on Acquire's FailedPrecondition for a draining worker (a status payload under
// this URL), so that the gRPC side answers `drain: true` without reading the message's words.
inline constexpr char kDrainingPayload[] = "type.cart-lab/worker-draining";
inline bool IsDraining(const absl::Status& status) {
  return status.GetPayload(kDrainingPayload).has_value();
}

// What a worker says of its device with each ReportDevice (as at registration).
struct DeviceIdentity {
  std::string kind;  // "cuda" or "cpu"
  std::string name;
  int index = 0;
  std::string uuid;
};

// What a worker is told at registration.
struct WorkerTiming {
  absl::Duration lease_ttl;
  absl::Duration heartbeat_interval;
};

// A registered worker as ListWorkers shows it.
struct WorkerStatus {
  WorkerInfo info;
  // "idle", "busy", "draining", "disk_full" (idle, its free disk below its own floor: handed
  // no job), "lost" (not seen for a lease TTL + long poll; a drained worker that exited is lost
  // too)
  std::string state;
  int64_t run_id = 0;    // the run it holds a lease on; 0 when none
  std::string run_name;  // "<sweep>/<index>" of that run
  int64_t last_seen_us = 0;
  double speed = 0;          // × an RTX 3090, what placement uses
  std::string speed_source;  // "reported", "measured", "measured on <device>", "card peak", "guess"
  // Its device's readings (FleetWatch): the latest, or the recent history when asked for; empty
  // before the first.
  std::vector<DeviceSample> device;
  double idle_while_queued_s = 0;  // device-seconds it held no run while runs were queued
  bool idle_while_queued = false;  // right now (the last accounting tick)
  // The latest MFU of the run it holds, by each convention (docs/gpu.md "Two MFUs"): model
  // FLOPs with attention in full, and the paper's 6 x effective parameters.
  std::optional<double> run_mfu;
  std::optional<double> run_mfu_6n;
};

// One leased attempt of one run, as AcquireJob hands it out.
struct Job {
  store::RunRecord run;  // state LEASED
  int64_t attempt = 0;   // the fencing token every report must carry
  int64_t lease_expires_us = 0;
  JobKind kind = JobKind::kTrain;
  std::vector<int> eval_loops;  // eval jobs: R_infer values
  // The run's own latest checkpoint (after a lost lease, a retry, a resume or an extend).
  std::optional<store::CheckpointRecord> resume_from;
  // Derived runs: the parent's checkpoint they start from.
  std::optional<store::CheckpointRecord> init_from;
  // The data files the run reads, with the identities recorded so far.
  std::vector<store::RunDataRecord> data;
};

// A control pushed down an attempt's stream.
struct Control {
  enum class Kind { kCancel, kDrain, kPreempt };
  Kind kind = Kind::kCancel;
  std::string reason;
};

// The open stream of one attempt (RunJob), as the scheduler sees it. Implementations are
// thread-safe, never block for long, and ignore calls after the stream has ended.
class AttemptStream {
 public:
  virtual ~AttemptStream() = default;
  virtual void Send(const Control& control) = 0;
  // Ends the stream (cartd is shutting down); the worker reconnects later under the same lease.
  virtual void Close() = 0;
};

// What an extension does to the learning-rate schedule (docs/design.md "Extending a run").
enum class ExtendSchedule {
  kAsk,      // stretch when the rate at the extension point changes at most 2x; else refuse
  kStretch,  // the cosine recomputed over the new total: a warm restart
  kHold,     // go on at the rate the run ended with
};
std::string_view ExtendScheduleName(ExtendSchedule schedule);  // "stretch", "hold", "ask"

struct ExtendOutcome {
  store::RunRecord run;
  ExtendSchedule schedule = ExtendSchedule::kStretch;  // the one applied
  int64_t from_step = 0;  // steps trained before: the last step trained is this one (1-based)
  double lr_before = 0;   // the learning rate of that step
  double lr_after = 0;    // and of the next, the first of the extension
};

// Expected finish times (docs/design.md "Placement"): a running run's from its pace (or its work
// at its worker's speed until it has reported steps), a queued run's from the placement plan of
// the whole queue over the live fleet (server/placement.h PlanQueue), a sweep's the latest of its
// runs'. Unix microseconds. Runs that are blocked, of unknown work, or fit no live worker have
// none; a sweep says how many of its unfinished runs have one.
struct Forecast {
  int64_t at_us = 0;
  std::map<int64_t, int64_t> run_finish_us;         // by run id
  std::map<int64_t, int64_t> sweep_finish_us;       // by sweep id
  std::map<int64_t, int64_t> sweep_estimated_runs;  // by sweep id
};

// A run with what the scheduler knows beyond its record.
// A seed plan to queue (Scheduler::ApplyPlan; docs/study.md "Planning seeds").
struct PlanSide {
  std::string sweep;
  std::map<std::string, std::string> config;  // the config's keys, seed left out
  int64_t runs = 0;                           // new seeds, >= 1
  // A run of the side (0: none): the new seeds copy the training run it is or was derived from,
  // in that run's sweep, instead of the sweep's first run of `config`.
  int64_t template_run_id = 0;
};
struct PlanRequest {
  std::vector<PlanSide> sides;
  store::NewPlan plan;  // its claims, levels, budget and text; runs filled in by ApplyPlan
  std::string who;
};
struct PlanApplied {
  int64_t plan_id = 0;
  std::vector<store::RunRecord> runs;  // the runs it queued, in order
};

// A leased run's progress as cartd has seen it (the notifier's "stuck", server/notify/).
struct RunPace {
  int64_t run_id = 0;
  int64_t attempt = 0;
  int64_t step = 0;      // the latest step its worker reported this attempt; 0: none yet
  int64_t since_us = 0;  // when that step was first reported (or the attempt claimed)
  double expected_step_us =
      0;  // one step's time: this attempt's pace, else its estimate; 0: unknown
};

struct RunInfo {
  store::RunRecord run;
  std::string worker_id;                 // current or last worker; empty when never leased
  std::string waiting_reason;            // QUEUED / BLOCKED runs: why it is not running
  int64_t step = 0;                      // latest step reported (heartbeats, metrics)
  std::map<std::string, double> latest;  // ListRuns: latest loss, rho_max, tokens_per_s, mfu(_6n)
  int64_t expected_finish_us = 0;        // Forecast; 0: none
};

struct RunDetails {
  RunInfo info;
  std::vector<store::EventRecord> events;
  std::vector<store::CheckpointRecord> checkpoints;
  std::vector<store::MetricSummary> summaries;
  std::vector<store::RunDataRecord> data;                  // data lineage
  std::vector<store::AnnotationEvent> annotation_history;  // who changed its tags and note
  std::vector<store::AttemptRecord> attempts;              // oldest first, with what each ran on
};

// One budget as `cart budget ls` and the sweep views show it.
struct BudgetLine {
  std::string scope;  // "user" or "sweep"
  std::string name;   // the user (store::OwnerName) or the sweep
  int64_t sweep_id = 0;
  BudgetAccount account;
};

class Scheduler {
 public:
  // `store` and `clock` must outlive the scheduler. Loads the registered workers from the store
  // and starts the expiry thread (unless options.expiry_interval is zero).
  Scheduler(store::RunStore* store, Clock* clock, SchedulerOptions options);
  // Shutdown(), then joins the expiry thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Wakes every long poll (they return no job), closes every attempt stream and makes later
  // Acquire calls return Unavailable. Leases stay as they are in the store. Idempotent.
  void Shutdown();

  // ---- Sweeps
  //
  // `who` is "admin:<name>" or "user:<name>". Cancel, resume and extend of a sweep or run need
  // the user who submitted the sweep or an admin; draining a worker needs an admin
  // (PermissionDenied otherwise, naming who may).

  // Parses and expands the sweep file (config/sweep.h) and stores the sweep with all its runs in
  // one transaction; derived runs start BLOCKED until their parent's checkpoint exists.
  // Idempotent on request_id (existing = true, nothing written). InvalidArgument with file, line
  // and reason; ResourceExhausted for a grid past the limit (with the count); AlreadyExists for a
  // sweep name in use or a request_id reused with another spec.
  absl::StatusOr<SubmitResult> SubmitSweep(const SubmitRequest& request);
  // Cancels every unfinished run of the sweep (running ones after a final checkpoint) and pushes
  // a cancel to their streams. Returns how many runs changed. NotFound for an unknown sweep.
  absl::StatusOr<int64_t> CancelSweep(const std::string& name, const std::string& who,
                                      const std::string& reason);
  // Requeues every CANCELLED or FAILED run of the sweep; returns how many.
  absl::StatusOr<int64_t> ResumeSweep(const std::string& name, const std::string& who);
  // Sets the priority of the sweep and of its unfinished runs; admins only (PermissionDenied
  // naming who may). Returns how many runs changed.
  absl::StatusOr<int64_t> SetSweepPriority(const std::string& name, int64_t priority,
                                           const std::string& who);
  // Deletes the sweep, its runs, metrics and checkpoints (store::RunStore::DeleteSweep: refused
  // while a run is leased or running, or while another sweep's runs derive from it) and hands
  // the artifacts left unnamed to release_artifact. Its owner or an admin only.
  absl::StatusOr<store::DeletedSweep> DeleteSweep(const std::string& name, const std::string& who);

  // ---- Runs

  // QUEUED | BLOCKED | LEASED -> CANCELLED at once; RUNNING gets a cancel pushed to its stream.
  // A run already CANCELLED is returned unchanged; FailedPrecondition for SUCCEEDED or FAILED.
  absl::StatusOr<store::RunRecord> CancelRun(int64_t run_id, const std::string& who,
                                             const std::string& reason);
  // CANCELLED | FAILED -> QUEUED (or BLOCKED) with a fresh attempt budget. FailedPrecondition for
  // other states.
  // `set`: "key=value" changes to its config first, only of keys that change the trajectory
  // from its checkpoint on (kResumeKeys: lr, lr_min, warmup, clip, dtype), at least one value
  // new; InvalidArgument naming a key outside them or a bad value. A run that diverged resumes
  // only with such a change (FailedPrecondition otherwise, naming the flag). The event records
  // each key's old and new value.
  absl::StatusOr<store::RunRecord> ResumeRun(int64_t run_id, const std::string& who,
                                             const std::vector<std::string>& set = {});
  // SUCCEEDED -> QUEUED to train on to total_steps, resuming from its final checkpoint; the stored
  // config gets the new steps and, with kHold, lr_decay_steps = the steps trained so far (the
  // run goes on at its final rate); kStretch recomputes the cosine over the new total. kAsk
  // stretches when that changes the rate at the extension point by at most 2x, and is refused
  // (FailedPrecondition naming both rates and the flag to give) when it would change it more.
  // The run's event records the schedule and both rates. FailedPrecondition when total_steps is
  // not larger than the run's steps or the run has not SUCCEEDED.
  absl::StatusOr<ExtendOutcome> ExtendRun(int64_t run_id, int64_t total_steps,
                                          ExtendSchedule schedule, const std::string& who);
  // Lets a run's later attempts go to any device class (`any`), or only to the class of its
  // latest checkpoint again (docs/architecture.md "Device classes"); its owner or an admin, any
  // state. Wakes the workers waiting: an unpinned run may be theirs now.
  absl::StatusOr<store::RunRecord> SetRunDeviceClass(int64_t run_id, bool any,
                                                     const std::string& who,
                                                     const std::string& reason);

  // ---- Tags and notes (store::AnnotationChange)
  //
  // Any user or admin may tag and annotate any run or sweep (a lab shares its findings); each tag
  // and note keeps who set it and when. Errors as store::RunStore::AnnotateRun.
  absl::StatusOr<store::RunRecord> AnnotateRun(int64_t run_id,
                                               const store::AnnotationChange& change,
                                               const std::string& who);
  absl::StatusOr<store::SweepRecord> AnnotateSweep(const std::string& name,
                                                   const store::AnnotationChange& change,
                                                   const std::string& who);

  // ---- Workers

  // Registers a worker or refreshes its registration (idempotent on id); a worker that registers
  // again is no longer draining. InvalidArgument for an empty id, a bad id or negative memory.
  absl::StatusOr<WorkerTiming> RegisterWorker(const WorkerInfo& worker);
  // Long poll: leases the run placement gives the worker (SchedulerOptions::placement; it fits
  // the memory and is above its OOM floor), waiting up to `wait` (capped) for one.
  // nullopt when none came, or on shutdown. FailedPrecondition for an unregistered or draining
  // worker.
  absl::StatusOr<std::optional<Job>> Acquire(const std::string& worker_id, absl::Duration wait);
  // What a worker says of its disk as it asks (AcquireJob): free bytes in its cache directory
  // and its own floor (0: none). Below the floor its Acquire hands nothing: it waits out the
  // poll and returns empty, the worker staying alive and shown as disk_full. An unregistered
  // worker is ignored (Acquire answers it).
  void NoteWorkerDisk(const std::string& worker_id, int64_t free_bytes, int64_t floor_bytes);
  // Asks a worker to finish and exit: its open streams get a drain control, its next Acquire
  // fails. Idempotent. NotFound for an unknown worker.
  absl::Status DrainWorker(const std::string& worker_id, const std::string& who);
  // Every registered worker; `device_history`: with its device's recent readings, not only the
  // latest.
  std::vector<WorkerStatus> ListWorkers(bool device_history = false);
  WorkerTiming timing() const;
  // Readings of a worker's device (its ReportDevice heartbeat), oldest first; `device` fills in
  // what a cartd restarted since the worker registered does not know (its store keeps the id,
  // the device's name and memory: not its kind, index or UUID). Counts the worker as seen.
  // Readings stamped more than a minute ahead of the scheduler's clock are dropped (they would
  // hide the real ones until then). FailedPrecondition for an unregistered worker. Returns how
  // many readings were new.
  absl::StatusOr<int> RecordDeviceSamples(const std::string& worker_id,
                                          const DeviceIdentity& device,
                                          const std::vector<DeviceSample>& samples);
  // One tick of idle accounting (the expiry thread calls it each period): every live worker
  // holding no run (by the store's LEASED and RUNNING attempts, so a restarted cartd knows who
  // holds what) while runs are QUEUED accrues the time since the previous tick (at most 5 s, so
  // a stalled cartd does not invent idle time). A draining worker counts once its run is done,
  // until it exits and is lost: its device sits idle all the same.
  absl::Status AccountIdle();

  // ---- Reports of one attempt (fenced: FailedPrecondition for a stale attempt)

  // The attempt's stream opened: LEASED -> RUNNING (no-op when RUNNING: a reconnect). `stream`
  // then receives controls; a pending cancel or drain is sent at once. Detach it before it dies.
  absl::Status AttachStream(int64_t run_id, int64_t attempt, std::shared_ptr<AttemptStream> stream);
  void DetachStream(int64_t run_id, const AttemptStream* stream);
  // Extends the lease. Returns whether a cancel is pending for the run.
  absl::StatusOr<bool> Heartbeat(int64_t run_id, int64_t attempt, int64_t step);
  // Appends a metric batch idempotently on (run, step, name); returns the acknowledged step.
  absl::StatusOr<int64_t> AppendMetrics(int64_t run_id, int64_t attempt,
                                        std::vector<store::MetricPoint> points);
  // Stores log lines of the attempt (fenced; idempotent on seq) and wakes log followers.
  absl::Status AppendLog(int64_t run_id, int64_t attempt, const std::vector<store::LogLine>& lines);
  // Records a checkpoint whose artifact is already stored; derived runs waiting for it go QUEUED.
  // `blob_present` (store::RunStore::RecordCheckpoint) asks, inside the write, whether the blob
  // is still on disk.
  absl::StatusOr<store::CheckpointRecord> RecordCheckpoint(
      int64_t run_id, int64_t attempt, const store::NewCheckpoint& checkpoint,
      const std::function<absl::Status()>& blob_present = nullptr);
  // Ends the attempt as the worker reports it (store::AttemptOutcome): SUCCEEDED; CANCELLED;
  // DRAINED (requeued, not counted); FAILED (requeued, counted, until max_attempts); OUT_OF_MEMORY
  // (requeued, not counted, placed only on devices with more memory than this worker's).
  // InvalidArgument for LOST, which only lease expiry sets. `error` is the worker's failure text
  // (may be empty).
  // `diverged` (with FAILED): the loss became non-finite; the run fails at once, without the
  // retries that would replay the same steps, and resumes only with a change (ResumeRun's set).
  absl::StatusOr<store::RunRecord> ReportOutcome(int64_t run_id, int64_t attempt,
                                                 store::AttemptOutcome outcome,
                                                 const std::string& error,
                                                 std::optional<store::Divergence> diverged = {});

  // With SchedulerOptions::preemption: asks the running runs that waiting work should displace to
  // stop at a checkpoint (a preempt control on their streams, and a line in their logs), and
  // returns their ids; empty when preemption is off, a worker is free, or nothing waits that
  // outranks a running run. A run asked before and not yet handed back counts as a worker about
  // to be free. The expiry thread calls this each period; tests and the replay call it directly.
  absl::StatusOr<std::vector<int64_t>> Preempt();

  // Takes back every lease that lapsed (after the start-up grace): the runs go QUEUED with
  // attempt + 1, or FAILED past max_attempts. Returns what was taken back. The expiry thread calls
  // this; tests call it after advancing a FakeClock.
  absl::StatusOr<std::vector<store::ExpiredLease>> ExpireLeases();

  // ---- Queries (scheduler_queries.cc): what the services and the dashboard read

  absl::StatusOr<std::vector<store::SweepRecord>> ListSweeps();  // by id
  absl::StatusOr<store::SweepRecord> GetSweep(const std::string& name);
  // The ids of every registered worker, lost ones included.
  std::vector<std::string> WorkerIds();
  // Who changed the run's tags and note, oldest first.
  absl::StatusOr<std::vector<store::AnnotationEvent>> RunAnnotationHistory(int64_t run_id);
  // Who changed the sweep's own tags and note, oldest first.
  // Where the sweep's file came from, as its client sent it (nullopt: it sent none).
  absl::StatusOr<std::optional<store::SweepProvenance>> GetSweepProvenance(const std::string& name);
  absl::StatusOr<std::vector<store::AnnotationEvent>> SweepAnnotationHistory(
      const std::string& name);
  // The id of the run called "<sweep>/<index>" (one indexed lookup). InvalidArgument for a name
  // without '/', NotFound naming the run.
  absl::StatusOr<int64_t> FindRun(const std::string& name);
  absl::StatusOr<RunDetails> GetRun(int64_t run_id);
  // The run's record alone (one read): for followers that poll it.
  absl::StatusOr<store::RunRecord> GetRunRecord(int64_t run_id);
  // The records of the runs matching `filter`, by id, without what Describe adds.
  absl::StatusOr<std::vector<store::RunRecord>> ListRunRecords(const store::RunFilter& filter);
  // Paged reads for the dashboard and the list commands (store/pages.h): a fixed number of
  // queries per page, whatever the number of runs.
  absl::StatusOr<store::RunPage> ListRunPage(const store::RunPageRequest& request);
  absl::StatusOr<std::vector<store::SweepProgress>> ListSweepProgress();
  absl::StatusOr<store::SweepKeys> GetSweepKeys(const std::string& sweep);
  absl::StatusOr<store::StoreTotals> Totals();
  absl::StatusOr<std::vector<store::AttemptRecord>> ListAttempts(int64_t run_id);
  // Counters for /metrics.
  const SchedulerCounters& counters() const { return counters_; }
  // What each sweep's attempts used (store::RunStore::SweepSpending), by sweep id.
  absl::StatusOr<std::map<int64_t, store::Spending>> SweepSpending() {
    return store_->SweepSpending(NowMicros());
  }
  // Device-hour budgets (server/budgets.h): those `who` may see (an admin: all; a user: their own
  // and their sweeps'), users first, then sweeps by id.
  absl::StatusOr<std::vector<BudgetLine>> Budgets(const std::string& who);
  // Sets the budget of a sweep or a user (`scope` "sweep" or "user"); admins only
  // (PermissionDenied). FailedPrecondition for one below what is already spent (the store says
  // how much). Returns the budget as it now stands.
  absl::StatusOr<BudgetLine> SetBudget(const std::string& scope, const std::string& name,
                                       double hours, const std::string& who);
  // Every budget with what is spent and held now (placement's view).
  absl::StatusOr<BudgetLedger> BudgetsNow() { return Ledger(NowMicros()); }
  // Every leased run's progress (RunPace), by run id.
  std::vector<RunPace> RunPaces();
  // Room on cartd's own disk (server/store_room.h): /metrics and the dashboard show it.
  StoreRoom::State store_room() const { return room_.state(); }
  // The expected finish of every unfinished run and sweep that has one (Forecast). Planned again
  // after a claim, submit, outcome or registration, and at least every 10 s of clock time;
  // between those the last one is returned (it plans the whole queue).
  absl::StatusOr<std::shared_ptr<const Forecast>> ExpectedFinish();
  // When runs not yet submitted (each its RTX 3090 hours, least memory and priority in a
  // PlaceableRun; ids ignored) would finish if queued now behind the current queue: the same plan
  // as ExpectedFinish over the live fleet, these added. Unix µs per run, 0 where the plan gives
  // none (it fits no live worker, or no worker is live). `cart plan` prices its seeds with it.
  absl::StatusOr<std::vector<int64_t>> ForecastRuns(std::vector<store::PlaceableRun> extra);
  // Queues a seed plan: for each side, `runs` new seeds of the sweep's training runs of that
  // config (the seeds after the largest it has), each with a copy of every job derived from the
  // side's first run, at any depth and in any sweep, starting from the new seed instead; all in
  // one store transaction with the plan's record. Needs the owner of each sweep it adds to (or an
  // admin). NotFound for a sweep deleted since the plan was made; FailedPrecondition for a config
  // the sweep has no training run of; InvalidArgument for a side without runs.
  absl::StatusOr<PlanApplied> ApplyPlan(PlanRequest request);
  // The energy `attempt` has used so far (store::RunStore::RecordEnergy, fenced).
  absl::Status RecordEnergy(int64_t run_id, int64_t attempt, double joules,
                            const std::string& source) {
    return Noted(store_->RecordEnergy(run_id, attempt, joules, source));
  }
  // Per-item outcomes of an evaluation job's tasks (store::RunStore::RecordEvalItems, fenced).
  absl::Status RecordEvalItems(int64_t run_id, int64_t attempt,
                               const std::vector<store::EvalItems>& items) {
    return store_->RecordEvalItems(run_id, attempt, items, NowMicros());
  }
  absl::StatusOr<std::vector<store::EvalItems>> ListEvalItems(int64_t run_id) {
    return store_->ListEvalItems(run_id);
  }
  // The store, for reads that build on it whole (the dashboard's study view: report/ reads it
  // through a StudySource). Writes go through the Scheduler's own methods.
  store::RunStore& store() const { return *store_; }
  // Every seed plan queued, oldest first (store::RunStore::ListPlans).
  absl::StatusOr<std::vector<store::PlanRecord>> ListPlans() { return store_->ListPlans(); }
  // Runs matching `filter`, by id: at most `limit` (0: all) after skipping `offset`. `total`
  // (when given) receives how many match. InvalidArgument for a negative limit or offset.
  absl::StatusOr<std::vector<RunInfo>> ListRuns(const store::RunFilter& filter, int64_t limit,
                                                int64_t offset = 0, int64_t* total = nullptr);
  // Why a QUEUED or BLOCKED run is not running; empty for other states.
  absl::StatusOr<std::string> WaitingReason(const store::RunRecord& run);

  absl::StatusOr<std::vector<store::MetricSummary>> RunSummaries(int64_t run_id);  // by name
  absl::StatusOr<store::Series> MetricSeries(const store::SeriesRequest& request);
  // Log lines with id > after_id, oldest first, at most `limit` (0: all).
  absl::StatusOr<std::vector<store::LogLine>> RunLog(int64_t run_id, int64_t after_id,
                                                     int64_t limit);
  // The checkpoint at `step` (0: the newest). NotFound says which steps the run has.
  absl::StatusOr<store::CheckpointRecord> Checkpoint(int64_t run_id, int64_t step);
  // The results layer (store/results.h), for `cart results` and the report.
  absl::StatusOr<store::PivotTable> Pivot(const store::PivotRequest& request);
  absl::StatusOr<std::vector<store::AblationRow>> Ablation(const store::AblationRequest& request);
  absl::StatusOr<store::StageComparison> CompareStages(
      const store::StageComparisonRequest& request);

  // Follows a run for a stream (StreamMetrics, StreamRunLog, the dashboard's live views): calls
  // `read(run, last)` with the run's record read after the change counter, so that no change is
  // missed between a read and the wait. `last` is true when this is the final call: not
  // following, or the run has finished (a follower then tells the final state). Between calls it
  // waits for the run to change, at most `poll` at a time. Returns OK when `read` returns false
  // (the client went away), when `cancelled()` turns true, or after the last call; Unavailable on
  // Shutdown(); NotFound for an unknown run; read's errors.
  absl::Status FollowRun(
      int64_t run_id, bool follow, absl::Duration poll, const std::function<bool()>& cancelled,
      const std::function<absl::StatusOr<bool>(const store::RunRecord& run, bool last)>& read);

  // A counter that changes whenever the run gets metrics or changes state; WaitForRunChange
  // blocks (real time) until it differs from `seen`, the deadline passes or Shutdown().
  int64_t RunVersion(int64_t run_id);
  int64_t WaitForRunChange(int64_t run_id, int64_t seen, absl::Time deadline);

  // Whether Shutdown() was called: long-running calls (metric followers) end.
  bool shutting_down();

  // The scheduler's clock (SchedulerOptions' Clock), Unix microseconds.
  int64_t NowMicros() const;

  // Acquire long polls waiting for a run right now (tests wait on it instead of sleeping).
  int waiting_acquires();
  // Sweep submissions being expanded right now (likewise).
  int submits_in_flight();

  // Records what `attempt` runs on, as its worker took it at the start (store::RunStore::
  // RecordEnvironment).
  absl::Status RecordEnvironment(int64_t run_id, int64_t attempt,
                                 const std::vector<std::pair<std::string, std::string>>& items);
  // Records the identities of data files that `attempt` opened and its run had none for
  // (store::RunStore::RecordRunData), as "worker W (attempt N)"; returns the run's rows.
  absl::StatusOr<std::vector<store::RunDataRecord>> RecordRunData(
      int64_t run_id, int64_t attempt, const std::string& worker_id,
      std::vector<store::RunDataRecord> files);

  // The worker an attempt was leased to. NotFound for an unknown run; FailedPrecondition for an
  // attempt the run never had.
  absl::StatusOr<std::string> WorkerOfAttempt(int64_t run_id, int64_t attempt);

 private:
  // Placement, preemption and the expected finish weigh the first queued runs by priority and
  // work; a bigger queue is placed as it shrinks.
  static constexpr int64_t kMostWeighed = 4000;

  // A leased run as placement sees it: whose, how much work, how far.
  struct Running {
    std::string worker_id;
    int64_t attempt = 0;
    double work_hours = 0;  // the whole run's, RTX 3090 hours; 0: unknown
    int64_t steps = 0;
    int64_t tokens = 0;  // the whole run's training tokens (speed measurement)
    int64_t claimed_us = 0;
    int64_t done_steps_at_claim = 0;  // its checkpoint's step when this attempt began
    double remaining_hours_at_claim = 0;
    // What preemption weighs: whose it is, its priority, whether it trains (evaluations are
    // short and start over when stopped) and whether it has a checkpoint to resume from.
    std::string owner;
    int64_t priority = 0;
    bool trains = true;
    bool has_checkpoint = false;
    int64_t sweep_id = 0;
  };
  // A run asked to stop for other work, until it hands its worker back.
  struct PreemptAsk {
    int64_t attempt = 0;
    int64_t asked_us = 0;
    std::string reason;
  };
  struct OpenStream {
    int64_t run_id;
    int64_t attempt;
    std::string worker_id;
    std::shared_ptr<AttemptStream> stream;
  };

  // Wakes long polls: something may have become claimable.
  void WakePollers();
  // Notes a store write's result in room_ (a failure for want of room makes cartd full, said
  // once in its log) and returns it unchanged.
  absl::Status Noted(absl::Status status);
  template <class T>
  absl::StatusOr<T> Noted(absl::StatusOr<T> result) {
    if (!result.ok()) Noted(result.status()).IgnoreError();
    return result;
  }
  void BumpRun(int64_t run_id);
  // A step reported for the run (heartbeat, metric batch): its progress and when it rose.
  void NoteProgressLocked(int64_t run_id, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BumpRunLocked(int64_t run_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Chooses and claims a run for the worker (SchedulerOptions::placement); nullopt when it should
  // wait.
  absl::StatusOr<std::optional<store::Claim>> Place(const std::string& worker_id, int64_t memory);
  // Each balanced seed group's runs per device class, when `queued` holds a run of one; else
  // none (no read).
  absl::StatusOr<store::SeedGroupClasses> SeedGroups(
      const std::vector<store::PlaceableRun>& queued);
  // Hours each busy worker's current run has left, by worker id: at the pace its steps have gone
  // once it has reported progress, else its work at the worker's speed less the time it has run.
  std::map<std::string, double> BusyHoursLocked(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same by run id (the hours each running run is still expected to hold its device).
  std::map<int64_t, double> HoursLeftLocked(int64_t now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The budgets in force at `now_us`: limits (a user's from an admin's setting, else cartd's
  // config), spent from the store, held by the runs running now. `read`: the store's figures.
  absl::StatusOr<BudgetLedger> Ledger(int64_t now_us, store::BudgetUse* read = nullptr);
  double UserBudgetLimit(const std::string& user, const store::BudgetUse& use,
                         std::string* source) const;
  // Keeps why each refused run waits (Explain).
  void NoteOverBudget(const std::map<int64_t, std::string>& refused);
  // Fair share's usage per owner (store::RunStore::DecayedUsage), cached for a minute.
  absl::StatusOr<std::map<std::string, double>> Usage(int64_t now_us);
  // Records a claimed run for placement's plan and speed measurement; `done_steps`, when given,
  // is how far the attempt had come (a run recovered at startup), else its resume checkpoint's.
  void NoteClaim(const Job& job, const std::string& worker_id,
                 std::optional<int64_t> done_steps = std::nullopt);
  // At startup: the runs leased or running when cartd stopped, noted as claims of their workers,
  // so that placement, preemption and the expected finish see those workers busy at once; and
  // each run's last preemption within the interval, so that none is preempted twice within it.
  void RecoverRunning();
  // The runs a worker holds now (LEASED or RUNNING, at most one per worker), with the latest
  // value of `metrics`: one paged read of the store, whatever each caller does with an error.
  absl::StatusOr<store::RunPage> LiveRuns(std::vector<std::string> metrics = {});
  // Folds a reported tokens/s into the run's worker's measured speed (WorkerRegistry).
  void MeasureSpeed(int64_t run_id, double tokens_per_s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lowers the job's micro-batch and raises its gradient accumulation (same global batch) so that
  // its estimate fits a worker with `memory_bytes`, and notes it in the run's log.
  // `raise`: the worker is a GPU, whose spare memory takes a larger micro-batch
  // (config::MicroBatchOnDevice).
  void FitToDevice(Job& job, const std::string& worker_id, int64_t memory_bytes,
                   const config::MemoryKernels& kernels, bool raise);
  // Sends `control` to the open streams of the runs `select` accepts (outside mu_).
  template <typename Select>
  void PushControl(Select select, const Control& control);
  // Hands the blobs no checkpoint names any more to release_artifact, each only while that is
  // still so (store::RunStore::RemoveUnnamedArtifacts).
  void ReleaseArtifacts(const std::vector<std::string>& shas);
  // Cancels pushed to streams of runs that now have a cancel request or were cancelled.
  void PushCancels(const std::vector<int64_t>& run_ids, const std::string& reason);
  absl::StatusOr<RunInfo> Describe(store::RunRecord run, std::optional<int64_t> max_memory);
  // Changes to a sweep or its runs need its owner (the `who` that submitted it) or an admin
  // ("admin:<name>"); PermissionDenied naming both otherwise.
  absl::Status CheckSweepOwner(const std::string& sweep, const std::string& who,
                               std::string_view action);
  absl::Status CheckRunOwner(int64_t run_id, const std::string& who, std::string_view action);
  // The latest step the run's worker reported since this scheduler started; 0 when none.
  int64_t ReportedStep(int64_t run_id);
  // Why a QUEUED or BLOCKED run is not running (`max_memory`: the largest registered device);
  // empty for other states.
  std::string Explain(const store::RunRecord& run, std::optional<int64_t> max_memory);
  std::optional<int64_t> MaxWorkerMemory();
  void ExpiryLoop();

  // Constant after construction.
  store::RunStore* const store_;
  Clock* const clock_;
  const SchedulerOptions options_;
  // No lease expires before this (Unix µs): the startup grace, pushed on by a lease TTL when
  // cartd's disk has room again (workers' heartbeats failed while it was full).
  std::atomic<int64_t> grace_end_us_;

  absl::Mutex mu_;
  absl::CondVar pollers_cv_;  // generation_ changed or shutting down
  SchedulerCounters counters_;
  StoreRoom room_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_acquires_ ABSL_GUARDED_BY(mu_) = 0;
  int submits_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  std::vector<OpenStream> streams_ ABSL_GUARDED_BY(mu_);
  // Per run: a counter bumped on every change, and the followers waiting for it. A change wakes
  // only its own run's followers, not every follower of every run.
  struct RunWatch {
    int64_t version = 0;
    int waiters = 0;
    absl::CondVar changed;  // version changed, or shutting down
  };
  std::map<int64_t, RunWatch> run_watches_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int64_t> progress_ ABSL_GUARDED_BY(mu_);        // run -> latest reported step
  std::map<int64_t, int64_t> progress_at_us_ ABSL_GUARDED_BY(mu_);  // run -> when it rose last
  std::map<int64_t, Running> running_ ABSL_GUARDED_BY(mu_);         // leased runs, by id
  std::map<std::string, double> usage_ ABSL_GUARDED_BY(mu_);        // Usage()'s cache
  int64_t usage_at_us_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, PreemptAsk> preempt_asked_ ABSL_GUARDED_BY(mu_);   // by run id
  std::map<int64_t, int64_t> last_preempted_us_ ABSL_GUARDED_BY(mu_);  // within preempt_interval
  // Runs placement did not give to a worker that asked, and why (Explain shows it).
  std::map<int64_t, std::string> not_placed_ ABSL_GUARDED_BY(mu_);
  int64_t request_counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<const Forecast> forecast_ ABSL_GUARDED_BY(mu_);  // ExpectedFinish's cache
  int64_t forecast_generation_ ABSL_GUARDED_BY(mu_) = 0;           // generation_ it was made at
  int64_t last_idle_tick_us_ ABSL_GUARDED_BY(mu_) = 0;             // AccountIdle's previous tick
  FleetWatch fleet_;                                               // its own lock

  std::thread expiry_thread_;
};

// "9.1 GiB" (one decimal).
std::string FormatGiB(int64_t bytes);

}  // namespace cart::server
