#pragma once

// Run configuration: the model, the training recipe and the data of one run, as plain structs with
// documented defaults (docs/model.md §9 is the key vocabulary). No Torch here: cartd, the CLI's
// dry run and the trainer all use this same code.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart::config {

enum class ModelKind { kCart, kDense };
enum class KvMode { kFrozen, kRecompute };        // §4 `kv`
enum class CoreSharing { kShared, kUnshared };    // §4 `core`
enum class CoreAttn { kCross, kSelf };            // §4 `core_attn`
enum class GateMode { kPaper, kDelta };           // faithfulness note 1
enum class WeightDecayScope { kAll, kMatrices };  // faithfulness note 2
enum class DType { kAuto, kFloat32, kBFloat16 };  // kAuto: bf16 autocast on CUDA, fp32 on CPU

// The architecture. Fields that only one model kind reads say so.
struct ModelConfig {
  ModelKind model = ModelKind::kCart;
  int64_t vocab = 32000;  // tokens; ids are 0..vocab-1
  int64_t d = 512;        // width; a positive multiple of 64 (head dim is fixed at 64)
  int P = 6;              // CART: prelude layers, >= 1
  int R = 6;              // CART: core loops at training, 1..16
  int R_infer = 0;        // CART: loops at evaluation, 1..16; 0 means "same as R"
  int layers = 12;        // dense: number of layers, >= 1
  KvMode kv = KvMode::kFrozen;
  CoreSharing core = CoreSharing::kShared;
  CoreAttn core_attn = CoreAttn::kCross;
  bool hyper = true;         // hyper-connection ring over the last 3 states
  bool lti = true;           // LTI gate sigmoid(a)
  bool lie = true;           // loop-index embedding
  bool cross_causal = true;  // false reproduces the paper's leak
  GateMode gate = GateMode::kPaper;

  int64_t n_heads() const { return d / 64; }
  int64_t mlp_hidden() const;  // ceil(floor(8d/3) / 256) * 256
  int effective_R_infer() const { return R_infer > 0 ? R_infer : R; }
};

// The training recipe (docs/model.md §6 defaults).
struct TrainConfig {
  int64_t steps = 3000;   // optimizer steps
  int64_t seq_len = 512;  // T, tokens per window
  int64_t batch = 8;      // sequences per micro-batch
  int64_t accum = 4;      // micro-batches per optimizer step
  double lr = 3e-4;       // peak learning rate
  double lr_min = 3e-5;   // learning rate at the last step (cosine floor)
  int64_t warmup = 100;   // linear warm-up steps
  // Steps the cosine decays over; past them the rate holds at lr_min. 0: all steps. An extension
  // with `--schedule hold` sets it to the steps trained before (config/schedule.h).
  int64_t lr_decay_steps = 0;
  double weight_decay = 0.1;  // AdamW decoupled weight decay
  WeightDecayScope weight_decay_scope = WeightDecayScope::kAll;
  double clip = 1.0;  // global grad-norm clip; 0 disables
  int64_t seed = 42;  // seeds init, data order is fixed
  DType dtype = DType::kAuto;
  int64_t log_every = 10;          // steps between metric records
  int64_t eval_every = 500;        // steps between validation passes; 0 disables
  int64_t checkpoint_every = 500;  // steps between checkpoints; 0: only the final one
  int64_t keep_checkpoints = 3;    // newest checkpoints kept on disk (the final one always)
  int64_t threads = 0;             // intra-op CPU threads; 0 = number of cores
  int64_t eval_sequences = 50;     // validation: first N sequences of each set, batch 1
  // Zero-shot tasks (DataConfig::tasks): start each context with the tokenizer's BOS. Off by
  // default, as lm-evaluation-harness scores causal models; stored with every run that uses it.
  bool eval_bos = false;
};

// Where the tokens come from. Paths are token files written by `cart data prepare`.
struct DataConfig {
  std::string train_data;                       // token file (.bin with its .json metadata)
  std::map<std::string, std::string> val_data;  // validation set name -> token file
  // Zero-shot tasks an eval job scores at each of its loop counts: name -> "KIND=FILE" with KIND
  // one of hellaswag, piqa, arc, lambada, optionally ",limit=N" (the syntax of `cart eval
  // --task`). Set names here and in val_data are metric name parts: letters, digits, '_', '.',
  // '-', 1..64 characters.
  std::map<std::string, std::string> tasks;
  // Tasks an eval job scores with lm-evaluation-harness instead of CART Lab's scorer
  // (docs/huggingface.md "Harness tasks in sweeps"): task names, comma-separated. A name that is
  // also a key of `tasks` is that local file, scored by the harness's own definition of its kind;
  // any other is a task of the harness's registry with the data it names. Metrics are named as
  // cart eval's (task_acc/<name>, ...). Empty: none.
  std::string lm_eval;
};

