#include "server/placement.h"

#include <algorithm>

#include "common/strings.h"

namespace cart::server {
namespace {

// Higher priority first; within a level longest remaining work first, unknown work (0) after all
// known, then oldest, then by id.
void SortLongestFirst(std::vector<store::PlaceableRun>& runs) {
  std::sort(runs.begin(), runs.end(),
            [](const store::PlaceableRun& a, const store::PlaceableRun& b) {
              if (a.priority != b.priority) return a.priority > b.priority;
              const double wa = a.RemainingHours(), wb = b.RemainingHours();
              if ((wa > 0) != (wb > 0)) return wa > 0;
              if (wa != wb) return wa > wb;
              if (a.created_us != b.created_us) return a.created_us < b.created_us;
              return a.id < b.id;
            });
}

std::string Hours(double h) { return StrCat(Fixed(h, 1), " h"); }

}  // namespace

PlacementDecision PlaceEarliestFinish(const PlacementWorker& asker,
                                      const std::vector<PlacementWorker>& others,
                                      std::vector<store::PlaceableRun> queued,
                                      const std::map<std::string, double>& usage) {
  SortLongestFirst(queued);
  // Index 0 is the asker; free times advance as runs are planned onto workers.
  std::vector<PlacementWorker> fleet;
  fleet.reserve(others.size() + 1);
  fleet.push_back(asker);
  fleet.front().free_in_hours = 0;
  fleet.insert(fleet.end(), others.begin(), others.end());
  PlacementDecision decision;
  std::map<std::string, double> share = usage;  // GPU-hours, the plan's added as it goes
  // Plans `run` onto the worker that finishes it first; true when that is the asker.
  auto plan = [&](const store::PlaceableRun& run) {
    const double work = run.RemainingHours();
    int best = -1;
    double best_finish = 0;
    for (size_t k = 0; k < fleet.size(); ++k) {
      const PlacementWorker& w = fleet[k];
      if (w.speed <= 0 || !Fits(run, w.memory_bytes)) continue;
      const double finish = w.free_in_hours + work / w.speed;
      // Ties go to the asker (index 0, seen first): a free worker never idles for an equal plan.
      if (best < 0 || finish < best_finish) {
        best = static_cast<int>(k);
        best_finish = finish;
      }
    }
    if (best < 0) return false;  // fits no live worker: waits for one (Explain says so)
    if (best == 0) {
      decision.run_id = run.id;
      return true;
    }
    const PlacementWorker& w = fleet[best];
    if (Fits(run, asker.memory_bytes) && decision.declined.size() < 64) {
      decision.declined[run.id] =
          StrCat("not given to worker ", asker.id, " (", asker.device, ", ",
                 Hours(work / asker.speed), " there): it finishes sooner on ", w.id, " (", w.device,
                 ", free in ", Hours(w.free_in_hours), ", then ", Hours(work / w.speed), ")");
    }
    share[run.owner] += work / w.speed;
    fleet[best].free_in_hours = best_finish;
    return false;
  };
  for (size_t level = 0; level < queued.size();) {
    size_t end = level;
    while (end < queued.size() && queued[end].priority == queued[level].priority) ++end;
    if (usage.empty()) {
      for (size_t i = level; i < end; ++i) {
        if (plan(queued[i])) return decision;
      }
    } else {
      // Each owner's runs of this level, longest first; the next comes from the owner least
      // served so far.
      std::map<std::string, std::vector<const store::PlaceableRun*>> by_owner;
      for (size_t i = level; i < end; ++i) by_owner[queued[i].owner].push_back(&queued[i]);
      std::map<std::string, size_t> next;
      for (size_t left = end - level; left > 0; --left) {
        const std::string* pick = nullptr;
        for (const auto& [owner, runs] : by_owner) {
          if (next[owner] >= runs.size()) continue;
          if (pick == nullptr || share[owner] < share[*pick]) pick = &owner;
        }
        const store::PlaceableRun* run = by_owner[*pick][next[*pick]++];
        if (plan(*run)) return decision;
      }
    }
    level = end;
  }
  return decision;
}

}  // namespace cart::server
