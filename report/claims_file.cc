// Claims files (report/claims.yaml and `cart report --claims FILE`) parsed into ClaimSpecs, with
// errors that name the file, the line and the field (report/claims.h).

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "common/yaml.h"
#include "report/claims.h"

namespace cart::report {
namespace {

const std::set<std::string>& Parts() {
  static const std::set<std::string> parts = {"stage1",       "stage2", "baselines", "ablations",
                                              "faithfulness", "leak",   "variable_r"};
  return parts;
}

std::string Joined(const std::set<std::string>& values) {
  std::string out;
  for (const std::string& v : values) out += (out.empty() ? "" : ", ") + v;
  return out;
}

class Parser {
 public:
  explicit Parser(const std::string& file) : file_(file) {}

  absl::StatusOr<std::vector<ClaimSpec>> Parse(const std::string& text) {
    // The loader every hand-written file goes through (common/yaml.h): syntax errors, bytes that
    // are not UTF-8 and a claim or key given twice, each at its file and line.
    CART_ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(text, file_));
    if (!root.IsMap()) return Bad(root, "the file must map claim ids to claims");
    std::vector<ClaimSpec> claims;
    for (const auto& entry : root) {
      ClaimSpec c;
      c.id = entry.first.as<std::string>();
      c.line = entry.first.Mark().line + 1;
      CART_RETURN_IF_ERROR(ParseClaim(entry.second, c));
      claims.push_back(std::move(c));
    }
    return claims;
  }

 private:
  absl::Status Bad(const YAML::Node& n, const std::string& message) const {
    return absl::InvalidArgumentError(fmt::format("{}:{}: {}", file_, n.Mark().line + 1, message));
  }

