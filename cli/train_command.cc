// cart train | eval — one run on this machine, no daemon.

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress.h"
#include "common/status.h"
#include "common/strings.h"
#include "data/tasks.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "model/language_model.h"
#include "train/checkpoint.h"
#include "train/device.h"
#include "train/eval.h"
#include "train/trainer.h"
#include "train/zero_shot.h"

namespace cart::cli {
namespace {

namespace fs = std::filesystem;

struct TrainArgs {
  std::string config, out, resume, device = "auto";
  std::vector<std::string> sets;
  int64_t steps = 0;
  bool quiet = false;
};

absl::Status RunTrain(const TrainArgs& args) {
  config::RunConfig config;
  train::TrainOptions options;
  options.device = args.device;
  if (!args.resume.empty()) {
    options.resume = true;
    options.out_dir = args.resume;
    options.extend_to = args.steps;
    CART_ASSIGN_OR_RETURN(config, config::LoadRunConfigFile(args.resume + "/config.yaml"));
    if (args.steps > 0) config.train.steps = args.steps;
  } else {
    if (args.config.empty() || args.out.empty()) {
      return absl::InvalidArgumentError("give RUN.yaml and --out DIR, or --resume DIR");
    }
    CART_ASSIGN_OR_RETURN(config, config::LoadRunConfigFile(args.config));
    CART_RETURN_IF_ERROR(config::ApplyOverrides(config, args.sets));
    if (args.steps > 0) config.train.steps = args.steps;
    absl::Status valid = config::Validate(config);
    if (!valid.ok()) return absl::InvalidArgumentError(StrCat(args.config, ": ", Message(valid)));
    options.out_dir = args.out;
    if (fs::exists(fs::path(args.out) / "config.yaml")) {
      return absl::AlreadyExistsError(StrCat(args.out,
                                             " already holds a run; resume it with "
                                             "`cart train --resume ",
                                             args.out, "`, or pick another --out"));
    }
  }
  const int64_t total = config.train.steps;
  const auto start = std::chrono::steady_clock::now();
  // ETA from the wall clock per step since the first step this process made (eval and
  // checkpoints included; a resumed run starts counting at its resume point).
  int64_t first_step = -1;
  std::chrono::steady_clock::time_point first_time;
  auto eta = [&](int64_t step) {
    const auto now = std::chrono::steady_clock::now();
    if (first_step < 0) first_step = step, first_time = now;
    if (step <= first_step) return std::string("?");
    const double per_step = std::chrono::duration<double>(now - first_time).count() /
                            static_cast<double>(step - first_step);
    return Duration(per_step * static_cast<double>(total - step));
  };
  ProgressBar bar("train");
  options.on_log = [&](const std::string& msg) {
    bar.Clear();
    std::cerr << "cart: " << msg << "\n";
  };
  options.on_step = [&](int64_t step, double loss) {
    const std::string left = eta(step);
    if (!args.quiet) {
      bar.Update(static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, total)),
                 fmt::format("{}/{} steps, loss {:.4f}, eta {}", step, total, loss, left));
    }
  };
  options.on_metrics = [&](const train::MetricRecord& r) {
    if (args.quiet) return;
    bar.Clear();
    auto get = [&](const std::string& k) {
      auto it = r.values.find(k);
      return it == r.values.end() ? std::nan("") : it->second;
    };
    if (r.values.count("loss")) {
      std::string line =
          fmt::format("step {:>6}/{} loss {:.4f} lr {:.2e} gnorm {:.3f} {:>8.0f} tok/s", r.step,
                      total, get("loss"), get("lr"), get("grad_norm"), get("tokens_per_s"));
      if (r.values.count("rho_max")) line += fmt::format(" rho {:.4f}", get("rho_max"));
      line += " eta " + eta(r.step);
      std::cout << line << std::endl;
    }
    for (const auto& [k, v] : r.values) {
      if (k.rfind("val_ppl/", 0) == 0) {
        std::cout << fmt::format("step {:>6} eval {}: loss {:.4f} ppl {:.3f}", r.step, k.substr(8),
                                 get("val_loss/" + k.substr(8)), v)
                  << std::endl;
      }
    }
  };
  absl::StatusOr<train::TrainResult> trained = train::Train(config, options);
  bar.Clear();
  CART_ASSIGN_OR_RETURN(train::TrainResult result, std::move(trained));
  if (result.diverged) return absl::InternalError(train::DivergenceMessage(*result.diverged));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format(
      "{} at step {}/{} in {}: final loss {:.4f}{}; checkpoint {}\n",
      result.finished ? "finished" : "stopped", result.steps_done, total, Duration(elapsed),
      result.final_loss, result.leak_suspected ? " — LEAK SUSPECTED" : "", result.last_checkpoint);
  return absl::OkStatus();
}