// The names in DataConfig::lm_eval, in the order given.
std::vector<std::string> LmEvalTasks(const DataConfig& data);

struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  DataConfig data;
};

// One data file a run reads, by its role in the run: "train" (train_data), "val:NAME"
// (val_data), "task:NAME" (a zero-shot task's file). Data lineage (docs/architecture.md) records
// the identity of each and checks it before every attempt.
struct DataFile {
  std::string role;
  std::string path;        // as the config names it
  bool token_file = true;  // train and val files are token files (.bin + .json); task files not
};
// The files `config` names: train first, then val sets and tasks by name. An eval job does not
// read its train_data's tokens; `with_train` false leaves it out.
std::vector<DataFile> DataFiles(const RunConfig& config, bool with_train = true);
// The file of a task spec "KIND=FILE[,option...]" (the part after the first '=', up to the first
// ','); empty when there is no '='.
std::string TaskSpecFile(std::string_view spec);

// Checks every constraint above and the combinations of switches. The error names the key, the
// value and what is allowed, e.g. "d: 100 is not a positive multiple of 64".
absl::Status Validate(const RunConfig& config);

// Sets one key of the §9 vocabulary from its text form ("d" -> "256", "kv" -> "recompute").
// InvalidArgument names the key and lists the allowed values or the unknown key.
absl::Status SetKey(RunConfig& config, std::string_view key, std::string_view value);
// Applies command-line overrides "key=value" in order with SetKey. InvalidArgument naming the
// override when it has no '=' or SetKey refuses it.
absl::Status ApplyOverrides(RunConfig& config, const std::vector<std::string>& overrides);
// The text form of one key's value; NotFound for an unknown key.
absl::StatusOr<std::string> GetKey(const RunConfig& config, std::string_view key);
// Every scalar key, in a fixed order (model keys, then training keys, then train_data).
const std::vector<std::string>& ScalarKeys();
// A run's parameters as the database keeps them: every scalar key's value, except `lm_eval`
// when it is empty (so runs from before that key existed compare equal to new ones).
std::map<std::string, std::string> ParamsOf(const RunConfig& config);
// A run's params: ParamsOf(config) and, for a run that a sweep's `derived:` entry made, that
// entry's name under "derived" (not a config key; run views and filters show it). The one way a
// run's params are computed: at submit, and again whenever its config changes (a resume with
// --set, an extension, a seed plan's copy).
inline constexpr char kDerivedParam[] = "derived";
std::map<std::string, std::string> RunParams(const RunConfig& config, std::string_view derived);
// The derivation `params` name; empty for a run of the grid.
std::string DerivedName(const std::map<std::string, std::string>& params);

// Parses a YAML run config: a mapping of §9 keys (optionally grouped under `model:`, `train:` and
// `data:`), with `val_data` a mapping of name -> file. Unknown keys and bad values are
// InvalidArgument with "<source>:<line>: <key>: <reason>". Unset keys keep their defaults.
absl::StatusOr<RunConfig> ParseRunConfigYaml(std::string_view text, std::string_view source);
absl::StatusOr<RunConfig> LoadRunConfigFile(const std::string& path);
// Applies a YAML mapping on top of `config` (what a sweep grid point does).
absl::Status ApplyYaml(RunConfig& config, std::string_view text, std::string_view source);
// The resolved config as YAML, every key present; ParseRunConfigYaml reads it back unchanged.
std::string ToYaml(const RunConfig& config);
// One scalar as YAML: plain when it reads back as the same text, else double-quoted with escapes.
std::string YamlScalar(std::string_view text);

std::string_view ToString(ModelKind v);
std::string_view ToString(KvMode v);
std::string_view ToString(CoreSharing v);
std::string_view ToString(CoreAttn v);
std::string_view ToString(GateMode v);
std::string_view ToString(WeightDecayScope v);
std::string_view ToString(DType v);

}  // namespace cart::config
