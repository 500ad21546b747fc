#pragma once

// Which running runs should stop at a checkpoint so that waiting work is served (docs/design.md
// "Preemption"). Pure, beside server/placement.h and of its shape: the Scheduler gathers the
// inputs (the store's queued runs, the runs it holds leases for, its live workers, fair share's
// usage) and sends the preempt controls this decides, with the reasons it gives.
//
// The rule. Nothing is preempted while a live worker that is free fits a waiting run: placement
// serves it. Otherwise the waiting runs are taken in the order placement serves them (InPlanOrder:
// priority; with fair share the owner least served counting what this hands out, else longest
// first; known work before unknown, then oldest) and each that outranks some running run gets a
// worker: one already handing its run back if there is one, else a victim. A waiting run
// outranks a running one at a higher priority; with fair share, also at the same priority when
// it is another owner's with less usage and the running run's owner holds at least two more
// workers. The victim, among the preemptible running runs on a worker the waiting run fits and
// that it outranks: lowest priority, then the owner holding most workers, then the most used,
// then the attempt that started last.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "store/types.h"

namespace cart::server {

// A run the scheduler holds a lease for, as preemption weighs it.
struct PreemptionCandidate {
  int64_t run_id = 0;
  int64_t attempt = 0;
  std::string owner;  // who submitted its sweep
  int64_t priority = 0;
  int64_t claimed_us = 0;    // when this attempt began
  int64_t memory_bytes = 0;  // its worker's usable memory: what a waiting run would get
  double speed = 1;          // its worker's, × an RTX 3090: a waiting run's hours there
  // Asked to stop already: kHandingBack while it is still expected to hand its worker back (a
  // worker about to be free), kOverdue after that (it counts for nothing but outranking).
  enum class Asked { kNo, kHandingBack, kOverdue };
  Asked asked = Asked::kNo;
  // Whether it may be asked: it trains (an evaluation starts over), has a checkpoint to resume
  // from, was not preempted within the interval, and its worker is registered.
  bool preemptible = false;
};

struct PreemptionAsk {
  int64_t run_id = 0;
  int64_t attempt = 0;
  std::string reason;  // in words, for the run's log and the control
};

// `queued`: QUEUED runs in any order. `free_worker_memory`: the usable memory of each live worker
// that is neither draining nor holding a run. `running`: every run with a lease, asked or not.
// `usage`: each owner's decayed GPU-hours when fair share is on (`fair`); owners not in it count
// 0. Returns the runs to ask, in the order they were chosen. Deterministic for equal inputs.
std::vector<PreemptionAsk> ChoosePreemptions(std::vector<store::PlaceableRun> queued,
                                             const std::vector<int64_t>& free_worker_memory,
                                             const std::vector<PreemptionCandidate>& running,
                                             const std::map<std::string, double>& usage, bool fair);

}  // namespace cart::server
