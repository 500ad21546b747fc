#include "server/placement.h"

#include <algorithm>
#include <optional>
#include <set>

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

void InPlanOrder(std::vector<store::PlaceableRun>& queued,
                 const std::map<std::string, double>& usage, std::map<std::string, double>& share,
                 const std::function<bool(const store::PlaceableRun&)>& plan) {
  SortLongestFirst(queued);
  for (size_t level = 0; level < queued.size();) {
    size_t end = level;
    while (end < queued.size() && queued[end].priority == queued[level].priority) ++end;
    if (usage.empty()) {
      for (size_t i = level; i < end; ++i) {
        if (plan(queued[i])) return;
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
        if (plan(*by_owner[*pick][next[*pick]++])) return;
      }
    }
    level = end;
  }
}

namespace {

// Device classes (docs/architecture.md "Device classes"): a run pinned to a class goes only to
// a worker of it; a run of a balanced seed group goes only to the classes present (with a
// worker it fits) that hold fewest of its group so far, counting what the plan has placed.
class ClassRule {
 public:
  explicit ClassRule(const store::SeedGroupClasses& groups) : counts_(groups) {}

  // The classes `run` may go to on `fleet`; nullopt: any.
  std::optional<std::set<std::string>> Allowed(const std::vector<PlacementWorker>& fleet,
                                               const store::PlaceableRun& run) const {
    if (!run.device_class_pin.empty()) return std::set<std::string>{run.device_class_pin};
    if (run.seed_group.empty()) return std::nullopt;
    std::set<std::string> present;
    for (const PlacementWorker& w : fleet) {
      if (w.speed > 0 && Fits(run, w.memory_bytes)) present.insert(w.device);
    }
    const auto group = counts_.find({run.sweep_id, run.seed_group});
    auto count = [&](const std::string& c) -> int64_t {
      if (group == counts_.end()) return 0;
      const auto it = group->second.find(c);
      return it == group->second.end() ? 0 : it->second;
    };
    int64_t fewest = -1;
    for (const std::string& c : present) {
      if (fewest < 0 || count(c) < fewest) fewest = count(c);
    }
    std::set<std::string> allowed;
    for (const std::string& c : present) {
      if (count(c) == fewest) allowed.insert(c);
    }
    return allowed;
  }
  // `run` is planned onto a worker of `device_class`.
  void Planned(const store::PlaceableRun& run, const std::string& device_class) {
    // A pinned run is already counted on its class by the store (ListSeedGroupClasses).
    if (!run.seed_group.empty() && run.device_class_pin.empty()) {
      ++counts_[{run.sweep_id, run.seed_group}][device_class];
    }
  }
  // Why the asker may not take `run` (its class is not allowed); empty when it may.
  static std::string Refusal(const std::optional<std::set<std::string>>& allowed,
                             const store::PlaceableRun& run, const PlacementWorker& asker) {
    if (!allowed || allowed->count(asker.device)) return "";
    if (!run.device_class_pin.empty()) {
      return StrCat("not given to worker ", asker.id, " (", asker.device,
                    "): its latest checkpoint was written on ", run.device_class_pin,
                    " and its attempts stay on that device class (`cart runs unpin ", run.id,
                    "` lets them go to any)");
    }
    return StrCat("not given to worker ", asker.id, " (", asker.device,
                  "): its sweep balances each config's seeds over device classes, and this "
                  "config's next seed goes to ",
                  allowed->empty() ? std::string("a class no live worker it fits has")
                                   : StrJoin(*allowed, " or "));
  }

