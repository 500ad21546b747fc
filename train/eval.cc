#include "train/eval.h"

#include <algorithm>
#include <cmath>

#include "common/status.h"
#include "common/strings.h"
#include "data/token_file.h"
#include "model/layers.h"
#include "model/readout.h"
#include "train/device.h"
#include "train/precision.h"
#include "train/torch_error.h"
#include "train/trainer.h"
#include "train/windows.h"

namespace cart::train {
namespace {

// The per-sequence losses, `compute.batch` windows per forward pass, read to the host once at the
// end.
absl::StatusOr<std::vector<double>> SequenceLosses(model::LanguageModel& model,
                                                   WindowReader& reader, int64_t n, int loops,
                                                   const EvalCompute& compute) {
  const torch::Device device = model.parameters().front().device();
  model::ForwardOptions options;
  options.loops = loops;
  const int64_t batch = std::max<int64_t>(compute.batch, 1);
  std::vector<torch::Tensor> losses;
  for (int64_t first = 0; first < n; first += batch) {
    std::vector<torch::Tensor> xs, ys;
    for (int64_t i = first; i < std::min(n, first + batch); ++i) {
      CART_ASSIGN_OR_RETURN(Batch b, reader.At(i));
      xs.push_back(b.x);
      ys.push_back(b.y);
    }
    const torch::Tensor x = xs.size() == 1 ? xs[0] : torch::cat(xs);
    const torch::Tensor y = ys.size() == 1 ? ys[0] : torch::cat(ys);
    torch::Tensor logits;
    {
      MixedPrecisionScope scope(compute.mixed_precision, device);
      logits = model.Forward(ToDevice(x, device), options);  // (b, T, V)
    }
    // Each window's mean cross-entropy, in fp32.
    losses.push_back(torch::nn::functional::cross_entropy(
                         logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32),
                         ToDevice(y, device).reshape({-1}),
                         torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                         .view({x.size(0), -1})
                         .mean(1));
  }
  return model::ReadToHost(losses);
}

}  // namespace

absl::StatusOr<PerplexityResult> EvaluatePerplexity(model::LanguageModel& model,
                                                    const std::string& path, int64_t seq_len,
                                                    int64_t max_sequences, int loops,
                                                    EvalCompute compute) {
  CART_ASSIGN_OR_RETURN(data::TokenFile file, data::TokenFile::Open(path));
  if (file.info().vocab > model.config().vocab) {
    return absl::InvalidArgumentError(StrCat(path, ": vocabulary ", file.info().vocab,
                                             " is larger than the model's ", model.config().vocab));
  }
  const config::ModelConfig& mc = model.config();
  if (mc.model == config::ModelKind::kCart && mc.core == config::CoreSharing::kUnshared &&
      loops > 0 && loops != mc.R) {
    return absl::InvalidArgumentError(
        StrCat("R_infer ", loops, ": a model with core: unshared runs ", "exactly R = ", mc.R,
               " loops (its cores are per loop)"));
  }
  CART_ASSIGN_OR_RETURN(WindowReader reader, WindowReader::Create(&file, seq_len));
  const int64_t n = std::min(max_sequences, reader.windows());
  const bool was_training = model.is_training();
  model.eval();
  absl::StatusOr<std::vector<double>> losses;
  try {
    torch::NoGradGuard no_grad;
    losses = SequenceLosses(model, reader, n, loops, compute);
  } catch (const std::exception& e) {
    losses = FromTorchError(e, StrCat("evaluating ", path));
  }
  model.train(was_training);
  CART_RETURN_IF_ERROR(losses.status());
  PerplexityResult r;
  r.sequences = n;
  double sum = 0;
  for (double l : *losses) sum += l;
  r.mean_loss = sum / static_cast<double>(n);
  double var = 0;
  for (double l : *losses) var += (l - r.mean_loss) * (l - r.mean_loss);
  r.stderr_loss = n > 1 ? std::sqrt(var / static_cast<double>(n - 1) / static_cast<double>(n)) : 0;
  r.perplexity = std::exp(r.mean_loss);
  return r;
}

absl::Status EvaluateCheckpoint(const config::RunConfig& config,
                                const CheckpointManifest& checkpoint,
                                const CheckpointEvalOptions& options,
                                const std::function<void(const LoopEvaluation&)>& on_result) {
  if (!options.tasks.empty() && options.tokenizer == nullptr) {
    return absl::InvalidArgumentError("zero-shot tasks need a tokenizer");
  }
  CART_ASSIGN_OR_RETURN(c10::Device device, ResolveDevice(options.device));
  try {
    UseThreads(options.threads > 0 ? options.threads : ThreadsFor(config.train));
    const RunOnDevice on_device(device);
    CART_ASSIGN_OR_RETURN(std::shared_ptr<model::LanguageModel> m,
                          model::BuildModel(config.model, config.train.seed));
    CART_RETURN_IF_ERROR(LoadCheckpoint(checkpoint, *m, nullptr));
    m->to(device);
    model::SetMergedProjections(*m, DefaultMergedProjections(device));
    if (options.tokenizer != nullptr && options.tokenizer->vocab_size() > config.model.vocab) {
      return absl::InvalidArgumentError(StrCat("tokenizer ", options.tokenizer->spec(), " has ",
                                               options.tokenizer->vocab_size(),
                                               " ids; the model has ", config.model.vocab));
    }
    std::vector<int> loops = options.loops;
    if (loops.empty()) loops.push_back(config.model.effective_R_infer());
    std::sort(loops.begin(), loops.end());
    loops.erase(std::unique(loops.begin(), loops.end()), loops.end());
    const int64_t seq_len = options.seq_len > 0 ? options.seq_len : config.train.seq_len;
    const int64_t sequences =
        options.sequences > 0 ? options.sequences : config.train.eval_sequences;
    // The run's precision on this device, and its micro-batch of windows per forward pass (a
    // forward without gradients needs less memory than the training step that fitted it).
    EvalCompute compute;
    compute.batch = config.train.batch;
    compute.mixed_precision = UsesMixedPrecision(config.train.dtype, device);
    // Every evaluation says where it runs, as every training run does.
    if (options.on_log) {
      options.on_log(
          StrCat("device: ", DeviceLineFor(device, compute.mixed_precision, options.device)));
    }
    for (int r : loops) {
      if (options.stop != nullptr && options.stop->load()) break;
      LoopEvaluation e;
      e.loops = r;
      for (const auto& [name, path] : options.val_sets) {
        CART_ASSIGN_OR_RETURN(e.sets[name],
                              EvaluatePerplexity(*m, path, seq_len, sequences, r, compute));
      }
      for (const data::Task& task : options.tasks) {
        ZeroShotOptions zo;
        zo.loops = r;
        zo.max_len = seq_len;
        zo.batch = options.task_batch;
        zo.prepend_bos = options.prepend_bos;
        zo.mixed_precision = compute.mixed_precision;
        CART_ASSIGN_OR_RETURN(TaskResult t, EvaluateTask(*m, *options.tokenizer, task, zo));
        e.tasks.push_back(std::move(t));
      }
      if (options.more_tasks) CART_RETURN_IF_ERROR(options.more_tasks(r, e));
      on_result(e);
    }
  } catch (const std::exception& e) {
    return FromTorchError(e, StrCat("evaluating ", checkpoint.path));
  }
  return absl::OkStatus();
}

std::map<std::string, double> EvalMetrics(const LoopEvaluation& e) {
  std::map<std::string, double> values;
  for (const TaskResult& t : e.tasks) {
    values[StrCat("task_acc/", t.name)] = t.acc;
    if (t.kind == data::TaskKind::kLambada) {
      values[StrCat("task_ppl/", t.name)] = t.perplexity;
    } else if (t.has_acc_norm) {
      values[StrCat("task_acc_norm/", t.name)] = t.acc_norm;
    }
  }
  for (const auto& [name, p] : e.sets) {
    values[StrCat("val_loss/", name)] = p.mean_loss;
    values[StrCat("val_ppl/", name)] = p.perplexity;
  }
  return values;
}

}  // namespace cart::train
