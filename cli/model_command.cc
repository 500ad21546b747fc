// cart model params | init | logits — the model accounting and cross-checking commands.

#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/accounting.h"
#include "config/config.h"
#include "model/language_model.h"
#include "model/safetensors.h"
#include "train/torch_error.h"

namespace cart::cli {
namespace {

using config::ModelConfig;
using config::RunConfig;

// Loads CONFIG (a run-config YAML) and applies `--set key=value` overrides.
absl::StatusOr<RunConfig> LoadConfig(const std::string& path,
                                     const std::vector<std::string>& sets) {
  RunConfig config;
  if (!path.empty()) {
    CART_ASSIGN_OR_RETURN(config, config::LoadRunConfigFile(path));
  }
  CART_RETURN_IF_ERROR(config::ApplyOverrides(config, sets));
  absl::Status valid = config::Validate(config);
  if (!valid.ok()) return absl::InvalidArgumentError(StrCat(path, ": ", Message(valid)));
  return config;
}

std::string Millions(int64_t n) { return fmt::format("{:.2f}M", n / 1e6); }

void PrintParams(const RunConfig& config, bool json) {
  const ModelConfig& m = config.model;
  const config::ParamCounts c = config::CountParams(m);
  const config::FlopCounts f = config::CountFlops(m, config.train.seq_len);
  // On a GPU worker's kernels in bf16, micro-batch and accumulation as configured.
  config::StepShape shape = config::ShapeOf(config, config::GpuWorkerKernels());
  shape.bf16 = true;
  const int64_t mem = config::EstimateTrainingBytes(m, shape, config::GpuWorkerKernels());
  nlohmann::json out = {{"model", std::string(config::ToString(m.model))},
                        {"d", m.d},
                        {"vocab", m.vocab},
                        {"stored", c.stored},
                        {"effective", c.effective},
                        {"embedding", c.embedding},
                        {"prelude_layer", c.prelude_layer},
                        {"core_block", c.core_block},
                        {"anchor", c.anchor},
                        {"dense_layer", c.dense_layer},
                        {"seq_len", config.train.seq_len},
                        {"forward_flops_per_token", f.forward_per_token},
                        {"train_flops_per_token", f.train_per_token},
                        {"train_memory_bytes_bf16", mem}};
  if (m.model == config::ModelKind::kCart) {
    auto stored = config::MatchDenseDepth(m, config::MatchTarget::kStored);
    auto eff = config::MatchDenseDepth(m, config::MatchTarget::kEffective);
    out["dense_match_stored"] = {{"layers", stored.layers}, {"params", stored.params}};
    out["dense_match_effective"] = {{"layers", eff.layers}, {"params", eff.params}};
  }
  if (json) {
    std::cout << out.dump(2) << "\n";
    return;
  }
  auto row = [](const std::string& k, const std::string& v) {
    std::cout << fmt::format("{:<28}{:>16}\n", k, v);
  };
  if (m.model == config::ModelKind::kCart) {
    row("model", fmt::format("cart d={} P={} R={}", m.d, m.P, m.R));
    row("stored params", Millions(c.stored));
    row("effective params (R loops)", Millions(c.effective));
    row("  embedding (tied)", Millions(c.embedding));
    row("  prelude/coda layer", Millions(c.prelude_layer));
    row("  core block", Millions(c.core_block));
    row("  anchor projection", Millions(c.anchor));
    row("dense match (stored)",
        fmt::format("{} layers, {}", out["dense_match_stored"]["layers"].get<int>(),
                    Millions(out["dense_match_stored"]["params"].get<int64_t>())));
    row("dense match (effective)",
        fmt::format("{} layers, {}", out["dense_match_effective"]["layers"].get<int>(),
                    Millions(out["dense_match_effective"]["params"].get<int64_t>())));
  } else {
    row("model", fmt::format("dense d={} layers={}", m.d, m.layers));
    row("params", Millions(c.stored));
    row("  dense layer", Millions(c.dense_layer));
  }
  row(fmt::format("forward FLOPs/token (T={})", config.train.seq_len),
      fmt::format("{:.3f} GFLOP", f.forward_per_token / 1e9));
  row("training FLOPs/token", fmt::format("{:.3f} GFLOP", f.train_per_token / 1e9));
  row(fmt::format("train memory (batch {}, bf16, GPU)", config.train.batch),
      fmt::format("{:.2f} GiB", mem / double(1 << 30)));
}

absl::Status Init(const RunConfig& config, int64_t seed, const std::string& out,
                  const std::string& dtype) {
  CART_ASSIGN_OR_RETURN(auto m, model::BuildModel(config.model, seed));
  if (dtype != "fp32" && dtype != "bf16") {
    return absl::InvalidArgumentError("--dtype: '" + dtype + "' is not one of fp32, bf16");
  }
  CART_RETURN_IF_ERROR(model::SaveModel(*m, out,
                                        dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32,
                                        {{"seed", std::to_string(seed)}}));
  std::cout << "wrote " << out << " (" << Millions(config::CountParams(config.model).stored)
            << " parameters, seed " << seed << ")\n";
  return absl::OkStatus();
}

absl::Status Logits(const std::string& file, const std::string& config_path,
                    const std::vector<std::string>& sets, const std::string& ids_text,
                    int R_infer) {
  CART_ASSIGN_OR_RETURN(model::SafetensorsFile weights, model::ReadSafetensors(file));
  RunConfig config;
  if (config_path.empty()) {
    CART_ASSIGN_OR_RETURN(config.model, model::ConfigFromMetadata(weights, file));
    CART_RETURN_IF_ERROR(config::ApplyOverrides(config, sets));
  } else {
    CART_ASSIGN_OR_RETURN(config, LoadConfig(config_path, sets));
  }
  if (R_infer > 0) config.model.R_infer = R_infer;
  CART_RETURN_IF_ERROR(config::Validate(config));
  std::vector<int64_t> ids;
  for (const std::string& t : Split(ids_text, ',')) {
    std::optional<int64_t> v = ParseInt64(t);
    if (!v || *v < 0 || *v >= config.model.vocab) {
      return absl::InvalidArgumentError(
          StrCat("--ids: '", t, "' is not a token id in 0..", config.model.vocab - 1));
    }
    ids.push_back(*v);
  }
  CART_ASSIGN_OR_RETURN(auto m, model::BuildModel(config.model, 0));
  CART_RETURN_IF_ERROR(model::LoadModel(*m, weights));
  torch::Tensor logits;
  model::Diagnostics diag;
  try {
    torch::NoGradGuard no_grad;
    m->eval();
    model::ForwardOptions options;
    options.diagnostics = true;
    model::DiagnosticTensors diag_tensors;
    logits =
        m->Forward(torch::tensor(ids, torch::kInt64).unsqueeze(0), options, &diag_tensors)[0].to(
            torch::kFloat64);
    diag = model::Read(diag_tensors);
  } catch (const std::exception& e) {
    return train::FromTorchError(e, StrCat(file, ": the forward pass"));
  }
  nlohmann::json out;
  out["ids"] = ids;
  out["R_infer"] = config.model.effective_R_infer();
  std::vector<std::vector<double>> rows;
  for (int64_t t = 0; t < logits.size(0); ++t) {
    torch::Tensor row = logits[t].contiguous();
    rows.emplace_back(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
  }
  out["logits"] = rows;
  if (config.model.model == config::ModelKind::kCart) {
    out["rho"] = {{"max", diag.rho_max}, {"mean", diag.rho_mean}, {"min", diag.rho_min}};
    out["h_norm"] = diag.h_norm;
    out["rel_update"] = diag.rel_update;
  }
  std::cout << out.dump() << "\n";
  return absl::OkStatus();
}

struct Opts {
  std::string config, out, file, ids, dtype = "fp32";
  std::vector<std::string> sets;
  int64_t seed = 42;
  int R_infer = 0;
  bool json = false;
};

// cart model params CONFIG: parameter, FLOP and memory accounting.
void ParamsCommand(const Opts& opts) {
  absl::StatusOr<RunConfig> c = LoadConfig(opts.config, opts.sets);
  if (!c.ok()) ExitWith(c.status());
  PrintParams(*c, opts.json);
}

// cart model init CONFIG: a seeded, untrained model as safetensors.
void InitCommand(const Opts& opts) {
  absl::StatusOr<RunConfig> c = LoadConfig(opts.config, opts.sets);
  if (!c.ok()) ExitWith(c.status());
  absl::Status s = Init(*c, opts.seed, opts.out, opts.dtype);
  if (!s.ok()) ExitWith(s);
}

// cart model logits FILE --ids: one forward pass, as JSON.
void LogitsCommand(const Opts& opts) {
  absl::Status s = Logits(opts.file, opts.config, opts.sets, opts.ids, opts.R_infer);
  if (!s.ok()) ExitWith(s);
}

}  // namespace

void RegisterModelCommands(CLI::App& app) {
  CLI::App* model_cmd =
      app.add_subcommand("model", "Parameter accounting, init, logits and the training benchmark");
  model_cmd->require_subcommand(1);

  auto opts = std::make_shared<Opts>();

  CLI::App* params =
      model_cmd->add_subcommand("params", "Parameter counts, FLOPs and memory of a config");
  params->add_option("config", opts->config, "Run-config YAML (defaults if omitted)");
  params->add_option("--set", opts->sets, "Override a config key: key=value (repeatable)");
  params->add_flag("--json", opts->json, "Print JSON");
  OnRun(params, [opts] { ParamsCommand(*opts); });

  CLI::App* init =
      model_cmd->add_subcommand("init", "Write a seeded, untrained model as safetensors");
  init->add_option("config", opts->config, "Run-config YAML")->required();
  init->add_option("--set", opts->sets, "Override a config key: key=value (repeatable)");
  init->add_option("--seed", opts->seed, "Initialisation seed")->capture_default_str();
  init->add_option("--out", opts->out, "Output .safetensors file")->required();
  init->add_option("--dtype", opts->dtype, "fp32 or bf16")->capture_default_str();
  OnRun(init, [opts] { InitCommand(*opts); });

  CLI::App* logits = model_cmd->add_subcommand("logits", "Logits of a model on given ids, as JSON");
  logits->add_option("file", opts->file, "Model .safetensors (as written by init or export)")
      ->required();
  logits->add_option("--config", opts->config,
                     "Run-config YAML (default: the one stored in the file)");
  logits->add_option("--set", opts->sets, "Override a config key: key=value (repeatable)");
  logits->add_option("--ids", opts->ids, "Comma-separated token ids")->required();
  logits->add_option("--R-infer", opts->R_infer, "Loops at inference, 1..16");
  OnRun(logits, [opts] { LogitsCommand(*opts); });

  RegisterModelBenchCommand(*model_cmd);
}

}  // namespace cart::cli
