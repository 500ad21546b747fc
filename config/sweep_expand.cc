// Expanding a sweep file into runs (config/sweep.h ExpandSweep): the grid, variants and seeds,
// extra seeds at named points, derived runs resolved against their parents, each run's config
// finished and checked; and the data files a sweep names.

#include <algorithm>
#include <cmath>
#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "config/accounting.h"
#include "config/internal/keys.h"
#include "config/sweep.h"

namespace cart::config {

using internal::Canonical;

namespace {

// Runs per grid point (every variant with every seed) and the runs of the grid; the grid's whole
// size only to name it when it passes max_runs (ResourceExhausted).
struct GridSize {
  int64_t per_point = 0;
  int64_t runs = 0;
};
absl::StatusOr<GridSize> SizeOfGrid(const SweepSpec& spec, std::string_view file) {
  // A sweep with neither base nor grid trains nothing itself: it only derives jobs from the runs
  // of other sweeps (derived.from.sweep).
  const bool trains = !spec.base_yaml.empty() || !spec.grid.empty() || !spec.variants.empty();
  GridSize size;
  size.per_point = static_cast<int64_t>(spec.seeds.size()) *
                   std::max<int64_t>(1, static_cast<int64_t>(spec.variants.size()));
  size.runs = trains ? size.per_point : 0;
  for (const auto& [key, values] : spec.grid) {
    size.runs *= static_cast<int64_t>(values.size());
    if (size.runs > spec.max_runs) break;
  }
  if (size.runs > spec.max_runs) {
    int64_t full = size.per_point;
    for (const auto& g : spec.grid) full *= static_cast<int64_t>(g.second.size());
    return absl::ResourceExhaustedError(StrCat(file, ": the grid expands to ", full,
                                               " runs, more than max_runs = ", spec.max_runs));
  }
  return size;
}

// Validates a run's config (the error names the run and its grid point) and fills in what is
// derived from it: params (naming `derived`, the entry that made it, if any), the YAML, parameter
// counts and memory estimates.
absl::Status FinishRun(const SweepSpec& spec, std::string_view file, ExpandedRun& r,
                       std::string_view derived = {}) {
  absl::Status valid = Validate(r.config);
  if (!valid.ok()) {
    std::vector<std::string> point;
    for (const auto& [k, v] : r.params) {
      for (const auto& g : spec.grid) {
        if (g.first == k) point.push_back(k + "=" + v);
      }
    }
    return absl::InvalidArgumentError(
        StrCat(file, ": run ", r.name, " (", StrJoin(point, ", "), "): ", Message(valid)));
  }
  r.params = RunParams(r.config, derived);
  r.config_yaml = ToYaml(r.config);
  const ParamCounts c = CountParams(r.config.model);
  r.stored_params = c.stored;
  r.effective_params = c.effective;
  // As a GPU worker would train it; each worker's fit uses its own kernels (docs/model.md §5).
  r.memory_estimate_bytes = EstimateTrainingBytes(r.config, GpuWorkerKernels());
  r.min_memory_bytes = MinTrainingBytes(r.config, GpuWorkerKernels());
  return absl::OkStatus();
}

// The grid's runs: every point (an odometer over the grid, last key fastest), every variant,
// every seed, in that order; then each extra_seeds entry's runs, point by point in the same order
// (so adding an entry never renumbers the grid's runs).
absl::StatusOr<std::vector<ExpandedRun>> ExpandGrid(const SweepSpec& spec, std::string_view file,
                                                    const GridSize& size) {
  RunConfig base;
  if (!spec.base_yaml.empty()) {
    CART_RETURN_IF_ERROR(ApplyYaml(base, spec.base_yaml, StrCat(file, " (base)")));
  }
  static const std::vector<std::pair<std::string, std::string>> kNoOverrides;
  const size_t variants = std::max<size_t>(1, spec.variants.size());
  const int64_t points = size.per_point > 0 ? size.runs / size.per_point : 0;
  std::vector<ExpandedRun> runs;
  int64_t bytes = 0;  // of the runs' configs and keys so far (spec.max_bytes)
  // One run at grid point `pos`, variant `v`, with `seed`.
  auto add = [&](const std::vector<size_t>& pos, size_t v, int64_t seed) -> absl::Status {
    ExpandedRun r;
    r.index = static_cast<int64_t>(runs.size());
    r.name = StrCat(spec.name, "/", r.index);
    r.config = base;
    for (size_t g = 0; g < spec.grid.size(); ++g) {
      const auto& [key, values] = spec.grid[g];
      CART_RETURN_IF_ERROR(SetKey(r.config, key, values[pos[g]]));
      r.params[key] = values[pos[g]];
    }
    for (const auto& [key, value] : spec.variants.empty() ? kNoOverrides : spec.variants[v]) {
      CART_RETURN_IF_ERROR(SetKey(r.config, key, value));
      r.params[key] = value;
    }
    r.config.train.seed = seed;
    CART_RETURN_IF_ERROR(FinishRun(spec, file, r));
    int64_t own = static_cast<int64_t>(r.config_yaml.size() + r.name.size());
    for (const auto& [key, value] : r.params)
      own += static_cast<int64_t>(key.size() + value.size());
    bytes += own;
    if (spec.max_bytes > 0 && bytes > spec.max_bytes) {
      // Stopped here, before the rest is built: a 9.6 KB file of 100,000 runs, each naming a
      // 4,096-byte path, once became 2.76 GB of database.
      return absl::ResourceExhaustedError(
          StrCat(file, ": the sweep's runs hold more than ", spec.max_bytes,
                 " bytes of configs by run ", r.index, " of ", size.runs, " (this one takes ", own,
                 " bytes); cartd stores at most max_sweep_bytes = ", spec.max_bytes,
                 " per sweep: shorten its paths and values, or split it"));
    }
    runs.push_back(std::move(r));
    return absl::OkStatus();
  };
  // Calls `f(pos)` at every grid point in odometer order.
  auto each_point = [&](auto&& f) -> absl::Status {
    std::vector<size_t> pos(spec.grid.size(), 0);
    for (int64_t i = 0; i < points; ++i) {
      CART_RETURN_IF_ERROR(f(pos));
      for (size_t g = spec.grid.size(); g-- > 0;) {
        if (++pos[g] < spec.grid[g].second.size()) break;
        pos[g] = 0;
      }
    }
    return absl::OkStatus();
  };
  CART_RETURN_IF_ERROR(each_point([&](const std::vector<size_t>& pos) -> absl::Status {
    for (size_t v = 0; v < variants; ++v) {
      for (int64_t seed : spec.seeds) CART_RETURN_IF_ERROR(add(pos, v, seed));
    }
    return absl::OkStatus();
  }));
  if (spec.extra_seeds.empty()) return runs;

  // Which points each entry names (ParseSweepYaml checked its keys and values), counted against
  // max_runs before any of their runs is built.
  auto matches = [&](const ExtraSeeds& extra, const std::vector<size_t>& pos) {
    for (const auto& [key, value] : extra.at) {
      for (size_t g = 0; g < spec.grid.size(); ++g) {
        if (spec.grid[g].first == key &&
            Canonical(key, spec.grid[g].second[pos[g]]) != Canonical(key, value)) {
          return false;
        }
      }
    }
    return true;
  };
  int64_t total = static_cast<int64_t>(runs.size());
  std::set<std::pair<std::vector<size_t>, int64_t>> seeded;  // (point, extra seed)
  for (const ExtraSeeds& extra : spec.extra_seeds) {
    CART_RETURN_IF_ERROR(each_point([&](const std::vector<size_t>& pos) -> absl::Status {
      if (!matches(extra, pos)) return absl::OkStatus();
      for (int64_t seed : extra.seeds) {
        if (!seeded.emplace(pos, seed).second) {
          return absl::InvalidArgumentError(
              StrCat(file, ":", extra.line, ": extra_seeds: seed ", seed,
                     " is given twice at one grid point (an earlier entry names it too)"));
        }
      }
      total += static_cast<int64_t>(variants * extra.seeds.size());
      return absl::OkStatus();
    }));
  }
  if (total > spec.max_runs) {
    return absl::ResourceExhaustedError(
        StrCat(file, ": the grid expands to ", total,
               " runs with its extra seeds, more than max_runs = ", spec.max_runs));
  }
  for (const ExtraSeeds& extra : spec.extra_seeds) {
    CART_RETURN_IF_ERROR(each_point([&](const std::vector<size_t>& pos) -> absl::Status {
      if (!matches(extra, pos)) return absl::OkStatus();
      for (size_t v = 0; v < variants; ++v) {
        for (int64_t seed : extra.seeds) CART_RETURN_IF_ERROR(add(pos, v, seed));
      }
      return absl::OkStatus();
    }));
  }
  return runs;
}

// A derived job with its parents (this sweep's runs, or those of the sweep it names) and its
// match values in their stored form (computed once per job, not once per parent).
struct DerivedJob {
  const DerivedSpec* spec;
  const std::vector<ParentRun>* parents;
  std::vector<std::pair<std::string, std::string>> match;
};

absl::StatusOr<std::vector<DerivedJob>> ResolveDerived(
    const SweepSpec& spec, std::string_view file, const std::vector<ParentRun>& own,
    const std::map<std::string, std::vector<ParentRun>>& parent_sweeps) {
  std::vector<DerivedJob> jobs;
  for (const DerivedSpec& d : spec.derived) {
    DerivedJob job{&d, &own, {}};
    if (!d.sweep.empty()) {
      auto it = parent_sweeps.find(d.sweep);
      if (it == parent_sweeps.end()) {
        return absl::NotFoundError(StrCat(file, ": derived '", d.name, "': sweep '", d.sweep,
                                          "' is not known (submit it first)"));
      }
      job.parents = &it->second;
    }
    for (const auto& [k, v] : d.match) {
      RunConfig probe;
      CART_RETURN_IF_ERROR(SetKey(probe, k, v));
      job.match.emplace_back(k, GetKey(probe, k).value());
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// Whether `parent` is one of the job's parents (its run index, and its match keys' values).
absl::StatusOr<bool> Matches(std::string_view file, const DerivedJob& job,
                             const ParentRun& parent) {
  bool match = job.spec->run_index >= 0 ? parent.index == job.spec->run_index : true;
  for (const auto& [k, v] : job.match) {
    auto it = parent.params.find(k);
    if (it == parent.params.end()) {
      return absl::InvalidArgumentError(StrCat(file, ": derived '", job.spec->name,
                                               "': match key '", k, "' is not a config key"));
    }
    if (it->second != v) match = false;
  }
  return match;
}

// Appends each job's runs, one per matching parent, to `runs`. InvalidArgument for a job that
// matches no parent.
absl::Status ExpandDerived(const SweepSpec& spec, std::string_view file,
                           const std::vector<DerivedJob>& jobs, std::vector<ExpandedRun>& runs) {
  for (const DerivedJob& job : jobs) {
    const DerivedSpec& d = *job.spec;
    int matched = 0;
    for (const ParentRun& parent : *job.parents) {
      CART_ASSIGN_OR_RETURN(bool match, Matches(file, job, parent));
      if (!match) continue;
      ++matched;
      ExpandedRun r;
      r.index = static_cast<int64_t>(runs.size());
      r.name = StrCat(spec.name, "/", r.index);
      r.kind = d.kind;
      r.config = parent.config;
      for (const auto& [k, v] : d.set) CART_RETURN_IF_ERROR(SetKey(r.config, k, v));
      if (!d.set_maps_yaml.empty()) {
        CART_RETURN_IF_ERROR(
            ApplyYaml(r.config, d.set_maps_yaml, StrCat(file, " (derived '", d.name, "')")));
      }
      if (d.sweep.empty()) {
        r.parent_index = parent.index;
      } else {
        r.parent_run_id = parent.run_id;
        r.parent_name = parent.name;
      }
      r.parent_checkpoint_step = d.checkpoint_step;
      r.eval_loops = d.eval_loops;
      if (r.kind == JobKind::kEval && r.eval_loops.empty()) {
        r.eval_loops.push_back(r.config.model.effective_R_infer());
      }
      CART_RETURN_IF_ERROR(FinishRun(spec, file, r, d.name));
      runs.push_back(std::move(r));
    }
    if (matched == 0) {
      return absl::InvalidArgumentError(
          d.sweep.empty()
              ? StrCat(file, ": derived '", d.name, "' matches no run of the grid")
              : StrCat(file, ": derived '", d.name, "' matches no run of sweep '", d.sweep, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ExpandedRun>> ExpandSweep(
    const SweepSpec& spec, std::string_view file,
    const std::map<std::string, std::vector<ParentRun>>& parent_sweeps) {
  CART_ASSIGN_OR_RETURN(GridSize size, SizeOfGrid(spec, file));
  CART_ASSIGN_OR_RETURN(std::vector<ExpandedRun> runs, ExpandGrid(spec, file, size));
  std::vector<ParentRun> own;
  own.reserve(runs.size());
  for (const ExpandedRun& r : runs) own.push_back(AsParentRun(r));
  CART_ASSIGN_OR_RETURN(std::vector<DerivedJob> derived,
                        ResolveDerived(spec, file, own, parent_sweeps));
  // Counted before any derived run is built, so that a sweep past max_runs is refused at once and
  // memory stays bounded by the cap (a few dozen aliases over a 10,000-run grid took 21 s and a
  // gigabyte before the refusal).
  int64_t total = static_cast<int64_t>(runs.size());
  for (const DerivedJob& job : derived) {
    for (const ParentRun& parent : *job.parents) {
      CART_ASSIGN_OR_RETURN(bool match, Matches(file, job, parent));
      total += match;
    }
  }
  if (total > spec.max_runs) {
    return absl::ResourceExhaustedError(
        StrCat(file, ": the sweep expands to ", total,
               " runs with its derived jobs, more than max_runs = ", spec.max_runs));
  }
  CART_RETURN_IF_ERROR(ExpandDerived(spec, file, derived, runs));
  return runs;
}

std::map<std::string, bool> SweepDataPaths(const SweepSpec& spec) {
  std::map<std::string, bool> paths;
  auto add_config = [&](const std::string& yaml) {
    RunConfig config;
    if (!ApplyYaml(config, yaml, "sweep").ok()) return;
    for (const DataFile& f : DataFiles(config)) paths.emplace(f.path, f.token_file);
  };
  auto add_train = [&](const std::string& key, const std::string& value) {
    if (key == "train_data" && !value.empty()) paths.emplace(value, true);
  };
  if (!spec.base_yaml.empty()) add_config(spec.base_yaml);
  for (const auto& [key, values] : spec.grid) {
    for (const std::string& v : values) add_train(key, v);
  }
  for (const auto& variant : spec.variants) {
    for (const auto& [key, value] : variant) add_train(key, value);
  }
  for (const DerivedSpec& d : spec.derived) {
    for (const auto& [key, value] : d.set) add_train(key, value);
    if (!d.set_maps_yaml.empty()) add_config(d.set_maps_yaml);
  }
  return paths;
}

}  // namespace cart::config
