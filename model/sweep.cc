#include "model/sweep.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "model/accounting.h"

namespace cart::model {
namespace {

absl::Status At(std::string_view file, const YAML::Node& node, const std::string& what) {
  return absl::InvalidArgumentError(StrCat(file, ":", node.Mark().line + 1, ": ", what));
}

std::string Scalar(const YAML::Node& n) { return n.IsScalar() ? n.Scalar() : ""; }

absl::StatusOr<int64_t> Int(std::string_view file, const YAML::Node& n, const std::string& key) {
  std::optional<int64_t> v = n.IsScalar() ? ParseInt64(n.Scalar()) : std::nullopt;
  if (!v) return At(file, n, StrCat(key, ": '", Scalar(n), "' is not an integer"));
  return *v;
}

absl::Status ParseDerived(std::string_view file, const YAML::Node& node, DerivedSpec& d) {
  if (!node.IsMap()) return At(file, node, "derived: each entry must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "name") {
      d.name = Scalar(v);
    } else if (key == "kind") {
      d.kind = Scalar(v);
      if (d.kind != "eval" && d.kind != "train") {
        return At(file, v, StrCat("derived.kind: '", d.kind, "' is not one of eval, train"));
      }
    } else if (key == "from") {
      if (!v.IsMap())
        return At(file, v, "derived.from: must be a mapping (run or match, checkpoint)");
      for (const auto& f : v) {
        const std::string fk = f.first.as<std::string>();
        if (fk == "run") {
          CART_ASSIGN_OR_RETURN(d.run_index, Int(file, f.second, "derived.from.run"));
        } else if (fk == "match") {
          if (!f.second.IsMap()) return At(file, f.second, "derived.from.match: must be a mapping");
          for (const auto& m : f.second) d.match[m.first.as<std::string>()] = Scalar(m.second);
        } else if (fk == "checkpoint") {
          if (Scalar(f.second) == "final") {
            d.checkpoint_step = -1;
          } else {
            CART_ASSIGN_OR_RETURN(d.checkpoint_step,
                                  Int(file, f.second, "derived.from.checkpoint"));
            if (d.checkpoint_step < 1) {
              return At(file, f.second, "derived.from.checkpoint: must be 'final' or a step >= 1");
            }
          }
        } else {
          return At(file, f.first,
                    StrCat("derived.from: unknown key '", fk, "' (known: run, match, checkpoint)"));
        }
      }
    } else if (key == "eval_loops") {
      if (!v.IsSequence()) return At(file, v, "derived.eval_loops: must be a list of 1..16");
      for (const auto& e : v) {
        CART_ASSIGN_OR_RETURN(int64_t r, Int(file, e, "derived.eval_loops"));
        if (r < 1 || r > 16)
          return At(file, e, StrCat("derived.eval_loops: ", r, " is outside 1..16"));
        d.eval_loops.push_back(static_cast<int>(r));
      }
    } else if (key == "set") {
      if (!v.IsMap()) return At(file, v, "derived.set: must be a mapping of config keys");
      for (const auto& s : v) {
        RunConfig probe;
        absl::Status ok = SetKey(probe, s.first.as<std::string>(), Scalar(s.second));
        if (!ok.ok()) return At(file, s.first, StrCat("derived.set.", Message(ok)));
        d.set.emplace_back(s.first.as<std::string>(), Scalar(s.second));
      }
    } else {
      return At(
          file, kv.first,
          StrCat("derived: unknown key '", key, "' (known: name, kind, from, eval_loops, set)"));
    }
  }
  if (d.name.empty()) return At(file, node, "derived: every entry needs a name");
  if (d.run_index < 0 && d.match.empty()) {
    return At(file, node, StrCat("derived '", d.name, "': from needs run or match"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SweepSpec> ParseSweepYaml(std::string_view text, std::string_view file) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat(file, ":", e.mark.line + 1, ": YAML syntax error: ", e.msg));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(StrCat(file, ": a sweep file must be a mapping"));
  }
  SweepSpec spec;
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "name") {
        spec.name = Scalar(v);
        const bool ok = !spec.name.empty() &&
                        spec.name.find_first_not_of(
                            "abcdefghijklmnopqrstuvwxyz"
                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == std::string::npos;
        if (!ok) return At(file, v, "name: use letters, digits, '-', '_' and '.' only");
      } else if (key == "base") {
        if (!v.IsMap()) return At(file, v, "base: must be a mapping of config keys");
        YAML::Emitter out;
        out << v;
        spec.base_yaml = out.c_str();
        // Check each base key here, so errors carry the line in the sweep file.
        RunConfig probe;
        for (const auto& b : v) {
          const std::string bk = b.first.as<std::string>();
          if (bk == "val_data") continue;
          if (bk == "model" || bk == "train" || bk == "data") {
            if (b.second.IsMap()) continue;
          }
          absl::Status s = b.second.IsScalar()
                               ? SetKey(probe, bk, b.second.Scalar())
                               : absl::InvalidArgumentError(bk + ": must be a single value");
          if (!s.ok())
            return At(file, b.second.IsScalar() ? b.second : b.first, "base." + Message(s));
        }
      } else if (key == "grid") {
        if (!v.IsMap()) return At(file, v, "grid: must map config keys to lists of values");
        for (const auto& g : v) {
          const std::string gk = g.first.as<std::string>();
          if (!g.second.IsSequence() || g.second.size() == 0) {
            return At(file, g.second, StrCat("grid.", gk, ": must be a non-empty list"));
          }
          std::vector<std::string> values;
          for (const auto& e : g.second) {
            RunConfig probe;
            absl::Status s = SetKey(probe, gk, Scalar(e));
            if (!s.ok()) return At(file, e, "grid." + Message(s));
            values.push_back(Scalar(e));
          }
          spec.grid.emplace_back(gk, values);
        }
      } else if (key == "seeds") {
        if (!v.IsSequence() || v.size() == 0) return At(file, v, "seeds: must be a non-empty list");
        spec.seeds.clear();
        for (const auto& e : v) {
          CART_ASSIGN_OR_RETURN(int64_t s, Int(file, e, "seeds"));
          spec.seeds.push_back(s);
        }
      } else if (key == "priority") {
        CART_ASSIGN_OR_RETURN(spec.priority, Int(file, v, "priority"));
      } else if (key == "max_attempts") {
        CART_ASSIGN_OR_RETURN(spec.max_attempts, Int(file, v, "max_attempts"));
        if (spec.max_attempts < 1) return At(file, v, "max_attempts: must be at least 1");
      } else if (key == "max_runs") {
        CART_ASSIGN_OR_RETURN(spec.max_runs, Int(file, v, "max_runs"));
        if (spec.max_runs < 1) return At(file, v, "max_runs: must be at least 1");
      } else if (key == "derived") {
        if (!v.IsSequence()) return At(file, v, "derived: must be a list");
        for (const auto& d : v) {
          DerivedSpec ds;
          CART_RETURN_IF_ERROR(ParseDerived(file, d, ds));
          spec.derived.push_back(std::move(ds));
        }
      } else {
        return At(file, kv.first,
                  StrCat("unknown key '", key,
                         "' (known: name, base, grid, seeds, priority, max_attempts, max_runs, "
                         "derived)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(file, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (spec.name.empty()) return absl::InvalidArgumentError(StrCat(file, ": name: missing"));
  return spec;
}

absl::StatusOr<std::vector<ExpandedRun>> ExpandSweep(const SweepSpec& spec, std::string_view file) {
  int64_t count = static_cast<int64_t>(spec.seeds.size());
  for (const auto& [key, values] : spec.grid) {
    count *= static_cast<int64_t>(values.size());
    if (count > spec.max_runs) break;
  }
  if (count > spec.max_runs) {
    int64_t full = static_cast<int64_t>(spec.seeds.size());
    for (const auto& g : spec.grid) full *= static_cast<int64_t>(g.second.size());
    return absl::ResourceExhaustedError(StrCat(file, ": the grid expands to ", full,
                                               " runs, more than max_runs = ", spec.max_runs));
  }
  RunConfig base;
  CART_RETURN_IF_ERROR(ApplyYaml(base, spec.base_yaml, StrCat(file, " (base)")));
  std::vector<ExpandedRun> runs;
  std::vector<size_t> pos(spec.grid.size(), 0);
  auto finish = [&](ExpandedRun& r) -> absl::Status {
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
    r.params.clear();
    for (const std::string& k : ScalarKeys()) r.params[k] = GetKey(r.config, k).value();
    r.config_yaml = ToYaml(r.config);
    const ParamCounts c = CountParams(r.config.model);
    r.stored_params = c.stored;
    r.effective_params = c.effective;
    r.memory_estimate_bytes =
        EstimateTrainingBytes(r.config.model, r.config.train.seq_len, r.config.train.batch,
                              /*bf16=*/r.config.train.dtype != DType::kFloat32);
    r.min_memory_bytes = MinTrainingBytes(r.config);
    return absl::OkStatus();
  };
  for (int64_t i = 0; i < count / static_cast<int64_t>(spec.seeds.size()); ++i) {
    for (int64_t seed : spec.seeds) {
      ExpandedRun r;
      r.index = static_cast<int64_t>(runs.size());
      r.name = StrCat(spec.name, "/", r.index);
      r.config = base;
      for (size_t g = 0; g < spec.grid.size(); ++g) {
        const auto& [key, values] = spec.grid[g];
        CART_RETURN_IF_ERROR(SetKey(r.config, key, values[pos[g]]));
        r.params[key] = values[pos[g]];
      }
      r.config.train.seed = seed;
      CART_RETURN_IF_ERROR(finish(r));
      runs.push_back(std::move(r));
    }
    // Odometer over the grid, last key fastest.
    for (size_t g = spec.grid.size(); g-- > 0;) {
      if (++pos[g] < spec.grid[g].second.size()) break;
      pos[g] = 0;
    }
  }
  const size_t trained = runs.size();
  for (const DerivedSpec& d : spec.derived) {
    int matched = 0;
    for (size_t p = 0; p < trained; ++p) {
      const ExpandedRun& parent = runs[p];
      bool match = d.run_index >= 0 ? parent.index == d.run_index : true;
      for (const auto& [k, v] : d.match) {
        auto it = parent.params.find(k);
        if (it == parent.params.end()) {
          return absl::InvalidArgumentError(
              StrCat(file, ": derived '", d.name, "': match key '", k, "' is not a config key"));
        }
        RunConfig probe;
        CART_RETURN_IF_ERROR(SetKey(probe, k, v));
        if (GetKey(probe, k).value() != it->second) match = false;
      }
      if (!match) continue;
      ++matched;
      ExpandedRun r;
      r.index = static_cast<int64_t>(runs.size());
      r.name = StrCat(spec.name, "/", r.index);
      r.kind = d.kind;
      r.config = parent.config;
      for (const auto& [k, v] : d.set) CART_RETURN_IF_ERROR(SetKey(r.config, k, v));
      r.parent_index = parent.index;
      r.parent_checkpoint_step = d.checkpoint_step;
      r.eval_loops = d.eval_loops;
      if (r.kind == "eval" && r.eval_loops.empty()) {
        r.eval_loops.push_back(r.config.model.effective_R_infer());
      }
      CART_RETURN_IF_ERROR(finish(r));
      r.params["derived"] = d.name;
      runs.push_back(std::move(r));
    }
    if (matched == 0) {
      return absl::InvalidArgumentError(
          StrCat(file, ": derived '", d.name, "' matches no run of the grid"));
    }
  }
  if (static_cast<int64_t>(runs.size()) > spec.max_runs) {
    return absl::ResourceExhaustedError(
        StrCat(file, ": the sweep expands to ", runs.size(),
               " runs with its derived jobs, more than max_runs = ", spec.max_runs));
  }
  return runs;
}

}  // namespace cart::model
