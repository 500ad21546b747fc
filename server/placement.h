#pragma once

// Which queued run a free worker should take, knowing every worker's speed and every run's work
// (docs/design.md "Placement"). Pure: the Scheduler gathers the inputs (the store's queued runs,
// its workers' speeds and what they are running) and claims what this decides.
//
// Work is counted in hours of one RTX 3090 (store::PlaceableRun::RemainingHours, from
// config::EstimateRunCost) and speed as a multiple of one (a 3050 is about 0.25), so a run of W
// hours takes W / speed hours on a worker.
//
// Earliest finish, longest first: the queued runs are taken by priority, and within a level
// longest first, and each is planned onto the worker that would finish it soonest (its free time
// plus the run's work at its speed), the asking worker being free now. The asker gets the first
// run planned onto it: a run of a lower level only when every run above is planned onto other
// workers. If none is, it waits: every run would finish sooner on a faster worker once that one
// is free. This is list scheduling with the longest processing time first on uniform machines;
// `bench-schedule` replays the paper's sweeps through it.
//
// Device classes (docs/architecture.md "Device classes") narrow the workers a run may go to: a
// run pinned to the class of its latest checkpoint goes only to that class, and a run of a sweep
// that balances its seeds goes only to the classes present (that it fits) holding fewest of its
// config's seeds so far, the plan's own placements counted as it goes.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/types.h"

namespace cart::server {

struct PlacementWorker {
  std::string id;
  std::string device;        // its device class ("NVIDIA GeForce RTX 3090")
  int64_t memory_bytes = 0;  // usable
  double speed = 1;          // × an RTX 3090; > 0
  double free_in_hours = 0;  // when its current run is expected to end; 0: free now
};

struct PlacementDecision {
  std::optional<int64_t> run_id;  // the run the asking worker should take
  // Runs the asker could have taken but that finish sooner elsewhere: run -> why (what `cart runs
  // show` says while the run waits).
  std::map<int64_t, std::string> declined;
};

// Whether `run` may go on a worker with `memory_bytes` (usable): its least memory fits and the
// device is above its out-of-memory floor.
inline bool Fits(const store::PlaceableRun& run, int64_t memory_bytes) {
  return run.min_memory_bytes <= memory_bytes && run.oom_memory_bytes < memory_bytes;
}

// `groups`: each balanced seed group's runs per class so far (RunStore::ListSeedGroupClasses).
// `queued`: QUEUED runs in any order (sorted here: priority, then longest remaining work; unknown
// work last, then oldest). `others`: every live worker but the asker, busy or not.
// `usage`: fair share, each owner's decayed GPU-hours (store::RunStore::DecayedUsage); within a
// priority level the next run planned is the longest of the owner whose usage plus what the plan
// has given them so far is least. Empty: one queue, longest first. Deterministic for equal inputs.
PlacementDecision PlaceEarliestFinish(const PlacementWorker& asker,
                                      const std::vector<PlacementWorker>& others,
                                      std::vector<store::PlaceableRun> queued,
                                      const std::map<std::string, double>& usage = {},
                                      const store::SeedGroupClasses& groups = {});

// The order placement serves queued runs in, one at a time, calling `serve` for each until it
// returns true: by priority; within a level, with `usage` (fair share), the longest run of the
// owner whose usage plus `share` (what the caller has handed out so far, added to by `serve`) is
// least, owners in name order on a tie; without it, longest first. Known work before unknown
// (0), then oldest, then by id. Placement, the plan of the queue and preemption all take it.
void InPlanOrder(std::vector<store::PlaceableRun>& queued,
                 const std::map<std::string, double>& usage, std::map<std::string, double>& share,
                 const std::function<bool(const store::PlaceableRun&)>& serve);

// One queued run as the plan places it: on which worker, and when it is expected to start and
// finish, in hours from now.
struct PlannedRun {
  int64_t run_id = 0;
  std::string worker_id;
  double start_in_hours = 0;
  double finish_in_hours = 0;
};

// The whole queue planned onto `fleet` (each worker free after its free_in_hours) in the order
// and by the rule PlaceEarliestFinish uses, as if every worker asked when it is free: the
// expected finish times that sweeps and runs show. Runs whose work is unknown or that fit no
// worker are left out. In plan order.
std::vector<PlannedRun> PlanQueue(std::vector<PlacementWorker> fleet,
                                  std::vector<store::PlaceableRun> queued,
                                  const std::map<std::string, double>& usage = {},
                                  const store::SeedGroupClasses& groups = {});

}  // namespace cart::server