struct EvalArgs {
  std::string run;
  std::vector<std::string> data;
  std::vector<std::string> tasks;
  std::string tokenizer;
  std::string device = "auto";
  std::vector<int> loops;
  int64_t sequences = 0, seq_len = 0, batch = 8;
  bool json = false;
  bool bos = false;    // --bos: contexts start with BOS
  bool items = false;  // --items: each task item's scores in the --json output
};

// The tokenizer of --tokenizer, else the one the run was trained with.
absl::StatusOr<std::unique_ptr<data::Tokenizer>> RunTokenizer(const config::RunConfig& config,
                                                              const std::string& override_spec) {
  if (!override_spec.empty()) return data::Tokenizer::Load(override_spec);
  return train::RunTokenizer(config);
}

// Prints one zero-shot result row (a header first when `header`).
void PrintTaskRow(const train::TaskResult& t, int r, bool header) {
  if (header) {
    std::cout << fmt::format("{:<14}{:>8}{:>7}{:>17}{:>17}{:>11}\n", "task", "R_infer", "items",
                             "acc", "acc_norm", "ppl");
  }
  const bool lambada = t.kind == data::TaskKind::kLambada;
  std::cout << fmt::format(
      "{:<14}{:>8}{:>7}{:>17}{:>17}{:>11}\n", t.name, r, t.items,
      fmt::format("{:.4f} ± {:.4f}", t.acc, t.acc_stderr),
      lambada ? "-" : fmt::format("{:.4f} ± {:.4f}", t.acc_norm, t.acc_norm_stderr),
      lambada ? fmt::format("{:.2f}", t.perplexity) : "-");
}

nlohmann::json TaskJson(const train::TaskResult& t, int r, int64_t step, bool items) {
  nlohmann::json row = {{"task", t.name}, {"kind", data::TaskKindName(t.kind)},
                        {"R_infer", r},   {"items", t.items},
                        {"acc", t.acc},   {"acc_stderr", t.acc_stderr},
                        {"step", step},   {"bos", t.prepend_bos}};
  if (t.kind == data::TaskKind::kLambada) {
    row["perplexity"] = t.perplexity;
  } else {
    row["acc_norm"] = t.acc_norm;
    row["acc_norm_stderr"] = t.acc_norm_stderr;
    if (t.chance_choices > 0) row["chance"] = 1.0 / static_cast<double>(t.chance_choices);
  }
  if (items) {
    row["item_logprobs"] = t.item_choice_logprob;
    row["item_gold"] = t.item_gold;
    row["item_correct"] = t.item_correct;
    if (t.kind != data::TaskKind::kLambada) {
      row["item_choice"] = t.item_choice;
      row["item_choice_norm"] = t.item_choice_norm;
      row["item_correct_norm"] = t.item_correct_norm;
    }
  }
  return row;
}

absl::Status RunEval(const EvalArgs& args) {
  CART_ASSIGN_OR_RETURN(config::RunConfig config,
                        config::LoadRunConfigFile(args.run + "/config.yaml"));
  std::vector<std::string> problems;
  CART_ASSIGN_OR_RETURN(train::CheckpointManifest ckpt,
                        train::LatestValidCheckpoint(args.run + "/checkpoints", &problems));
  for (const std::string& p : problems) std::cerr << "cart: checkpoint skipped: " << p << "\n";
  train::CheckpointEvalOptions options;
  options.val_sets = config.data.val_data;
  if (!args.data.empty()) {
    options.val_sets.clear();
    for (const std::string& kv : args.data) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos)
        return absl::InvalidArgumentError("--data " + kv + ": expected name=FILE.bin");
      options.val_sets[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  if (!args.tasks.empty() && args.data.empty()) options.val_sets.clear();  // --task alone
  if (options.val_sets.empty() && args.tasks.empty()) {
    return absl::InvalidArgumentError(
        "nothing to evaluate: give --data name=FILE.bin or --task KIND=FILE.jsonl");
  }
  for (const std::string& spec : args.tasks) {
    CART_ASSIGN_OR_RETURN(data::TaskSource source, data::ParseTaskSource(spec));
    CART_ASSIGN_OR_RETURN(data::Task task, data::LoadTask(source));
    options.tasks.push_back(std::move(task));
  }
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!options.tasks.empty()) {
    CART_ASSIGN_OR_RETURN(tokenizer, RunTokenizer(config, args.tokenizer));
    options.tokenizer = tokenizer.get();
  }
  options.device = args.device;
  options.loops = args.loops;
  options.seq_len = args.seq_len;
  options.sequences = args.sequences;
  options.task_batch = args.batch;
  options.prepend_bos = args.bos;
  options.on_log = [](const std::string& msg) { std::cerr << "cart: " << msg << "\n"; };
  std::vector<train::LoopEvaluation> results;
  CART_RETURN_IF_ERROR(train::EvaluateCheckpoint(
      config, ckpt, options, [&](const train::LoopEvaluation& e) { results.push_back(e); }));

  // Printed set by set, then task by task, each over the loop counts.
  nlohmann::json out = nlohmann::json::array();
  if (!args.json) std::cout << fmt::format("checkpoint {} (step {})\n", ckpt.path, ckpt.step);
  if (!args.json && !options.val_sets.empty()) {
    std::cout << fmt::format("{:<12}{:>8}{:>12}{:>12}{:>8}\n", "set", "R_infer", "loss", "ppl",
                             "seqs");
  }
  for (const auto& [name, path] : options.val_sets) {
    for (const train::LoopEvaluation& e : results) {
      const train::PerplexityResult& p = e.sets.at(name);
      out.push_back({{"set", name},
                     {"R_infer", e.loops},
                     {"loss", p.mean_loss},
                     {"ppl", p.perplexity},
                     {"sequences", p.sequences},
                     {"step", ckpt.step}});
      if (!args.json) {
        std::cout << fmt::format("{:<12}{:>8}{:>12.4f}{:>12.3f}{:>8}\n", name, e.loops, p.mean_loss,
                                 p.perplexity, p.sequences);
      }
    }
  }
  for (size_t i = 0; i < options.tasks.size(); ++i) {
    for (const train::LoopEvaluation& e : results) {
      out.push_back(TaskJson(e.tasks[i], e.loops, ckpt.step, args.items));
      if (!args.json) PrintTaskRow(e.tasks[i], e.loops, /*header=*/i == 0 && &e == &results[0]);
    }
  }
  if (args.json) std::cout << out.dump(2) << "\n";
  return absl::OkStatus();
}

