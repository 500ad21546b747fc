// Sweep files (config/sweep.h): reading and checking one, and the sweeps its derived runs come
// from. Expanding it into runs is sweep_expand.cc.

#include "config/sweep.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "common/yaml.h"
#include "config/internal/keys.h"

namespace cart::config {

using internal::Canonical;

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

// device_classes: {balance: true|false, resume: same|any}.
absl::Status ParseDeviceClasses(std::string_view file, const YAML::Node& node, SweepSpec& spec) {
  if (!node.IsMap()) {
    return At(file, node,
              "device_classes: must be a mapping {balance: true|false, resume: same|any}");
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string value = Scalar(kv.second);
    if (key == "balance") {
      const std::optional<bool> balance = ParseBool(value);
      if (!balance) {
        return At(file, kv.second,
                  StrCat("device_classes.balance: '", value, "' is not one of ", kBoolSpellings));
      }
      spec.balance_device_classes = *balance;
    } else if (key == "resume") {
      if (value != "same" && value != "any") {
        return At(file, kv.second,
                  StrCat("device_classes.resume: '", value, "' is not one of same, any"));
      }
      spec.resume_any_device_class = value == "any";
    } else {
      return At(file, kv.first,
                StrCat("device_classes: unknown key '", key, "' (known: balance, resume)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseDerived(std::string_view file, const YAML::Node& node, DerivedSpec& d) {
  if (!node.IsMap()) return At(file, node, "derived: each entry must be a mapping");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "name") {
      d.name = Scalar(v);
    } else if (key == "kind") {
      std::optional<JobKind> kind = ParseJobKind(Scalar(v));
      if (!kind) {
        return At(file, v, StrCat("derived.kind: '", Scalar(v), "' is not one of eval, train"));
      }
      d.kind = *kind;
    } else if (key == "from") {
      if (!v.IsMap())
        return At(file, v, "derived.from: must be a mapping (run or match, checkpoint)");
      for (const auto& f : v) {
        const std::string fk = f.first.as<std::string>();
        if (fk == "run") {
          CART_ASSIGN_OR_RETURN(d.run_index, Int(file, f.second, "derived.from.run"));
        } else if (fk == "sweep") {
          d.sweep = Scalar(f.second);
          if (d.sweep.empty())
            return At(file, f.second, "derived.from.sweep: must be a sweep name");
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
                    StrCat("derived.from: unknown key '", fk,
                           "' (known: sweep, run, match, checkpoint)"));
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
      YAML::Node maps(YAML::NodeType::Map);
      for (const auto& s : v) {
        const std::string sk = s.first.as<std::string>();
        if ((sk == "tasks" || sk == "val_data") && s.second.IsMap()) {
          RunConfig probe;
          YAML::Node one(YAML::NodeType::Map);
          one[sk] = s.second;
          YAML::Emitter e;
          e << one;
          absl::Status ok = ApplyYaml(probe, e.c_str(), StrCat(file, " (derived.set)"));
          if (!ok.ok()) return At(file, s.second, StrCat("derived.set.", Message(ok)));
          maps[sk] = s.second;
          continue;
        }
        RunConfig probe;
        absl::Status ok = SetKey(probe, sk, Scalar(s.second));
        if (!ok.ok()) return At(file, s.first, StrCat("derived.set.", Message(ok)));
        d.set.emplace_back(sk, Scalar(s.second));
      }
      if (maps.size() > 0) {
        YAML::Emitter e;
        e << maps;
        d.set_maps_yaml = e.c_str();
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

absl::Status ParseExtraSeeds(std::string_view file, const YAML::Node& node, ExtraSeeds& extra) {
  if (!node.IsMap())
    return At(file, node, "extra_seeds: each entry must be {at: {...}, seeds: [...]}");
  extra.line = node.Mark().line + 1;
  bool has_at = false;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "at") {
      has_at = true;
      if (!v.IsMap() || v.size() == 0) {
        return At(file, v,
                  "extra_seeds.at: must map one or more grid keys to values (the same seeds at "
                  "every point belong in seeds)");
      }
      for (const auto& a : v) {
        if (!a.second.IsScalar()) {
          return At(file, a.second,
                    StrCat("extra_seeds.at.", a.first.as<std::string>(), ": must be one value"));
        }
        extra.at.emplace_back(a.first.as<std::string>(), a.second.Scalar());
      }
    } else if (key == "seeds") {
      if (!v.IsSequence() || v.size() == 0) {
        return At(file, v, "extra_seeds.seeds: must be a non-empty list");
      }
      for (const auto& e : v) {
        CART_ASSIGN_OR_RETURN(int64_t s, Int(file, e, "extra_seeds.seeds"));
        if (std::find(extra.seeds.begin(), extra.seeds.end(), s) != extra.seeds.end()) {
          return At(file, e, StrCat("extra_seeds.seeds: ", s, " is listed twice"));
        }
        extra.seeds.push_back(s);
      }
    } else {
      return At(file, kv.first, StrCat("extra_seeds: unknown key '", key, "' (known: at, seeds)"));
    }
  }
  if (!has_at) return At(file, node, "extra_seeds: every entry needs at: {grid key: value}");
  if (extra.seeds.empty()) return At(file, node, "extra_seeds: every entry needs seeds: [...]");
  return absl::OkStatus();
}

// What can only be checked once the whole file is read: each `at` key is a grid key and its value
// one of that key's grid values, and no extra seed is one of `seeds` (the run would be there
// twice).
absl::Status CheckExtraSeeds(const SweepSpec& spec, std::string_view file) {
  for (const ExtraSeeds& extra : spec.extra_seeds) {
    const std::string where = StrCat(file, ":", extra.line, ": extra_seeds");
    for (const auto& [key, value] : extra.at) {
      auto g = std::find_if(spec.grid.begin(), spec.grid.end(),
                            [&](const auto& kv) { return kv.first == key; });
      if (g == spec.grid.end()) {
        std::vector<std::string> keys;
        for (const auto& kv : spec.grid) keys.push_back(kv.first);
        return absl::InvalidArgumentError(StrCat(
            where, ".at: '", key,
            "' is not a grid key (grid keys: ", keys.empty() ? "none" : StrJoin(keys, ", "), ")"));
      }
      const std::string want = Canonical(key, value);
      const bool found = std::any_of(g->second.begin(), g->second.end(),
                                     [&](const auto& v) { return Canonical(key, v) == want; });
      if (!found) {
        return absl::InvalidArgumentError(StrCat(where, ".at.", key, ": ", value,
                                                 " is not one of the grid's values (",
                                                 StrJoin(g->second, ", "), ")"));
      }
    }
    for (int64_t s : extra.seeds) {
      if (std::find(spec.seeds.begin(), spec.seeds.end(), s) != spec.seeds.end()) {
        return absl::InvalidArgumentError(
            StrCat(where, ".seeds: ", s, " is already one of seeds, at every point"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SweepSpec> ParseSweepYaml(std::string_view text, std::string_view file) {
  CART_ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(text, file));
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
          if (bk == "val_data" || bk == "tasks") continue;
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
      } else if (key == "extra_seeds") {
        if (!v.IsSequence() || v.size() == 0) {
          return At(file, v, "extra_seeds: must be a non-empty list of {at: {...}, seeds: [...]}");
        }
        for (const auto& e : v) {
          ExtraSeeds extra;
          CART_RETURN_IF_ERROR(ParseExtraSeeds(file, e, extra));
          spec.extra_seeds.push_back(std::move(extra));
        }
      } else if (key == "priority") {
        CART_ASSIGN_OR_RETURN(spec.priority, Int(file, v, "priority"));
      } else if (key == "budget_device_hours") {
        const std::optional<double> hours = v.IsScalar() ? ParseDouble(v.Scalar()) : std::nullopt;
        if (!hours || !(*hours > 0) || !std::isfinite(*hours)) {
          return At(
              file, v,
              StrCat("budget_device_hours: '", Scalar(v), "' is not a number of device-hours > 0"));
        }
        spec.budget_device_hours = *hours;
      } else if (key == "max_attempts") {
        CART_ASSIGN_OR_RETURN(spec.max_attempts, Int(file, v, "max_attempts"));
        if (spec.max_attempts < 1) return At(file, v, "max_attempts: must be at least 1");
      } else if (key == "max_runs") {
        CART_ASSIGN_OR_RETURN(spec.max_runs, Int(file, v, "max_runs"));
        if (spec.max_runs < 1) return At(file, v, "max_runs: must be at least 1");
      } else if (key == "device_classes") {
        CART_RETURN_IF_ERROR(ParseDeviceClasses(file, v, spec));
      } else if (key == "variants") {
        if (!v.IsSequence() || v.size() == 0) {
          return At(file, v, "variants: must be a non-empty list of config-key mappings");
        }
        for (const auto& e : v) {
          if (!e.IsMap())
            return At(file, e, "variants: each entry must be a mapping ({} for none)");
          std::vector<std::pair<std::string, std::string>> overrides;
          for (const auto& o : e) {
            RunConfig probe;
            absl::Status s = o.second.IsScalar()
                                 ? SetKey(probe, o.first.as<std::string>(), o.second.Scalar())
                                 : absl::InvalidArgumentError(o.first.as<std::string>() +
                                                              ": must be a single value");
            if (!s.ok()) return At(file, o.second, "variants." + Message(s));
            overrides.emplace_back(o.first.as<std::string>(), o.second.Scalar());
          }
          spec.variants.push_back(std::move(overrides));
        }
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
                         "' (known: name, base, grid, variants, seeds, extra_seeds, priority, "
                         "budget_device_hours, max_attempts, max_runs, device_classes, derived)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(file, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (spec.name.empty()) return absl::InvalidArgumentError(StrCat(file, ": name: missing"));
  CART_RETURN_IF_ERROR(CheckExtraSeeds(spec, file));
  return spec;
}

std::vector<std::string> ParentSweeps(const SweepSpec& spec) {
  std::vector<std::string> out;
  for (const DerivedSpec& d : spec.derived) {
    if (!d.sweep.empty() && std::find(out.begin(), out.end(), d.sweep) == out.end()) {
      out.push_back(d.sweep);
    }
  }
  return out;
}

ParentRun AsParentRun(const ExpandedRun& run) {
  return ParentRun{0, run.index, run.name, run.config, run.params};
}

}  // namespace cart::config
