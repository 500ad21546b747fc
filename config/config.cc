// Run configs (config/: what a run is, its sweep files and their expansion, the learning-rate
// schedule and the parameter, FLOP and memory accounting; no LibTorch): keys, parsing, checks
// and the YAML a run's config is written as.

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

namespace cart::model {
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

struct KeyDef {
  std::string name;
  std::function<absl::Status(RunConfig&, std::string_view)> set;
  std::function<std::string(const RunConfig&)> get;
};

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

absl::Status Range(bool ok, std::string_view key, int64_t value, std::string_view allowed) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(key, ": ", value, " ", allowed));
}

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

absl::Status Validate(const RunConfig& c) {
  const ModelConfig& m = c.model;
  const TrainConfig& t = c.train;
  CART_RETURN_IF_ERROR(Range(m.vocab >= 2 && m.vocab <= (int64_t{1} << 32), "vocab", m.vocab,
                             "is outside 2..4294967296"));
  CART_RETURN_IF_ERROR(
      Range(m.d > 0 && m.d % 64 == 0, "d", m.d, "is not a positive multiple of 64 (head dim 64)"));
  CART_RETURN_IF_ERROR(Range(m.d <= 65'536, "d", m.d, "is above 65536"));
  if (m.model == ModelKind::kCart) {
    CART_RETURN_IF_ERROR(Range(m.P >= 1 && m.P <= 256, "P", m.P, "is outside 1..256"));
    CART_RETURN_IF_ERROR(Range(m.R >= 1 && m.R <= 16, "R", m.R,
                               "is outside 1..16 (the loop-index table has 16 rows)"));
    CART_RETURN_IF_ERROR(Range(m.R_infer >= 0 && m.R_infer <= 16, "R_infer", m.R_infer,
                               "is outside 1..16 (0 means the training R)"));
    if (m.core_attn == CoreAttn::kSelf && m.kv == KvMode::kRecompute) {
      return absl::InvalidArgumentError(
          "kv: recompute needs core_attn: cross (a self-attention core has no anchor to "
          "recompute)");
    }
    if (m.core_attn == CoreAttn::kSelf && !m.cross_causal) {
      return absl::InvalidArgumentError(
          "cross_causal: off needs core_attn: cross (a self-attention core is always causal)");
    }
    if (m.core == CoreSharing::kUnshared && m.R_infer != 0 && m.R_infer != m.R) {
      return absl::InvalidArgumentError(
          "R_infer: an unshared core has exactly R blocks, so R_infer must equal R");
    }
  } else {
    CART_RETURN_IF_ERROR(
        Range(m.layers >= 1 && m.layers <= 1024, "layers", m.layers, "is outside 1..1024"));
  }
  // Upper bounds far beyond any real run keep every count the accounting multiplies (tokens,
  // parameters, bytes) inside 64 bits.
  constexpr int64_t kMaxSteps = 1'000'000'000;
  CART_RETURN_IF_ERROR(
      Range(t.steps >= 1 && t.steps <= kMaxSteps, "steps", t.steps, "is outside 1..1000000000"));
  CART_RETURN_IF_ERROR(Range(t.seq_len >= 1 && t.seq_len <= 1'048'576, "seq_len", t.seq_len,
                             "is outside 1..1048576"));
  CART_RETURN_IF_ERROR(
      Range(t.batch >= 1 && t.batch <= 1'048'576, "batch", t.batch, "is outside 1..1048576"));
  CART_RETURN_IF_ERROR(
      Range(t.accum >= 1 && t.accum <= 65'536, "accum", t.accum, "is outside 1..65536"));
  const int64_t step_tokens = t.batch * t.accum * t.seq_len;  // < 2^56 within the bounds above
  if (step_tokens > (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(StrCat("batch × accum × seq_len: ", step_tokens,
                                             " tokens per optimizer step is above 4294967296"));
  }
  if (!(t.lr > 0 && t.lr <= 10)) return absl::InvalidArgumentError("lr: must be in (0, 10]");
  if (!(t.lr_min >= 0 && t.lr_min <= t.lr)) {
    return absl::InvalidArgumentError("lr_min: must be between 0 and lr");
  }
  CART_RETURN_IF_ERROR(Range(t.warmup >= 0 && t.warmup <= kMaxSteps, "warmup", t.warmup,
                             "is outside 0..1000000000"));
  CART_RETURN_IF_ERROR(Range(t.lr_decay_steps >= 0 && t.lr_decay_steps <= t.steps, "lr_decay_steps",
                             t.lr_decay_steps,
                             "is outside 0..steps (0: the cosine decays over every step)"));
  if (!(t.weight_decay >= 0 && t.weight_decay <= 100)) {
    return absl::InvalidArgumentError("weight_decay: must be in [0, 100]");
  }
  if (!(t.clip >= 0 && std::isfinite(t.clip))) {
    return absl::InvalidArgumentError("clip: must be a finite number >= 0 (0 disables)");
  }
  CART_RETURN_IF_ERROR(Range(t.log_every >= 1 && t.log_every <= kMaxSteps, "log_every", t.log_every,
                             "is outside 1..1000000000"));
  CART_RETURN_IF_ERROR(Range(t.eval_every >= 0 && t.eval_every <= kMaxSteps, "eval_every",
                             t.eval_every, "is outside 0..1000000000 (0 disables)"));
  CART_RETURN_IF_ERROR(Range(t.checkpoint_every >= 0 && t.checkpoint_every <= kMaxSteps,
                             "checkpoint_every", t.checkpoint_every,
                             "is outside 0..1000000000 (0: final checkpoint only)"));
  CART_RETURN_IF_ERROR(Range(t.keep_checkpoints >= 1 && t.keep_checkpoints <= 10'000,
                             "keep_checkpoints", t.keep_checkpoints, "is outside 1..10000"));
  CART_RETURN_IF_ERROR(Range(t.threads >= 0 && t.threads <= 1024, "threads", t.threads,
                             "is outside 0..1024 (0: all cores)"));
  CART_RETURN_IF_ERROR(Range(t.eval_sequences >= 1 && t.eval_sequences <= 1'000'000,
                             "eval_sequences", t.eval_sequences, "is outside 1..1000000"));
  // Set and task names become parts of metric names ("val_ppl/NAME", "task_acc/NAME").
  auto name_ok = [](const std::string& n) {
    return !n.empty() && n.size() <= 64 &&
           n.find_first_not_of(
               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") ==
               std::string::npos;
  };
  for (const auto& [group, names] :
       {std::pair<const char*, const std::map<std::string, std::string>*>{"val_data",
                                                                          &c.data.val_data},
        {"tasks", &c.data.tasks}}) {
    for (const auto& [name, value] : *names) {
      if (!name_ok(name)) {
        return absl::InvalidArgumentError(
            StrCat(group, ": name '", name,
                   "' must be 1..64 letters, digits, '_', '.' or '-' (it becomes part of metric "
                   "names)"));
      }
    }
  }
  // Paths are short; a long string is copied into every run's stored config and params, so one
  // careless 20 KB path over a big grid became gigabytes of database.
  constexpr size_t kMaxPath = 4096;  // Linux's PATH_MAX
  constexpr size_t kMaxSets = 64;
  if (c.data.train_data.size() > kMaxPath) {
    return absl::InvalidArgumentError(
        StrCat("train_data: ", c.data.train_data.size(), " bytes; a path is at most ", kMaxPath));
  }
  for (const auto& [group, names] :
       {std::pair<const char*, const std::map<std::string, std::string>*>{"val_data",
                                                                          &c.data.val_data},
        {"tasks", &c.data.tasks}}) {
    if (names->size() > kMaxSets) {
      return absl::InvalidArgumentError(
          StrCat(group, ": ", names->size(), " entries; at most ", kMaxSets));
    }
    for (const auto& [name, value] : *names) {
      if (value.size() > kMaxPath + 64) {  // tasks: KIND=FILE,limit=N around the path
        return absl::InvalidArgumentError(
            StrCat(group, ".", name, ": ", value.size(), " bytes; a path is at most ", kMaxPath));
      }
    }
  }
  std::set<std::string> harness_tasks;
  for (const std::string& name : LmEvalTasks(c.data)) {
    if (!name_ok(name)) {
      return absl::InvalidArgumentError(
          StrCat("lm_eval: task name '", name,
                 "' must be 1..64 letters, digits, '_', '.' or '-', names separated by commas"));
    }
    if (!harness_tasks.insert(name).second) {
      return absl::InvalidArgumentError(StrCat("lm_eval: task '", name, "' named twice"));
    }
  }
  if (harness_tasks.size() > kMaxSets) {
    return absl::InvalidArgumentError(
        StrCat("lm_eval: ", harness_tasks.size(), " tasks; at most ", kMaxSets));
  }
  for (const auto& [name, spec] : c.data.tasks) {
    const size_t eq = spec.find('=');
    const std::string kind = spec.substr(0, eq == std::string::npos ? 0 : eq);
    if (eq == std::string::npos || TaskSpecFile(spec).empty() ||
        (kind != "hellaswag" && kind != "piqa" && kind != "arc" && kind != "lambada")) {
      return absl::InvalidArgumentError(
          StrCat("tasks.", name, ": '", spec,
                 "' is not KIND=FILE[,limit=N] with KIND one of hellaswag, piqa, arc, lambada"));
    }
  }
  return absl::OkStatus();
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

std::string ToYaml(const RunConfig& config) {
  // Written by hand rather than with YAML::Emitter: a sweep writes one config per run, and the
  // emitter's per-scalar style checks made it most of a 10,000-run submit. The text is the one the
  // emitter wrote (plain scalars where they read back as themselves, double quotes otherwise).
  std::string out;
  out.reserve(1024);
  for (const auto& k : Keys()) {
    const std::string value = k.get(config);
    // Written only when set, so that configs from before the key existed read back unchanged.
    if (k.name == "lm_eval" && value.empty()) continue;
    out += k.name;
    out += ": ";
    out += YamlScalar(value);
    out += '\n';
  }
  auto block = [&out](const char* name, const std::map<std::string, std::string>& entries) {
    out += name;
    out += ":\n";
    if (entries.empty()) out += "  {}\n";
    for (const auto& [key, value] : entries) {
      out += "  ";
      out += YamlScalar(key);
      out += ": ";
      out += YamlScalar(value);
      out += '\n';
    }
  };
  block("val_data", config.data.val_data);
  if (!config.data.tasks.empty()) block("tasks", config.data.tasks);
  return out;
}

std::string YamlScalar(std::string_view text) {
  static constexpr std::string_view kIndicators = "-?:,[]{}#&*!|>'\"%@`";
  bool plain = !text.empty() && text.front() != ' ' && text.back() != ' ' && text.back() != ':' &&
               text != "~" && text != "null" && text != "Null" && text != "NULL" &&
               text.find(": ") == std::string_view::npos &&
               text.find(" #") == std::string_view::npos;
  if (plain && kIndicators.find(text.front()) != std::string_view::npos) {
    // A leading '-' is plain when a character other than a space follows ("-1", "-x").
    plain = text.front() == '-' && text.size() > 1 && text[1] != ' ';
  }
  for (size_t i = 0; plain && i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    plain = c >= 0x20 && c != 0x7f;  // no control characters; UTF-8 bytes are fine
  }
  if (plain) return std::string(text);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

std::string_view ToString(ModelKind v) { return NameOf(kModelKinds, v); }
std::string_view ToString(KvMode v) { return NameOf(kKvModes, v); }
std::string_view ToString(CoreSharing v) { return NameOf(kCoreSharings, v); }
std::string_view ToString(CoreAttn v) { return NameOf(kCoreAttns, v); }
std::string_view ToString(GateMode v) { return NameOf(kGateModes, v); }
std::string_view ToString(WeightDecayScope v) { return NameOf(kScopes, v); }
std::string_view ToString(DType v) { return NameOf(kDTypes, v); }

}  // namespace cart::model