// cart train CONFIG: one run in this process, without cartd.
void TrainCommand(const TrainArgs& targs) {
  absl::Status s = RunTrain(targs);
  if (!s.ok()) ExitWith(s);
}

// cart eval CHECKPOINT: perplexity and zero-shot scores of a checkpoint.
void EvalCommand(const EvalArgs& eargs) {
  absl::Status s = RunEval(eargs);
  if (!s.ok()) ExitWith(s);
}

}  // namespace

void RegisterTrainCommands(CLI::App& app) {
  auto targs = std::make_shared<TrainArgs>();
  CLI::App* train = app.add_subcommand("train", "Train one run on this machine (no daemon)");
  train->add_option("config", targs->config, "Run-config YAML");
  train->add_option("--out", targs->out, "Run directory: config.yaml, metrics.jsonl, checkpoints/");
  train->add_option("--resume", targs->resume,
                    "Continue the run in this directory from its newest valid checkpoint");
  train->add_option("--steps", targs->steps,
                    "Total steps (with --resume: extend the run to this many)");
  train->add_option("--set", targs->sets, "Override a config key: key=value (repeatable)");
  train->add_flag("--quiet", targs->quiet, "Print only the summary");
  train->add_option("--device", targs->device, "auto | cpu | cuda | cuda:N")->capture_default_str();
  OnRun(train, [targs] { TrainCommand(*targs); });

  auto eargs = std::make_shared<EvalArgs>();
  CLI::App* eval = app.add_subcommand(
      "eval", "Validation perplexity and zero-shot tasks of a run's newest checkpoint");
  eval->add_option("run", eargs->run, "Run directory written by cart train")->required();
  eval->add_option("--data", eargs->data,
                   "Validation set name=FILE.bin (repeatable; default: the run's val_data)");
  eval->add_option("--R-infer", eargs->loops, "Loops at inference, 1..16 (repeatable)")
      ->check(CLI::Range(1, 16));
  eval->add_option("--sequences", eargs->sequences,
                   "First N windows of each set (default: eval_sequences)");
  eval->add_option("--seq-len", eargs->seq_len,
                   "Window length and model context (default: the run's seq_len)");
  eval->add_option(
      "--task", eargs->tasks,
      "Zero-shot task [NAME:]KIND=FILE[,limit=N][,labels=FILE], KIND one of hellaswag, "
      "piqa, arc, lambada (repeatable; scored as lm-evaluation-harness does)");
  eval->add_option("--tokenizer", eargs->tokenizer,
                   "Tokenizer spec for --task (default: the one of the run's train_data)");
  eval->add_option("--batch", eargs->batch, "Sequences per forward pass for --task")
      ->check(CLI::Range(1, 1024));
  eval->add_flag("--bos", eargs->bos,
                 "Start every --task context with the tokenizer's BOS (default: no BOS, as "
                 "lm-evaluation-harness scores causal models); each result records which");
  eval->add_flag("--json", eargs->json, "Print JSON");
  eval->add_flag("--items", eargs->items,
                 "With --json: each --task item's choice log-likelihoods, gold and picks, to "
                 "compare with another scorer item by item (docs/huggingface.md)");
  eval->add_option("--device", eargs->device, "auto | cpu | cuda | cuda:N")->capture_default_str();
  OnRun(eval, [eargs] { EvalCommand(*eargs); });
}

}  // namespace cart::cli
