// Run configs (config/: what a run is, its sweep files and their expansion, the learning-rate
// schedule and the parameter, FLOP and memory accounting; no LibTorch): the keys, reading and
// setting them. Their checks are in validate.cc, the YAML a config is written as in
// config_yaml.cc.

#include "config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "common/status.h"
#include "common/strings.h"
#include "common/yaml.h"
#include "config/internal/keys.h"

namespace cart::config {

using internal::FindKey;
using internal::KeyDef;
using internal::Keys;

namespace {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

constexpr std::array<EnumName<ModelKind>, 2> kModelKinds{
    {{ModelKind::kCart, "cart"}, {ModelKind::kDense, "dense"}}};
constexpr std::array<EnumName<KvMode>, 2> kKvModes{
    {{KvMode::kFrozen, "frozen"}, {KvMode::kRecompute, "recompute"}}};
constexpr std::array<EnumName<CoreSharing>, 2> kCoreSharings{
    {{CoreSharing::kShared, "shared"}, {CoreSharing::kUnshared, "unshared"}}};
constexpr std::array<EnumName<CoreAttn>, 2> kCoreAttns{
    {{CoreAttn::kCross, "cross"}, {CoreAttn::kSelf, "self"}}};
constexpr std::array<EnumName<GateMode>, 2> kGateModes{
    {{GateMode::kPaper, "paper"}, {GateMode::kDelta, "delta"}}};
constexpr std::array<EnumName<WeightDecayScope>, 2> kScopes{
    {{WeightDecayScope::kAll, "all"}, {WeightDecayScope::kMatrices, "matrices"}}};
constexpr std::array<EnumName<DType>, 3> kDTypes{
    {{DType::kAuto, "auto"}, {DType::kFloat32, "fp32"}, {DType::kBFloat16, "bf16"}}};

template <typename E, size_t N>
std::string_view NameOf(const std::array<EnumName<E>, N>& table, E v) {
  for (const auto& e : table) {
    if (e.value == v) return e.name;
  }
  return "?";
}

template <typename E, size_t N>
absl::Status ParseEnum(const std::array<EnumName<E>, N>& table, std::string_view key,
                       std::string_view text, E& out) {
  std::vector<std::string_view> names;
  for (const auto& e : table) {
    if (e.name == text) {
      out = e.value;
      return absl::OkStatus();
    }
    names.push_back(e.name);
  }
  return absl::InvalidArgumentError(
      StrCat(key, ": '", text, "' is not one of ", StrJoin(names, ", ")));
}

absl::Status ParseInt(std::string_view key, std::string_view text, int64_t& out) {
  std::optional<int64_t> v = ParseInt64(text);
  if (!v) return absl::InvalidArgumentError(StrCat(key, ": '", text, "' is not an integer"));
  out = *v;
  return absl::OkStatus();
}

absl::Status ParseInt(std::string_view key, std::string_view text, int& out) {
  int64_t v = 0;
  CART_RETURN_IF_ERROR(ParseInt(key, text, v));
  if (v < INT32_MIN || v > INT32_MAX) {
    return absl::InvalidArgumentError(StrCat(key, ": '", text, "' is out of range"));
  }
  out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ParseDouble(std::string_view key, std::string_view text, double& out) {
  std::optional<double> v = cart::ParseDouble(text);
  if (!v) return absl::InvalidArgumentError(StrCat(key, ": '", text, "' is not a number"));
  out = *v;
  return absl::OkStatus();
}

// Switches accept what every file accepts (cart::ParseBool: on/off, true/false, yes/no).
absl::Status ParseBool(std::string_view key, std::string_view text, bool& out) {
  const std::optional<bool> v = cart::ParseBool(text);
  if (!v) {
    return absl::InvalidArgumentError(
        StrCat(key, ": '", text, "' is not one of on, off (or true, false, yes, no)"));
  }
  out = *v;
  return absl::OkStatus();
}

// The shortest text that reads back to the same double, as %g writes it ("0.0003", "3.05e+04"):
// %g at the number of significant digits of the shortest round trip, which std::to_chars finds.
std::string FormatDouble(double v) {
  char shortest[64];
  const std::to_chars_result r =
      std::to_chars(shortest, shortest + sizeof(shortest), v, std::chars_format::scientific);
  int digits = 0;
  for (const char* c = shortest; c < r.ptr && *c != 'e'; ++c) digits += *c >= '0' && *c <= '9';
  char text[64];
  std::snprintf(text, sizeof(text), "%.*g", std::max(digits, 1), v);
  return text;
}

}  // namespace

namespace internal {

const std::vector<KeyDef>& Keys() {
  static const auto* keys = [] {
    auto* k = new std::vector<KeyDef>;
    auto int_key = [&](std::string name, auto field) {
      k->push_back(
          {name,
           [name, field](RunConfig& c, std::string_view t) { return ParseInt(name, t, field(c)); },
           [field](const RunConfig& c) {
             return std::to_string(field(const_cast<RunConfig&>(c)));
           }});
    };
    auto dbl_key = [&](std::string name, auto field) {
      k->push_back(
          {name,
           [name, field](RunConfig& c, std::string_view t) {
             return ParseDouble(name, t, field(c));
           },
           [field](const RunConfig& c) { return FormatDouble(field(const_cast<RunConfig&>(c))); }});
    };
    auto bool_key = [&](std::string name, auto field) {
      k->push_back(
          {name,
           [name, field](RunConfig& c, std::string_view t) { return ParseBool(name, t, field(c)); },
           [field](const RunConfig& c) -> std::string {
             return field(const_cast<RunConfig&>(c)) ? "on" : "off";
           }});
    };
    auto enum_key = [&](std::string name, const auto& table, auto field) {
      k->push_back({name,
                    [name, &table, field](RunConfig& c, std::string_view t) {
                      return ParseEnum(table, name, t, field(c));
                    },
                    [&table, field](const RunConfig& c) {
                      return std::string(NameOf(table, field(const_cast<RunConfig&>(c))));
                    }});
    };
    // Cross-checked against docs/model.md §9; the order here is the order of ToYaml.
    enum_key("model", kModelKinds, [](RunConfig& c) -> ModelKind& { return c.model.model; });
    int_key("vocab", [](RunConfig& c) -> int64_t& { return c.model.vocab; });
    int_key("d", [](RunConfig& c) -> int64_t& { return c.model.d; });
    int_key("P", [](RunConfig& c) -> int& { return c.model.P; });
    int_key("R", [](RunConfig& c) -> int& { return c.model.R; });
    int_key("R_infer", [](RunConfig& c) -> int& { return c.model.R_infer; });
    int_key("layers", [](RunConfig& c) -> int& { return c.model.layers; });
    enum_key("kv", kKvModes, [](RunConfig& c) -> KvMode& { return c.model.kv; });
    enum_key("core", kCoreSharings, [](RunConfig& c) -> CoreSharing& { return c.model.core; });
    enum_key("core_attn", kCoreAttns, [](RunConfig& c) -> CoreAttn& { return c.model.core_attn; });
    bool_key("hyper", [](RunConfig& c) -> bool& { return c.model.hyper; });
    bool_key("lti", [](RunConfig& c) -> bool& { return c.model.lti; });
    bool_key("lie", [](RunConfig& c) -> bool& { return c.model.lie; });
    bool_key("cross_causal", [](RunConfig& c) -> bool& { return c.model.cross_causal; });
    enum_key("gate", kGateModes, [](RunConfig& c) -> GateMode& { return c.model.gate; });
    int_key("steps", [](RunConfig& c) -> int64_t& { return c.train.steps; });
    int_key("seq_len", [](RunConfig& c) -> int64_t& { return c.train.seq_len; });
    int_key("batch", [](RunConfig& c) -> int64_t& { return c.train.batch; });
    int_key("accum", [](RunConfig& c) -> int64_t& { return c.train.accum; });
    dbl_key("lr", [](RunConfig& c) -> double& { return c.train.lr; });
    dbl_key("lr_min", [](RunConfig& c) -> double& { return c.train.lr_min; });
    int_key("warmup", [](RunConfig& c) -> int64_t& { return c.train.warmup; });
    int_key("lr_decay_steps", [](RunConfig& c) -> int64_t& { return c.train.lr_decay_steps; });
    dbl_key("weight_decay", [](RunConfig& c) -> double& { return c.train.weight_decay; });
    enum_key("weight_decay_scope", kScopes,
             [](RunConfig& c) -> WeightDecayScope& { return c.train.weight_decay_scope; });
    dbl_key("clip", [](RunConfig& c) -> double& { return c.train.clip; });
    int_key("seed", [](RunConfig& c) -> int64_t& { return c.train.seed; });
    enum_key("dtype", kDTypes, [](RunConfig& c) -> DType& { return c.train.dtype; });
    int_key("log_every", [](RunConfig& c) -> int64_t& { return c.train.log_every; });
    int_key("eval_every", [](RunConfig& c) -> int64_t& { return c.train.eval_every; });
    int_key("checkpoint_every", [](RunConfig& c) -> int64_t& { return c.train.checkpoint_every; });
    int_key("keep_checkpoints", [](RunConfig& c) -> int64_t& { return c.train.keep_checkpoints; });
    int_key("threads", [](RunConfig& c) -> int64_t& { return c.train.threads; });
    int_key("eval_sequences", [](RunConfig& c) -> int64_t& { return c.train.eval_sequences; });
    bool_key("eval_bos", [](RunConfig& c) -> bool& { return c.train.eval_bos; });
    k->push_back({"train_data",
                  [](RunConfig& c, std::string_view t) {
                    c.data.train_data = std::string(t);
                    return absl::OkStatus();
                  },
                  [](const RunConfig& c) { return c.data.train_data; }});
    k->push_back({"lm_eval",
                  [](RunConfig& c, std::string_view t) {
                    c.data.lm_eval = std::string(t);
                    return absl::OkStatus();
                  },
                  [](const RunConfig& c) { return c.data.lm_eval; }});
    return k;
  }();
  return *keys;
}

const KeyDef* FindKey(std::string_view name) {
  for (const auto& k : Keys()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::string Canonical(const std::string& key, const std::string& value) {
  RunConfig probe;
  if (!SetKey(probe, key, value).ok()) return value;
  absl::StatusOr<std::string> stored = GetKey(probe, key);
  return stored.ok() ? *stored : value;
}

}  // namespace internal

namespace {

absl::Status Prefix(std::string_view source, const YAML::Mark& mark, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), StrCat(source, ":", mark.line + 1, ": ", Message(s)));
}

// A value a config holds as text (a path, a task spec, a name) must be UTF-8: the run-config
// fuzzer found inputs where yaml-cpp hands back other bytes, which could be neither stored as
// YAML nor read back. (Control characters are fine: ToYaml escapes them.)
absl::Status CheckText(const std::string& key, const std::string& text) {
  if (std::optional<size_t> bad = FirstInvalidUtf8(text)) {
    return absl::InvalidArgumentError(
        StrCat(key, ": the value is not UTF-8 (at byte ", *bad + 1, " of the value)"));
  }
  return absl::OkStatus();
}

absl::Status ApplyNode(RunConfig& config, const YAML::Node& root, std::string_view source,
                       bool allow_groups) {
  if (!root.IsMap()) {
    return Prefix(source, root.Mark(),
                  absl::InvalidArgumentError("a run config must be a mapping of keys to values"));
  }
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& value = kv.second;
    if (allow_groups && (key == "model" && value.IsMap())) {
      CART_RETURN_IF_ERROR(ApplyNode(config, value, source, false));
      continue;
    }
    if (allow_groups && (key == "train" || key == "data")) {
      CART_RETURN_IF_ERROR(ApplyNode(config, value, source, false));
      continue;
    }
    if (key == "val_data" || key == "tasks") {
      const bool tasks = key == "tasks";
      if (!value.IsMap()) {
        return Prefix(
            source, value.Mark(),
            absl::InvalidArgumentError(tasks ? "tasks: must map task names to KIND=FILE specs"
                                             : "val_data: must map set names to token files"));
      }
      std::map<std::string, std::string>& out = tasks ? config.data.tasks : config.data.val_data;
      out.clear();
      for (const auto& v : value) {
        if (!v.second.IsScalar()) {
          return Prefix(source, v.second.Mark(),
                        absl::InvalidArgumentError(
                            StrCat(key, ".", v.first.as<std::string>(),
                                   tasks ? ": must be KIND=FILE" : ": must be a file path")));
        }
        const std::string name = v.first.as<std::string>();
        CART_RETURN_IF_ERROR(
            Prefix(source, v.second.Mark(), CheckText(StrCat(key, ".", name), v.second.Scalar())));
        out[name] = v.second.as<std::string>();
      }
      continue;
    }
    const KeyDef* def = FindKey(key);
    if (def == nullptr) {
      return Prefix(source, kv.first.Mark(),
                    absl::InvalidArgumentError(
                        StrCat("unknown key '", key, "' (known keys: ", StrJoin(ScalarKeys(), ", "),
                               ", val_data, tasks)")));
    }
    if (!value.IsScalar()) {
      return Prefix(source, value.Mark(),
                    absl::InvalidArgumentError(StrCat(key, ": must be a single value")));
    }
    CART_RETURN_IF_ERROR(Prefix(source, value.Mark(), CheckText(key, value.Scalar())));
    CART_RETURN_IF_ERROR(Prefix(source, value.Mark(), def->set(config, value.Scalar())));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ModelConfig::mlp_hidden() const {
  const int64_t base = (8 * d) / 3;
  return (base + 255) / 256 * 256;
}

std::vector<std::string> LmEvalTasks(const DataConfig& data) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= data.lm_eval.size() && !data.lm_eval.empty()) {
    size_t comma = data.lm_eval.find(',', start);
    if (comma == std::string::npos) comma = data.lm_eval.size();
    std::string name = data.lm_eval.substr(start, comma - start);
    const size_t first = name.find_first_not_of(' ');
    const size_t last = name.find_last_not_of(' ');
    names.push_back(first == std::string::npos ? "" : name.substr(first, last - first + 1));
    start = comma + 1;
  }
  return names;
}

std::string TaskSpecFile(std::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos) return "";
  const std::string_view rest = spec.substr(eq + 1);
  return std::string(rest.substr(0, rest.find(',')));
}

std::vector<DataFile> DataFiles(const RunConfig& config, bool with_train) {
  std::vector<DataFile> files;
  if (with_train && !config.data.train_data.empty()) {
    files.push_back({"train", config.data.train_data, true});
  }
  for (const auto& [name, path] : config.data.val_data)
    files.push_back({"val:" + name, path, true});
  for (const auto& [name, spec] : config.data.tasks) {
    files.push_back({"task:" + name, TaskSpecFile(spec), false});
  }
  return files;
}

absl::Status SetKey(RunConfig& config, std::string_view key, std::string_view value) {
  const KeyDef* def = FindKey(key);
  if (def == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("unknown key '", key, "' (known keys: ", StrJoin(ScalarKeys(), ", "), ")"));
  }
  return def->set(config, value);
}

