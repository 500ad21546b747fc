#pragma once

// Plain records that go in and out of the store. Timestamps are Unix time in microseconds
// (int64), memory in bytes, steps are optimizer steps counted from 0.

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/job_kind.h"
#include "data/file_identity.h"

namespace cart::store {

// A run's lifecycle (docs/design.md "Run states"):
//   QUEUED -> LEASED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
//   BLOCKED -> QUEUED          when the parent's checkpoint exists
//   LEASED | RUNNING -> QUEUED on a lost or released lease (FAILED once max_attempts are spent)
//   CANCELLED | FAILED -> QUEUED (or BLOCKED while the parent checkpoint is missing) on resume
//   SUCCEEDED -> QUEUED        on extend
// plus QUEUED | BLOCKED | LEASED -> CANCELLED on cancel.
enum class RunState { kQueued, kBlocked, kLeased, kRunning, kSucceeded, kFailed, kCancelled };

// "QUEUED", "BLOCKED", ... (the spelling stored in the database and shown to users).
std::string_view RunStateName(RunState state);
// Inverse of RunStateName; nullopt for anything else (case-sensitive).
std::optional<RunState> ParseRunState(std::string_view name);
// Whether the lifecycle above allows from -> to.
bool IsLegalTransition(RunState from, RunState to);
// SUCCEEDED, FAILED, CANCELLED.
bool IsTerminal(RunState state);

// How an attempt ended: the one vocabulary of the store, the scheduler and (as
// JobResult.Outcome) the worker protocol. kLost is set by ExpireLeases; the others are reported
// by the worker.
enum class AttemptOutcome {
  kSucceeded,    // reached the last step: run -> SUCCEEDED; final metric values are fixed
  kFailed,       // an error: retried (counted) up to max_attempts, then FAILED
  kCancelled,    // the worker obeyed a cancel request: run -> CANCELLED
  kDrained,      // the worker handed the run back (drain, shutdown): run -> QUEUED, not counted
  kOutOfMemory,  // the device ran out of memory: run -> QUEUED, not counted, only placed on
                 // devices with more memory from then on
  kLost,         // lease expired: run -> QUEUED, or FAILED after max_attempts
};
// "SUCCEEDED", "FAILED", "CANCELLED", "DRAINED", "OUT_OF_MEMORY", "LOST"
std::string_view AttemptOutcomeName(AttemptOutcome outcome);
std::optional<AttemptOutcome> ParseAttemptOutcome(std::string_view name);

// Who made a change, when and why: every state change writes these into an event row.
// Why a run changed state, where notifications need to tell it apart from the free text of
// `why` (server/notify/events.h): stored with the event row.
enum class EventCause {
  kNone,
  kLeaseExpired,  // the lease lapsed: the worker was lost
  kPreempted,     // the run handed its worker back for other work (Scheduler::Preempt)
  kDiverged,      // the attempt failed on a non-finite loss
};
std::string_view EventCauseName(EventCause cause);  // "", "lease_expired", "preempted", "diverged"
std::optional<EventCause> ParseEventCause(std::string_view name);

struct Audit {
  int64_t at_us = 0;  // Unix time, microseconds
  std::string who;    // "user:alice", "worker:box3-gpu0", "scheduler"; must not be empty
  std::string why;    // free text for the run's history; may be empty
  EventCause cause = EventCause::kNone;
};

// How long a lease lasts after its claim or last heartbeat unless cartd's config says otherwise
// (lease_ttl): the one default the store, the scheduler and cartd's config start from.
inline constexpr int64_t kDefaultLeaseTtlUs = 60'000'000;

// Tags and notes: what researchers write on runs and sweeps ("leak", "rerun-of-12", "why this
// run diverged") to find and explain them later (RunStore::AnnotateRun, AnnotateSweep).
//
// A tag is 1..kMaxTagBytes of letters, digits and "._:/=+@-"; a run or sweep carries at most
// kMaxTags. A note is UTF-8 text of at most kMaxNoteBytes, without control characters other
// than newline and tab.
inline constexpr size_t kMaxTagBytes = 64;
inline constexpr size_t kMaxTags = 32;
inline constexpr size_t kMaxNoteBytes = 8192;

struct Tag {
  std::string name;
  std::string who;    // who set it (Audit::who)
  int64_t at_us = 0;  // when, Unix time, microseconds
};

struct Note {
  std::string text;   // empty: none
  std::string who;    // who wrote it last; empty when never written
  int64_t at_us = 0;  // when, Unix time, microseconds; 0 when never written
};

// One change of a run's or sweep's tags and note. Adding a tag it carries keeps the first
// setter and time; removing one it lacks does nothing.
struct AnnotationChange {
  std::vector<std::string> add_tags;
  std::vector<std::string> remove_tags;
  std::optional<std::string> note;  // replaces the note; "" clears it; nullopt: unchanged
};

// One change an AnnotationChange made, kept so that a tag removed or a note replaced by another
// user is not lost: who changed what, and when (RunStore::AnnotationHistory). Only changes that
// changed something are kept, the newest kMaxAnnotationHistory per run or sweep.
inline constexpr int64_t kMaxAnnotationHistory = 1000;
struct AnnotationEvent {
  enum class Kind { kTagAdded, kTagRemoved, kNote };
  int64_t at_us = 0;
  std::string who;
  Kind kind = Kind::kTagAdded;
  std::string value;     // the tag, or the note as written ("" when it was cleared)
  std::string previous;  // kTagRemoved: who had set the tag; kNote: the note it replaced
};
// "tag added", "tag removed", "note"
std::string_view AnnotationKindName(AnnotationEvent::Kind kind);

// Where a run's loss became non-finite; the run failed without retries (RunRecord::diverged).
struct Divergence {
  int64_t step = 0;  // the optimizer step (1-based)
  double loss = 0;   // NaN or ±inf
};

// A change to a resuming run's config (RunStore::ResumeRun): the re-resolved config and its
// params (every key; the dedicated columns d, R, P, seed and steps must not change).
struct ConfigChange {
  std::string config_yaml;
  std::map<std::string, std::string> params;
};

// At most this many data files per run, and per RecordRunData call.
inline constexpr size_t kMaxDataFiles = 1000;

// One data file a run reads, by role ("train", "val:NAME", "task:NAME"), with its identity once
// recorded: at submit, by the first worker that opened it, or from the run's parent.
struct RunDataRecord {
  std::string role;
  std::string path;                          // as the run's config names it
  std::optional<data::FileIdentity> identity;  // nullopt: not recorded yet
  std::string recorded_by;  // "submit", "worker W (attempt N)", "run N (its parent)"
  int64_t recorded_us = 0;
};

// One run of a new sweep, as the scheduler resolved it.
struct NewRun {
  // Unique within the sweep, e.g. "d512-R6-P6-s42". 1..200 characters.
  std::string name;
  // The full resolved run config (YAML), stored verbatim.
  std::string config_yaml;
  // Every config key of the run -> its value as text (docs/model.md §9 keys). Must contain "d",
  // "seed" and "steps" as integers; "R" and "P", when present, as integers. These five are also
  // copied into dedicated columns.
  std::map<std::string, std::string> params;
  int64_t stored_params = 0;          // parameter count as stored
  int64_t effective_params = 0;       // parameter count as computed (loops unrolled)
  int64_t memory_estimate_bytes = 0;  // training memory the run needs on a device
  // The least memory it can train in: its micro-batch lowered and gradient accumulation raised
  // so that the global batch stays the same (config::FitMicroBatch). 0: memory_estimate_bytes.
  int64_t min_memory_bytes = 0;
  std::optional<int64_t> priority;  // default: the sweep's priority; higher runs first
  int max_attempts = 3;             // leases a run may lose before it FAILS; >= 1
  // A derived job (variable-R eval, fine-tune, extension) names its parent: either a run earlier
  // in the same request (parent_name) or an existing run (parent_run_id), not both, and the
  // parent checkpoint it starts from: "final" or a step number. It stays BLOCKED until the
  // parent has that checkpoint ("final": the parent succeeded and has a checkpoint).
  std::string parent_name;
  std::optional<int64_t> parent_run_id;
  std::string parent_checkpoint;
  JobKind kind = JobKind::kTrain;
  std::vector<int> eval_loops;  // eval jobs: the loop counts (R_infer) to evaluate at
  // The whole run's work in hours of one RTX 3090 (config::EstimateRunCost); >= 0, 0: unknown.
  double work_hours = 0;
  // The data files it reads (roles unique), with the identities known at submit. A derived run's
  // files not known here take the identity its existing parent recorded for the same role and
  // path.
  std::vector<RunDataRecord> data;
  // Device classes (docs/architecture.md "Device classes"): after a checkpoint its attempts may go
  // to any class (else only to the checkpoint's), and its seed group when its sweep balances
  // seeds over classes (empty: none).
  bool any_device_class = false;
  std::string seed_group;
};

// Where a sweep file came from, as the submitting client saw it (docs/architecture.md "Sweep
// provenance"): ordered items (file.path, file.sha256, git.commit, git.branch, git.dirty, ...;
// the same rules as an environment record's) and the diff of the checkout's tracked files
// against its commit. The file's text is the sweep's spec_text.
struct SweepProvenance {
  std::vector<std::pair<std::string, std::string>> items;
  std::string git_diff;  // at most kMaxProvenanceDiffBytes
};
inline constexpr size_t kMaxProvenanceDiffBytes = 1 << 20;

struct NewSweep {
  std::string name;               // unique; letters, digits, '.', '_', '-'; 1..128 characters
  std::string client_request_id;  // idempotency key: a resubmission returns the first sweep
  std::string spec_text;          // the sweep spec as submitted, stored verbatim
  int64_t priority = 0;
  // Its device-hour budget (docs/operations.md "Budgets"); none: only its owner's applies.
  std::optional<double> budget_device_hours;
  std::vector<NewRun> runs;                   // 1..StoreOptions::max_runs_per_sweep
  std::optional<SweepProvenance> provenance;  // none: the client sent none (an older one)
};

struct SweepRecord {
  int64_t id = 0;
  std::string name;
  std::string client_request_id;
  std::string spec_text;
  bool cancelled = false;  // CancelSweep was the last sweep-wide action
  int64_t priority = 0;
  std::string created_by;
  int64_t created_us = 0;
  std::map<RunState, int64_t> run_counts;  // runs per state; states with no runs are absent
  std::vector<Tag> tags;                   // by name
  Note note;
  std::optional<double> budget_device_hours;  // none: no budget of its own
};

struct CreatedSweep {
  SweepRecord sweep;
  std::vector<int64_t> run_ids;  // in the order of NewSweep::runs
  bool created = false;          // false: the request id was seen before, nothing was written
};

// Per-item outcomes of one zero-shot task at one loop count, as an evaluation job scored them
// (docs/study.md "Paired tests over items"): the items' order is the task file's.
struct EvalItems {
  std::string task;             // the task's name in the run's config (a config key's spelling)
  int loops = 0;                // R_infer, 1..16
  std::string correct;          // per item '1' (the choice with the largest log-likelihood was
                                // the gold one; LAMBADA: every target token was the argmax) or '0'
  std::string correct_norm;     // multiple choice: the same by log-likelihood per character
  std::vector<double> logprob;  // LAMBADA: each item's target log-likelihood in nats
};
inline constexpr size_t kMaxEvalItems = 1'000'000;  // items of one task
inline constexpr size_t kMaxEvalTasks = 64;         // tasks of one record

// Seed plans (docs/study.md "Planning seeds"): what `cart plan --apply` queued to decide the
// claims the report could not tell. Each claim's entry is one look of its group-sequential design:
// the seeds per side it had when planned and the seeds it is planned to reach; the report reads
// the looks back to spend the claim's level across them.
struct PlanClaim {
  std::string claim;         // the claim's id (report/claims.yaml); 1..200 bytes
  int64_t seeds_now = 0;     // per side, at this look; >= 0
  int64_t seeds_target = 0;  // per side, planned; >= seeds_now
  int64_t runs = 0;          // new runs it queued for this claim
  double hours = 0;          // their RTX 3090 hours
};

// A run a plan adds to an existing sweep: a new seed of a config, or a derived job of one. Its
// name is given by the store (the sweep's next free index); `run.name` is ignored.
struct NewPlanRun {
  std::string sweep;
  NewRun run;  // run.parent_run_id: an existing parent; else parent_entry
  // Index of an earlier entry of NewPlan::runs that is its parent (-1: none or parent_run_id).
  int parent_entry = -1;
};

struct NewPlan {
  double power = 0.8;                       // in (0, 1)
  double alpha = 0.05;                      // in (0, 1)
  std::optional<double> budget_hours;       // RTX 3090 hours the plan was held under; >= 0
  std::string spending = "obrien-fleming";  // obrien-fleming | pocock
  std::string text;  // the plan as the planner printed it (JSON); at most kMaxPlanTextBytes
  std::vector<PlanClaim> claims;  // at least one; ids unique
  std::vector<NewPlanRun> runs;   // at least one
};
inline constexpr size_t kMaxPlanTextBytes = 1 << 20;
inline constexpr size_t kMaxPlanRuns = 10'000;

struct AppliedPlan {
  int64_t plan_id = 0;
  std::vector<int64_t> run_ids;  // in the order of NewPlan::runs
};

struct PlanRecord {
  int64_t id = 0;
  int64_t created_us = 0;
  std::string created_by;
  double power = 0, alpha = 0;
  std::optional<double> budget_hours;
  std::string spending;
  std::string text;
  std::vector<PlanClaim> claims;  // by claim id
  std::vector<int64_t> run_ids;   // the runs it queued, by id (those not deleted since)
};

// What RunStore::DeleteSweep removed.
struct DeletedSweep {
  std::vector<int64_t> run_ids;  // the deleted runs
  int64_t runs() const { return static_cast<int64_t>(run_ids.size()); }
  int64_t metric_points = 0;
  int64_t checkpoints = 0;
  // Artifacts no checkpoint names any more: their rows are gone, the caller deletes the blobs.
  std::vector<std::string> released_artifacts;
};

struct RunRecord {
  int64_t id = 0;
  int64_t sweep_id = 0;
  std::string sweep_name;
  std::string name;
  std::string config_yaml;
  std::map<std::string, std::string> params;
  int64_t d = 0;
  std::optional<int64_t> r;
  std::optional<int64_t> p;
  int64_t seed = 0;
  int64_t steps = 0;  // total optimizer steps the run trains for (raised by ExtendRun)
  int64_t stored_params = 0;
  int64_t effective_params = 0;
  int64_t memory_estimate_bytes = 0;
  int64_t min_memory_bytes = 0;  // <= memory_estimate_bytes; placement needs this much
  RunState state = RunState::kQueued;
  int64_t priority = 0;
  int64_t attempt = 0;  // number of the latest attempt (the fencing token); 0: never leased
  int max_attempts = 0;
  // Attempts that still count against max_attempts: attempt minus those before the last resume or
  // extend and those released by a worker.
  int64_t attempts_counted = 0;
  bool cancel_requested = false;
  std::optional<int64_t> parent_run_id;
  std::string parent_checkpoint;  // "final", a step, or empty
  JobKind kind = JobKind::kTrain;
  std::vector<int> eval_loops;  // eval jobs: the loop counts (R_infer) to evaluate at
  int64_t created_us = 0;
  int64_t updated_us = 0;
  // The largest device memory the run ran out of memory on (RetryAttempt); it is only placed on
  // devices with more. 0: never ran out of memory.
  int64_t oom_memory_bytes = 0;
  // The largest micro-batch it may train at, set when it ran out of memory at a larger one
  // (RetryAttempt); cartd fits its jobs under it, the global batch kept. 0: no cap.
  int64_t micro_batch_cap = 0;
  double work_hours = 0;  // the whole run's work in RTX 3090 hours; 0: unknown
  // Set when its last attempt ended on a non-finite loss (FAILED, not retried); cleared when it
  // resumes with a change.
  std::optional<Divergence> diverged;
  std::vector<Tag> tags;  // by name
  Note note;
  // Device classes (docs/architecture.md "Device classes"): the device labels its workers
  // registered as, of the attempts whose work the run kept (that recorded a checkpoint, even one
  // retention later deleted; succeeded; or hold it now), first first. More than one: the run
  // spans classes, flagged wherever it shows.
  std::vector<std::string> device_classes;
  // The class of the attempt that wrote its latest checkpoint; empty: no checkpoint yet.
  std::string checkpoint_class;
  // Its later attempts may go to any class (`cart runs unpin`); else only to checkpoint_class.
  bool any_device_class = false;
  // Its config without the seed, when its sweep balances seeds over classes; else empty.
  std::string seed_group;
  bool SpansClasses() const { return device_classes.size() > 1; }
  // Where its next attempt must go: checkpoint_class unless unpinned; empty: any worker.
  std::string DeviceClassPin() const { return any_device_class ? "" : checkpoint_class; }
};

// What is left of `work_hours` (a whole run's work) once `done_steps` of its `steps` are done.
inline double RemainingWorkHours(double work_hours, int64_t steps, int64_t done_steps) {
  if (steps <= 0 || done_steps <= 0) return work_hours;
  return work_hours * static_cast<double>(std::max<int64_t>(steps - done_steps, 0)) /
         static_cast<double>(steps);
}

// A QUEUED run as placement weighs it (RunStore::ListQueuedWork).
struct PlaceableRun {
  int64_t id = 0;
  int64_t priority = 0;
  int64_t min_memory_bytes = 0;
  int64_t oom_memory_bytes = 0;
  double work_hours = 0;   // the whole run's; 0: unknown
  int64_t steps = 0;       // total steps
  int64_t done_steps = 0;  // its latest checkpoint's step: a resumed run has only the rest to do
  int64_t created_us = 0;
  std::string owner;  // who submitted its sweep (sweeps.created_by): fair share's unit
  int64_t sweep_id = 0;
  // The only device class it may go to (RunRecord::DeviceClassPin); empty: any.
  std::string device_class_pin;
  // Its config without the seed when its sweep balances seeds over classes; empty: no balance.
  std::string seed_group;
  // Work left in RTX 3090 hours.
  double RemainingHours() const { return RemainingWorkHours(work_hours, steps, done_steps); }
};

// (sweep id, seed group) -> device class -> runs (RunStore::ListSeedGroupClasses).
using SeedGroupClasses = std::map<std::pair<int64_t, std::string>, std::map<std::string, int64_t>>;

struct AttemptRecord {
  int64_t run_id = 0;
  int64_t attempt = 0;
  std::string worker_id;
  std::string device_class;  // the device its worker registered as at the lease; empty: unknown
  int64_t leased_us = 0;
  int64_t lease_expires_us = 0;
  std::optional<int64_t> started_us;
  std::optional<int64_t> ended_us;
  std::optional<AttemptOutcome> outcome;  // nullopt while the attempt holds its lease
  std::string reason;
  // What it ran on, as its worker recorded it at the start (RunStore::RecordEnvironment): ordered
  // (key, value) items; empty when none was recorded (a worker of a release before the record).
  std::vector<std::pair<std::string, std::string>> environment;
  // The energy it used so far, from its device's counter (RunStore::RecordEnergy), and which
  // counter ("nvml", "rapl"); nullopt: not measured.
  std::optional<double> energy_j;
  std::string energy_source;
};

// What a sweep's attempts used (RunStore::SweepSpending): energy where it was measured, and
// device-hours (each attempt from its start, or its lease when it never started, to its end or
// now).
struct Spending {
  int64_t attempts = 0;
  int64_t measured_attempts = 0;  // those with an energy reading
  double energy_j = 0;            // of the measured ones
  double device_hours = 0;
  std::vector<std::string> sources;  // the counters read, by name
};

// What the budgets are read from (RunStore::BudgetUse): each sweep's owner, budget and
// device-hours spent (counted as Spending counts them), and the users' budgets an admin set.
struct SweepBudgetUse {
  std::string name;
  std::string owner;
  std::optional<double> limit;
  double spent = 0;
};
struct UserBudget {
  std::string user;
  double device_hours = 0;
  std::string set_by;
  int64_t set_us = 0;
};
// The user a caller name belongs to ("user:ann", "admin:ann" -> "ann"): whose budget a sweep's
// device-hours count against, whichever token submitted it.
std::string_view OwnerName(std::string_view created_by);

struct BudgetUse {
  std::map<int64_t, SweepBudgetUse> sweeps;  // every sweep, by id
  std::map<std::string, UserBudget> users;   // those an admin set, by user
  // Device-hours of deleted sweeps, by owner: they stay spent (as in fair share's usage).
  std::map<std::string, double> deleted_spent;
  // What `user` (an OwnerName) has spent: their sweeps' and their deleted sweeps'.
  double UserSpent(const std::string& user) const;
};

struct CheckpointRecord {
  int64_t run_id = 0;
  int64_t step = 0;
  int64_t attempt = 0;
  std::string sha256;  // 64 lowercase hex digits: the artifact's name
  int64_t size_bytes = 0;
  std::string path;  // relative to the artifact store's root
  int64_t created_us = 0;
};

struct NewCheckpoint {
  int64_t step = 0;
  std::string sha256;  // 64 lowercase hex digits
  int64_t size_bytes = 0;
  std::string path;  // relative, no ".." component
};

struct WorkerRecord {
  std::string id;
  std::string device;
  int64_t memory_bytes = 0;
  int64_t registered_us = 0;
  int64_t last_seen_us = 0;
};

struct EventRecord {
  int64_t id = 0;
  std::optional<int64_t> run_id;
  std::optional<int64_t> sweep_id;
  std::string from_state;  // empty for a creation
  std::string to_state;    // a RunState name, or for sweeps "ACTIVE"/"CANCELLED"
  std::string who;
  int64_t at_us = 0;
  std::string why;
  EventCause cause = EventCause::kNone;
};

struct MetricPoint {
  int64_t step = 0;
  std::string name;  // 1..128 characters, e.g. "train/loss", "val/wiki/ppl", "rho"
  double value = 0;  // NaN is kept (stored as NULL)
  int64_t wall_time_us = 0;
};

// One line a worker logged for a run (what `cart runs logs` shows).
struct LogLine {
  int64_t id = 0;  // store order; RunLog(after_id) pages by it
  int64_t attempt = 0;
  int64_t seq = 0;  // the worker's number for the line within the attempt (from 1); 0: none
  int64_t wall_time_us = 0;
  std::string text;  // at most kMaxLogLineBytes; longer lines are cut with "…"
};
inline constexpr size_t kMaxLogLineBytes = 4096;

// A run's latest (and, once it succeeded, final) value of one metric.
struct MetricSummary {
  std::string name;
  int64_t latest_step = 0;
  double latest_value = 0;
  int64_t latest_wall_time_us = 0;
  std::optional<int64_t> final_step;
  std::optional<double> final_value;
};

}  // namespace cart::store
