// Which running runs stop at a checkpoint for waiting work (server/preemption.h).

#include "server/preemption.h"

#include <algorithm>
#include <deque>
#include <tuple>

#include "common/strings.h"
#include "server/placement.h"

namespace cart::server {

std::vector<PreemptionAsk> ChoosePreemptions(std::vector<store::PlaceableRun> queued,
                                             const std::vector<int64_t>& free_worker_memory,
                                             const std::vector<PreemptionCandidate>& running,
                                             const std::map<std::string, double>& usage,
                                             bool fair) {
  std::vector<PreemptionAsk> asks;
  // A free worker that fits waiting work is placement's to use: nothing is preempted.
  for (int64_t memory : free_worker_memory) {
    for (const store::PlaceableRun& q : queued) {
      if (Fits(q, memory)) return asks;
    }
  }
  auto used = [&](const std::string& owner) {
    if (!fair) return 0.0;
    const auto it = usage.find(owner);
    return it == usage.end() ? 0.0 : it->second;
  };
  std::vector<const PreemptionCandidate*> by_id;
  for (const PreemptionCandidate& r : running) by_id.push_back(&r);
  std::sort(by_id.begin(), by_id.end(),
            [](const PreemptionCandidate* a, const PreemptionCandidate* b) {
              return a->run_id < b->run_id;
            });
  std::map<std::string, int> held;  // owner -> workers their runs hold (asked ones excluded)
  std::deque<double> pending;       // the speeds of workers whose asked runs are still handing back
  std::vector<const PreemptionCandidate*> candidates;
  for (const PreemptionCandidate* r : by_id) {
    if (r->asked != PreemptionCandidate::Asked::kNo) {
      if (r->asked == PreemptionCandidate::Asked::kHandingBack) pending.push_back(r->speed);
      continue;
    }
    ++held[r->owner];
    if (r->preemptible) candidates.push_back(r);
  }
  // Whether waiting run `q` outranks running run `r`; `why` says so in words, for the one chosen.
  auto outranks = [&](const store::PlaceableRun& q, const PreemptionCandidate& r) {
    return q.priority > r.priority ||
           (fair && q.priority == r.priority && q.owner != r.owner &&
            used(q.owner) < used(r.owner) && held[r.owner] - held[q.owner] >= 2);
  };
  auto why = [&](const store::PlaceableRun& q, const PreemptionCandidate& r) {
    if (q.priority > r.priority) {
      return StrCat("run ", q.id, " of ", q.owner, " waits at priority ", q.priority, " > ",
                    r.priority);
    }
    return StrCat("fair share: run ", q.id, " of ", q.owner, " waits (", held[q.owner],
                  " workers, ", Fixed(used(q.owner), 1), " decayed GPU-h) while ", r.owner,
                  " holds ", held[r.owner], " (", Fixed(used(r.owner), 1), " GPU-h)");
  };
  // What each owner has been handed, as placement counts it: their usage, plus each waiting
  // run given a worker here at that worker's speed.
  const std::map<std::string, double> no_usage;
  std::map<std::string, double> share = fair ? usage : no_usage;
  auto hand = [&](const store::PlaceableRun& q, double speed) {
    ++held[q.owner];
    share[q.owner] += q.RemainingHours() / (speed > 0 ? speed : 1);
  };
  InPlanOrder(queued, fair ? usage : no_usage, share, [&](const store::PlaceableRun& q) {
    if (candidates.empty() && pending.empty()) return true;
    bool waits_for_any = false;
    for (const PreemptionCandidate* r : by_id) waits_for_any = waits_for_any || outranks(q, *r);
    if (!waits_for_any) return false;
    if (!pending.empty()) {  // a worker already being handed back serves it
      hand(q, pending.front());
      pending.pop_front();
      return false;
    }
    // The victim: lowest priority, then the owner holding most, then most used, then the attempt
    // that started last.
    auto key = [&](const PreemptionCandidate& x) {
      return std::make_tuple(-x.priority, held[x.owner], used(x.owner), x.claimed_us);
    };
    auto victim = candidates.end();
    for (auto c = candidates.begin(); c != candidates.end(); ++c) {
      if (!Fits(q, (*c)->memory_bytes) || !outranks(q, **c)) continue;
      if (victim == candidates.end() || key(**c) > key(**victim)) victim = c;
    }
    if (victim == candidates.end()) return false;
    const PreemptionCandidate& chosen = **victim;
    asks.push_back(PreemptionAsk{chosen.run_id, chosen.attempt, why(q, chosen)});  // before the
    --held[chosen.owner];                                                          // counts move
    hand(q, chosen.speed);
    candidates.erase(victim);
    return false;
  });
  return asks;
}

}  // namespace cart::server