absl::Status ApplyOverrides(RunConfig& config, const std::vector<std::string>& overrides) {
  for (const std::string& kv : overrides) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(StrCat("--set ", kv, ": expected key=value"));
    }
    if (absl::Status s = SetKey(config, kv.substr(0, eq), kv.substr(eq + 1)); !s.ok()) {
      return absl::InvalidArgumentError(StrCat("--set ", kv, ": ", Message(s)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GetKey(const RunConfig& config, std::string_view key) {
  const KeyDef* def = FindKey(key);
  if (def == nullptr) return absl::NotFoundError(StrCat("unknown key '", key, "'"));
  return def->get(config);
}

std::map<std::string, std::string> ParamsOf(const RunConfig& config) {
  std::map<std::string, std::string> params;
  for (const auto& k : Keys()) {
    std::string value = k.get(config);
    if (k.name == "lm_eval" && value.empty()) continue;
    params[k.name] = std::move(value);
  }
  return params;
}

std::map<std::string, std::string> RunParams(const RunConfig& config, std::string_view derived) {
  std::map<std::string, std::string> params = ParamsOf(config);
  if (!derived.empty()) params[kDerivedParam] = std::string(derived);
  return params;
}

std::string DerivedName(const std::map<std::string, std::string>& params) {
  auto it = params.find(kDerivedParam);
  return it == params.end() ? std::string() : it->second;
}

const std::vector<std::string>& ScalarKeys() {
  static const auto* names = [] {
    auto* n = new std::vector<std::string>;
    for (const auto& k : Keys()) n->push_back(k.name);
    return n;
  }();
  return *names;
}

absl::Status ApplyYaml(RunConfig& config, std::string_view text, std::string_view source) {
  CART_ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(text, source));
  if (root.IsNull()) return absl::OkStatus();
  try {
    return ApplyNode(config, root, source, true);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
}

absl::StatusOr<RunConfig> ParseRunConfigYaml(std::string_view text, std::string_view source) {
  RunConfig config;
  CART_RETURN_IF_ERROR(ApplyYaml(config, text, source));
  absl::Status s = Validate(config);
  if (!s.ok()) return absl::InvalidArgumentError(StrCat(source, ": ", Message(s)));
  return config;
}

absl::StatusOr<RunConfig> LoadRunConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat(path, ": cannot open run config"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseRunConfigYaml(ss.str(), path);
}

std::string_view ToString(ModelKind v) { return NameOf(kModelKinds, v); }
std::string_view ToString(KvMode v) { return NameOf(kKvModes, v); }
std::string_view ToString(CoreSharing v) { return NameOf(kCoreSharings, v); }
std::string_view ToString(CoreAttn v) { return NameOf(kCoreAttns, v); }
std::string_view ToString(GateMode v) { return NameOf(kGateModes, v); }
std::string_view ToString(WeightDecayScope v) { return NameOf(kScopes, v); }
std::string_view ToString(DType v) { return NameOf(kDTypes, v); }

}  // namespace cart::config
