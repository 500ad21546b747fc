// cart train | eval — one run on this machine, no daemon.

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/status.h"
#include "common/strings.h"
#include "model/language_model.h"
#include "train/checkpoint.h"
#include "train/eval.h"
#include "train/trainer.h"

namespace cart::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArgs {
  std::string config, out, resume;
  std::vector<std::string> sets;
  int64_t steps = 0;
  bool quiet = false;
};

absl::Status ApplySets(model::RunConfig& config, const std::vector<std::string>& sets) {
  for (const std::string& kv : sets) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) return absl::InvalidArgumentError("--set " + kv + ": expected key=value");
    CART_RETURN_IF_ERROR(model::SetKey(config, kv.substr(0, eq), kv.substr(eq + 1)));
  }
  return absl::OkStatus();
}

std::string Duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int s = static_cast<int>(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

absl::Status RunTrain(const TrainArgs& args) {
  model::RunConfig config;
  train::TrainOptions options;
  if (!args.resume.empty()) {
    options.resume = true;
    options.out_dir = args.resume;
    options.extend_to = args.steps;
    CART_ASSIGN_OR_RETURN(config, model::LoadRunConfigFile(args.resume + "/config.yaml"));
    if (args.steps > 0) config.train.steps = args.steps;
  } else {
    if (args.config.empty() || args.out.empty()) {
      return absl::InvalidArgumentError("give RUN.yaml and --out DIR, or --resume DIR");
    }
    CART_ASSIGN_OR_RETURN(config, model::LoadRunConfigFile(args.config));
    CART_RETURN_IF_ERROR(ApplySets(config, args.sets));
    if (args.steps > 0) config.train.steps = args.steps;
    absl::Status valid = model::Validate(config);
    if (!valid.ok()) return absl::InvalidArgumentError(StrCat(args.config, ": ", Message(valid)));
    options.out_dir = args.out;
    if (fs::exists(fs::path(args.out) / "config.yaml")) {
      return absl::AlreadyExistsError(StrCat(args.out, " already holds a run; resume it with "
                                             "`cart train --resume ", args.out, "`, or pick another --out"));
    }
  }
  const int64_t total = config.train.steps;
  const auto start = std::chrono::steady_clock::now();
  int64_t first_step = -1;
  const bool tty = isatty(fileno(stderr));
  options.on_log = [&](const std::string& msg) { std::cerr << "cart: " << msg << "\n"; };
  options.on_metrics = [&](const train::MetricRecord& r) {
    if (args.quiet) return;
    auto get = [&](const std::string& k) {
      auto it = r.values.find(k);
      return it == r.values.end() ? std::nan("") : it->second;
    };
    if (r.values.count("loss")) {
      if (first_step < 0) first_step = r.step;
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double per_step = elapsed / std::max<int64_t>(1, r.step - first_step + 1);
      std::string line = fmt::format(
          "step {:>6}/{} loss {:.4f} lr {:.2e} gnorm {:.3f} {:>8.0f} tok/s", r.step, total,
          get("loss"), get("lr"), get("grad_norm"), get("tokens_per_s"));
      if (r.values.count("rho_max")) line += fmt::format(" rho {:.4f}", get("rho_max"));
      line += " eta " + Duration(per_step * static_cast<double>(total - r.step));
      std::cout << line << (tty ? "" : "") << std::endl;
    }
    for (const auto& [k, v] : r.values) {
      if (k.rfind("val_ppl/", 0) == 0) {
        std::cout << fmt::format("step {:>6} eval {}: loss {:.4f} ppl {:.3f}", r.step, k.substr(8),
                                 get("val_loss/" + k.substr(8)), v)
                  << std::endl;
      }
    }
  };
  CART_ASSIGN_OR_RETURN(train::TrainResult result, train::Train(config, options));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("{} at step {}/{} in {}: final loss {:.4f}{}; checkpoint {}\n",
                           result.finished ? "finished" : "stopped", result.steps_done, total,
                           Duration(elapsed), result.final_loss,
                           result.leak_suspected ? " — LEAK SUSPECTED" : "",
                           result.last_checkpoint);
  return absl::OkStatus();
}

struct EvalArgs {
  std::string run;
  std::vector<std::string> data;
  std::vector<int> loops;
  int64_t sequences = 0, seq_len = 0;
  bool json = false;
};

absl::Status RunEval(const EvalArgs& args) {
  CART_ASSIGN_OR_RETURN(model::RunConfig config, model::LoadRunConfigFile(args.run + "/config.yaml"));
  std::vector<std::string> problems;
  CART_ASSIGN_OR_RETURN(train::CheckpointManifest ckpt,
                        train::LatestValidCheckpoint(args.run + "/checkpoints", &problems));
  for (const std::string& p : problems) std::cerr << "cart: checkpoint skipped: " << p << "\n";
  std::map<std::string, std::string> sets = config.data.val_data;
  if (!args.data.empty()) {
    sets.clear();
    for (const std::string& kv : args.data) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos) return absl::InvalidArgumentError("--data " + kv + ": expected name=FILE.bin");
      sets[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  if (sets.empty()) return absl::InvalidArgumentError("no validation sets: give --data name=FILE.bin");
  torch::set_num_threads(train::ThreadsFor(config.train));
  CART_ASSIGN_OR_RETURN(auto m, model::BuildModel(config.model, config.train.seed));
  CART_RETURN_IF_ERROR(train::LoadCheckpoint(ckpt, *m, nullptr));
  std::vector<int> loops = args.loops;
  if (loops.empty()) loops.push_back(config.model.effective_R_infer());
  const int64_t seq_len = args.seq_len > 0 ? args.seq_len : config.train.seq_len;
  const int64_t sequences = args.sequences > 0 ? args.sequences : config.train.eval_sequences;
  nlohmann::json out = nlohmann::json::array();
  if (!args.json) {
    std::cout << fmt::format("checkpoint {} (step {})\n{:<12}{:>8}{:>12}{:>12}{:>8}\n", ckpt.path,
                             ckpt.step, "set", "R_infer", "loss", "ppl", "seqs");
  }
  for (const auto& [name, path] : sets) {
    for (int r : loops) {
      CART_ASSIGN_OR_RETURN(train::PerplexityResult p,
                            train::EvaluatePerplexity(*m, path, seq_len, sequences, r));
      out.push_back({{"set", name}, {"R_infer", r}, {"loss", p.mean_loss},
                     {"ppl", p.perplexity}, {"sequences", p.sequences}, {"step", ckpt.step}});
      if (!args.json) {
        std::cout << fmt::format("{:<12}{:>8}{:>12.4f}{:>12.3f}{:>8}\n", name, r, p.mean_loss,
                                 p.perplexity, p.sequences);
      }
    }
  }
  if (args.json) std::cout << out.dump(2) << "\n";
  return absl::OkStatus();
}

}  // namespace

void RegisterTrainCommands(CLI::App& app) {
  auto targs = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand("train", "Train one run on this machine (no daemon)");
  train->add_option("config", targs->config, "Run-config YAML");
  train->add_option("--out", targs->out, "Run directory: config.yaml, metrics.jsonl, checkpoints/");
  train->add_option("--resume", targs->resume, "Continue the run in this directory from its newest valid checkpoint");
  train->add_option("--steps", targs->steps, "Total steps (with --resume: extend the run to this many)");
  train->add_option("--set", targs->sets, "Override a config key: key=value (repeatable)");
  train->add_flag("--quiet", targs->quiet, "Print only the summary");
  train->callback([targs] {
    absl::Status s = RunTrain(*targs);
    if (!s.ok()) ExitWith(s);
  });

  auto eargs = std::make_shared<EvalArgs>();
  CLI::App* eval = app.add_subcommand("eval", "Validation perplexity of a run's newest checkpoint");
  eval->add_option("run", eargs->run, "Run directory written by cart train")->required();
  eval->add_option("--data", eargs->data, "Validation set name=FILE.bin (repeatable; default: the run's val_data)");
  eval->add_option("--R-infer", eargs->loops, "Loops at inference, 1..16 (repeatable)")
      ->check(CLI::Range(1, 16));
  eval->add_option("--sequences", eargs->sequences, "First N windows of each set (default: eval_sequences)");
  eval->add_option("--seq-len", eargs->seq_len, "Window length (default: the run's seq_len)");
  eval->add_flag("--json", eargs->json, "Print JSON");
  eval->callback([eargs] {
    absl::Status s = RunEval(*eargs);
    if (!s.ok()) ExitWith(s);
  });
}

}  // namespace cart::cli