 private:
  store::SeedGroupClasses counts_;
};

// The worker of `fleet` that would finish `run` first among those of `allowed` classes (nullopt:
// any; ties: the lowest index); -1 when it fits none.
int Soonest(const std::vector<PlacementWorker>& fleet, const store::PlaceableRun& run,
            const std::optional<std::set<std::string>>& allowed, double* finish) {
  const double work = run.RemainingHours();
  int best = -1;
  for (size_t k = 0; k < fleet.size(); ++k) {
    const PlacementWorker& w = fleet[k];
    if (w.speed <= 0 || !Fits(run, w.memory_bytes)) continue;
    if (allowed && !allowed->count(w.device)) continue;
    const double at = w.free_in_hours + work / w.speed;
    if (best < 0 || at < *finish) {
      best = static_cast<int>(k);
      *finish = at;
    }
  }
  return best;
}

}  // namespace

PlacementDecision PlaceEarliestFinish(const PlacementWorker& asker,
                                      const std::vector<PlacementWorker>& others,
                                      std::vector<store::PlaceableRun> queued,
                                      const std::map<std::string, double>& usage,
                                      const store::SeedGroupClasses& groups) {
  // Index 0 is the asker (ties go to it: a free worker never idles for an equal plan); free
  // times advance as runs are planned onto workers.
  std::vector<PlacementWorker> fleet;
  fleet.reserve(others.size() + 1);
  fleet.push_back(asker);
  fleet.front().free_in_hours = 0;
  fleet.insert(fleet.end(), others.begin(), others.end());
  PlacementDecision decision;
  std::map<std::string, double> share = usage;  // GPU-hours, the plan's added as it goes
  ClassRule classes(groups);
  // Plans `run` onto the worker that finishes it first; true (stop) when that is the asker.
  InPlanOrder(queued, usage, share, [&](const store::PlaceableRun& run) {
    double finish = 0;
    const std::optional<std::set<std::string>> allowed = classes.Allowed(fleet, run);
    const int best = Soonest(fleet, run, allowed, &finish);
    const bool could = Fits(run, asker.memory_bytes) && decision.declined.size() < 64;
    if (best < 0) {
      // Fits no live worker of a class it may go to: waits for one (Explain says so).
      if (could) {
        if (std::string why = ClassRule::Refusal(allowed, run, asker); !why.empty()) {
          decision.declined[run.id] = std::move(why);
        }
      }
      return false;
    }
    if (best == 0) {
      decision.run_id = run.id;
      return true;
    }
    const double work = run.RemainingHours();
    const PlacementWorker& w = fleet[best];
    if (could) {
      std::string why = ClassRule::Refusal(allowed, run, asker);
      decision.declined[run.id] =
          !why.empty() ? why
                       : StrCat("not given to worker ", asker.id, " (", asker.device, ", ",
                                Hours(work / asker.speed), " there): it finishes sooner on ", w.id,
                                " (", w.device, ", free in ", Hours(w.free_in_hours), ", then ",
                                Hours(work / w.speed), ")");
    }
    share[run.owner] += work / w.speed;
    classes.Planned(run, w.device);
    fleet[best].free_in_hours = finish;
    return false;
  });
  return decision;
}

std::vector<PlannedRun> PlanQueue(std::vector<PlacementWorker> fleet,
                                  std::vector<store::PlaceableRun> queued,
                                  const std::map<std::string, double>& usage,
                                  const store::SeedGroupClasses& groups) {
  std::vector<PlannedRun> plan;
  std::map<std::string, double> share = usage;
  ClassRule classes(groups);
  InPlanOrder(queued, usage, share, [&](const store::PlaceableRun& run) {
    if (run.RemainingHours() <= 0) return false;  // unknown work: no estimate
    double finish = 0;
    const int best = Soonest(fleet, run, classes.Allowed(fleet, run), &finish);
    if (best < 0) return false;
    PlacementWorker& w = fleet[best];
    plan.push_back(PlannedRun{run.id, w.id, w.free_in_hours, finish});
    share[run.owner] += run.RemainingHours() / w.speed;
    classes.Planned(run, w.device);
    w.free_in_hours = finish;
    return false;
  });
  return plan;
}

}  // namespace cart::server
