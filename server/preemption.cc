// Which running runs stop at a checkpoint for waiting work (server/preemption.h).

#include "server/preemption.h"

#include <algorithm>
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
  // Served first by placement: higher priority, then the owner with less usage, then longest.
  std::sort(queued.begin(), queued.end(),
            [&](const store::PlaceableRun& a, const store::PlaceableRun& b) {
              if (a.priority != b.priority) return a.priority > b.priority;
              if (fair && used(a.owner) != used(b.owner)) return used(a.owner) < used(b.owner);
              if (a.RemainingHours() != b.RemainingHours()) {
                return a.RemainingHours() > b.RemainingHours();
              }
              return a.id < b.id;
            });
  std::vector<const PreemptionCandidate*> by_id;
  for (const PreemptionCandidate& r : running) by_id.push_back(&r);
  std::sort(by_id.begin(), by_id.end(),
            [](const PreemptionCandidate* a, const PreemptionCandidate* b) {
              return a->run_id < b->run_id;
            });
  std::map<std::string, int> held;  // owner -> workers their runs hold (asked ones excluded)
  int pending = 0;                  // asked runs still handing back: workers about to be free
  std::vector<const PreemptionCandidate*> candidates;
  for (const PreemptionCandidate* r : by_id) {
    if (r->asked != PreemptionCandidate::Asked::kNo) {
      if (r->asked == PreemptionCandidate::Asked::kHandingBack) ++pending;
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
  for (const store::PlaceableRun& q : queued) {
    if (candidates.empty() && pending == 0) break;
    bool waits_for_any = false;
    for (const PreemptionCandidate* r : by_id) waits_for_any = waits_for_any || outranks(q, *r);
    if (!waits_for_any) continue;
    if (pending > 0) {  // a worker already being handed back serves it
      --pending;
      ++held[q.owner];
      continue;
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
    if (victim == candidates.end()) continue;
    const PreemptionCandidate& chosen = **victim;
    asks.push_back(PreemptionAsk{chosen.run_id, chosen.attempt, why(q, chosen)});  // before the
    --held[chosen.owner];                                                          // counts move
    ++held[q.owner];
    candidates.erase(victim);
  }
  return asks;
}

}  // namespace cart::server