  absl::Status Keys(const YAML::Node& n, const std::string& what,
                    const std::set<std::string>& allowed) const {
    if (!n.IsMap()) return Bad(n, fmt::format("{} must be a map", what));
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      if (!allowed.count(key)) {
        return Bad(kv.first,
                   fmt::format("unknown key '{}' in {} (allowed: {})", key, what, Joined(allowed)));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Text(const YAML::Node& n, const std::string& field) const {
    if (!n.IsScalar()) return Bad(n, fmt::format("'{}' must be a single value", field));
    return n.as<std::string>();
  }

  absl::StatusOr<double> Number(const YAML::Node& n, const std::string& field) const {
    CART_ASSIGN_OR_RETURN(std::string s, Text(n, field));
    std::optional<double> v = ParseDouble(s);
    if (!v || !std::isfinite(*v))
      return Bad(n, fmt::format("'{}' must be a number, not '{}'", field, s));
    return *v;
  }

  absl::Status Part(const YAML::Node& n, std::string& out) const {
    CART_ASSIGN_OR_RETURN(out, Text(n, "part"));
    if (!Parts().count(out)) {
      return Bad(n, fmt::format("unknown part '{}' (allowed: {})", out, Joined(Parts())));
    }
    return absl::OkStatus();
  }

  absl::Status ParseClaim(const YAML::Node& n, ClaimSpec& c) const {
    CART_RETURN_IF_ERROR(
        Keys(n, "claim '" + c.id + "'", {"claim", "section", "published", "part", "tests"}));
    for (const char* field : {"claim", "section", "part", "tests"}) {
      if (!n[field]) return Bad(n, fmt::format("claim '{}' has no '{}'", c.id, field));
    }
    CART_ASSIGN_OR_RETURN(c.claim, Text(n["claim"], "claim"));
    CART_ASSIGN_OR_RETURN(c.section, Text(n["section"], "section"));
    if (n["published"]) {
      CART_ASSIGN_OR_RETURN(c.published, Text(n["published"], "published"));
    }
    CART_RETURN_IF_ERROR(Part(n["part"], c.part));
    const YAML::Node tests = n["tests"];
    if (!tests.IsSequence() || tests.size() == 0) {
      return Bad(tests, fmt::format("claim '{}': 'tests' must be a list of one or more", c.id));
    }
    for (const YAML::Node& t : tests) {
      TestSpec spec;
      CART_RETURN_IF_ERROR(ParseTest(t, spec));
      c.tests.push_back(std::move(spec));
    }
    return absl::OkStatus();
  }

  absl::Status ParseArm(const YAML::Node& n, ArmSpec& arm) const {
    CART_RETURN_IF_ERROR(Keys(n, "an arm", {"part", "match", "step"}));
    if (n["part"]) CART_RETURN_IF_ERROR(Part(n["part"], arm.part));
    if (n["step"]) {
      CART_ASSIGN_OR_RETURN(arm.step, Text(n["step"], "step"));
      if (arm.step != "@R" && !ParseInt64(arm.step)) {
        return Bad(n["step"], fmt::format("step '{}' must be a step number or @R", arm.step));
      }
    }
    if (n["match"]) {
      if (!n["match"].IsMap()) return Bad(n["match"], "'match' must map config keys to values");
      for (const auto& kv : n["match"]) {
        CART_ASSIGN_OR_RETURN(std::string v, Text(kv.second, kv.first.as<std::string>()));
        if (v[0] == '@' && v != "@min" && v != "@max" && v != "@best") {
          return Bad(kv.second, fmt::format("selector '{}' of '{}' (allowed: @min, @max, @best)", v,
                                            kv.first.as<std::string>()));
        }
        arm.match.emplace_back(kv.first.as<std::string>(), v);
      }
    }
    return absl::OkStatus();
  }

  absl::Status ParseTest(const YAML::Node& n, TestSpec& t) const {
    CART_RETURN_IF_ERROR(Keys(
        n, "a test",
        {"kind", "label", "metric", "a", "b", "direction", "scale", "reference", "reference_metric",
         "band", "margin", "per", "against", "every_run", "published_effect", "at"}));
    for (const char* field : {"kind", "label", "metric"}) {
      if (!n[field]) return Bad(n, fmt::format("a test has no '{}'", field));
    }
    static const std::map<std::string, TestSpec::Kind> kinds = {
        {"compare", TestSpec::Kind::kCompare},
        {"value", TestSpec::Kind::kValue},
        {"trend", TestSpec::Kind::kTrend},
        {"best_at", TestSpec::Kind::kBestAt}};
    CART_ASSIGN_OR_RETURN(std::string kind, Text(n["kind"], "kind"));
    if (!kinds.count(kind)) {
      return Bad(n["kind"],
                 fmt::format("unknown kind '{}' (allowed: best_at, compare, trend, value)", kind));
    }
    t.kind = kinds.at(kind);
    CART_ASSIGN_OR_RETURN(t.label, Text(n["label"], "label"));
    CART_ASSIGN_OR_RETURN(t.metric, Text(n["metric"], "metric"));
    if (n["a"]) CART_RETURN_IF_ERROR(ParseArm(n["a"], t.a));
    if (n["b"]) CART_RETURN_IF_ERROR(ParseArm(n["b"], t.b));
    if (n["direction"]) {
      CART_ASSIGN_OR_RETURN(std::string d, Text(n["direction"], "direction"));
      if (d == "less") {
        t.direction = TestSpec::Direction::kLess;
      } else if (d == "greater") {
        t.direction = TestSpec::Direction::kGreater;
      } else if (d == "within") {
        t.direction = TestSpec::Direction::kWithin;
      } else {
        return Bad(n["direction"],
                   fmt::format("unknown direction '{}' (allowed: greater, less, within)", d));
      }
    } else if (t.kind != TestSpec::Kind::kBestAt) {
      return Bad(n, fmt::format("the {} test '{}' has no 'direction'", kind, t.label));
    }
    if (n["scale"]) {
      CART_ASSIGN_OR_RETURN(std::string s, Text(n["scale"], "scale"));
      if (s != "log" && s != "linear") {
        return Bad(n["scale"], fmt::format("unknown scale '{}' (allowed: linear, log)", s));
      }
      t.log_scale = s == "log";
    }
    if (n["reference"]) {
      CART_ASSIGN_OR_RETURN(t.reference, Number(n["reference"], "reference"));
      t.has_reference = true;
    }
    if (n["reference_metric"]) {
      CART_ASSIGN_OR_RETURN(t.reference_metric, Text(n["reference_metric"], "reference_metric"));
    }
    if (n["band"]) {
      const YAML::Node b = n["band"];
      if (!b.IsSequence() || b.size() != 2) return Bad(b, "'band' must be [low, high]");
      CART_ASSIGN_OR_RETURN(t.band_low, Number(b[0], "band"));
      CART_ASSIGN_OR_RETURN(t.band_high, Number(b[1], "band"));
      if (t.band_low >= t.band_high) return Bad(b, "'band' must be [low, high] with low < high");
    }
    if (n["margin"]) {
      CART_ASSIGN_OR_RETURN(t.margin, Number(n["margin"], "margin"));
      if (t.margin <= 0) return Bad(n["margin"], "'margin' must be above 0");
    }
    if (n["per"]) {
      if (!n["per"].IsSequence()) return Bad(n["per"], "'per' must be a list of config keys");
      for (const YAML::Node& k : n["per"]) {
        CART_ASSIGN_OR_RETURN(std::string key, Text(k, "per"));
        t.per.push_back(key);
      }
    }
    if (n["against"]) {
      CART_ASSIGN_OR_RETURN(t.against, Text(n["against"], "against"));
    }
    if (n["every_run"]) {
      CART_ASSIGN_OR_RETURN(std::string e, Text(n["every_run"], "every_run"));
      const std::optional<bool> every_run = ParseBool(e);
      if (!every_run) {
        return Bad(n["every_run"], StrCat("'every_run' must be one of ", kBoolSpellings));
      }
      t.every_run = *every_run;
    }
    if (n["published_effect"]) {
      CART_ASSIGN_OR_RETURN(t.published_effect, Number(n["published_effect"], "published_effect"));
      t.has_published_effect = true;
    }
    if (n["at"]) {
      CART_ASSIGN_OR_RETURN(t.at, Text(n["at"], "at"));
    }
    return CheckKind(n, kind, t);
  }

  // What each kind needs, named when missing.
  absl::Status CheckKind(const YAML::Node& n, const std::string& kind, const TestSpec& t) const {
    const bool within = t.direction == TestSpec::Direction::kWithin;
    auto need = [&](bool ok, const std::string& what) {
      return ok ? absl::OkStatus()
                : Bad(n, fmt::format("the {} test '{}' needs {}", kind, t.label, what));
    };
    switch (t.kind) {
      case TestSpec::Kind::kCompare:
        CART_RETURN_IF_ERROR(need(n["a"] && n["b"], "arms 'a' and 'b'"));
        return need(!within || t.margin > 0, "a 'margin' with direction within");
      case TestSpec::Kind::kValue:
        if (within) return need(t.band_low < t.band_high, "a 'band' with direction within");
        return need(t.has_reference != !t.reference_metric.empty(),
                    "one of 'reference' and 'reference_metric'");
      case TestSpec::Kind::kTrend:
        CART_RETURN_IF_ERROR(need(!t.against.empty(), "'against' (a config key)"));
        return need(!within, "direction less or greater");
      case TestSpec::Kind::kBestAt:
        return need(t.at == "@R" || ParseInt64(t.at).has_value(), "'at' (@R or a step)");
    }
    return absl::OkStatus();
  }

  std::string file_;
};

}  // namespace

// Generated from report/claims.yaml (report/CMakeLists.txt).
const char* ClaimsYaml();

absl::StatusOr<std::vector<ClaimSpec>> ParseClaims(const std::string& text,
                                                   const std::string& file_name) {
  return Parser(file_name).Parse(text);
}

absl::StatusOr<std::vector<ClaimSpec>> DefaultClaims() {
  static const absl::StatusOr<std::vector<ClaimSpec>>* claims =
      new absl::StatusOr<std::vector<ClaimSpec>>(ParseClaims(ClaimsYaml(), "report/claims.yaml"));
  return *claims;
}

}  // namespace cart::report
