// The training loop (train/: everything a run does on its device, from the first batch to the
// last checkpoint, with exact resume).

#include "train/trainer.h"

#include <ATen/record_function.h>
#include <dlfcn.h>
#include <malloc.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/file.h"
#include "common/process.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/schedule.h"
#include "data/token_file.h"
#include "model/language_model.h"
#include "model/layers.h"
#include "model/readout.h"
#include "train/cuda_graph.h"
#include "train/device.h"
#include "train/eval.h"
#include "train/precision.h"
#include "train/step_profile.h"
#include "train/torch_error.h"
#include "train/windows.h"

namespace cart::train {
namespace {

namespace fs = std::filesystem;
using config::RunConfig;

double ResidentMiB() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
         (1024.0 * 1024.0);
}

// Keeps only the metric lines with step <= `step` (what a resumed run will not recompute).
absl::Status TruncateMetrics(const std::string& path, int64_t step) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return absl::OkStatus();  // no metrics yet
  std::string kept;
  for (const std::string& line : Split(*text, '\n')) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).at("step").get<int64_t>() <= step) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
      // A torn last line from a killed process: dropped.
    }
  }
  return WriteFileAtomically(path, kept);
}

struct ValSet {
  std::string name, path;
  std::optional<double> entropy_rate;
};

class Trainer {
 public:
  Trainer(RunConfig config, const TrainOptions& options)
      : config_(std::move(config)), options_(options) {}

  absl::StatusOr<TrainResult> Run();

 private:
  // What one optimizer step measured.
  struct StepResult {
    double loss = 0;  // mean over the accumulated micro-batches
    double grad_norm = 0;
    model::Diagnostics diag;  // filled on logging steps only (ρ after the optimizer step)
  };

  void Log(const std::string& msg) {
    if (options_.on_log) options_.on_log(msg);
  }
  int64_t TokensPerStep() const {
    return config_.train.batch * config_.train.accum * config_.train.seq_len;
  }
  // Reads (on resume) and validates the config, sets threads and device, opens the data.
  absl::Status Prepare();
  void BuildOptimizer();
  // Resume: loads the newest valid checkpoint and returns its step. Otherwise: initialises from
  // options_.init_from or the seed and returns 0. Either way leaves config.yaml and
  // metrics.jsonl consistent with the returned step.
  absl::StatusOr<int64_t> RestoreOrInit();
  absl::StatusOr<StepResult> Step(double lr, bool log_step);
  // The capturable step (TrainOptions::capturable_step, cuda_graph): its batch copied into fixed
  // tensors, then FixedStepBody run, or recorded once and replayed.
  absl::StatusOr<StepResult> FixedStep(double lr, bool log_step);
  // What a graph records: forward and backward of every micro-batch, clipping, AdamW on the
  // device's lr and counts, ρ; inputs and outputs in fixed_.
  void FixedStepBody();
  // Reads a step's values to the host at once: the micro-batch losses, the gradient norm and,
  // when `diag` is given, ρ and the per-loop norms (defined ones only).
  StepResult ReadStep(const std::vector<torch::Tensor>& losses, const torch::Tensor& grad_norm,
                      const model::DiagnosticTensors* diag) const;
  MetricRecord StepMetrics(int64_t step, double lr, const StepResult& s, double tokens_per_s);
  absl::Status Emit(const MetricRecord& record);
  absl::Status Evaluate(int64_t step);
  absl::Status Checkpoint(int64_t step);
  // Whether the background write (if any) has ended, and then what a finished checkpoint does
  // (log line, result, on_checkpoint), or its error. `wait`: blocks until it ends.
  absl::Status FinishCheckpoint(bool wait);
  // What the trainer does once checkpoint `m` is on disk.
  void Checkpointed(const CheckpointManifest& m, const std::string& how);

  RunConfig config_;
  const TrainOptions& options_;
  std::string checkpoint_dir_, config_path_, metrics_path_;
  std::ofstream metrics_;
  std::shared_ptr<model::LanguageModel> model_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::optional<data::TokenFile> train_file_;
  std::optional<WindowReader> reader_;
  std::vector<ValSet> val_sets_;
  torch::Device device_ = torch::kCPU;
  bool mixed_precision_ = false;
  StepKernels step_kernels_ = StepKernels::kPerTensor;
  bool merged_projections_ = false;  // model/layers.h MergesProjections
  // The capturable step's tensors, made at its first step.
  struct FixedTensors {
    std::vector<torch::Tensor> x, y;  // per micro-batch, on the device
    DeviceAdamW adamw;
    std::vector<torch::Tensor> losses;  // per micro-batch
    torch::Tensor grad_norm;
    model::DiagnosticTensors diag;
  };
  bool fixed_step_ = false;  // capturable_step or cuda_graph
  std::optional<FixedTensors> fixed_;
  int64_t fixed_steps_ = 0;           // run in this attempt
  std::unique_ptr<CudaGraph> graph_;  // cuda_graph: its stream is current for the run
  bool graph_failed_ = false;         // recording failed: the steps go on without it
  TrainResult result_;
  // The copy of model and optimizer being written in the background (its memory kept for the
  // next), and that write. Declared last: a trainer leaving on an error waits for the write (the
  // future's destructor) before the copy it reads is freed.
  std::optional<CheckpointSnapshot> snapshot_;
  struct Written {
    absl::StatusOr<CheckpointManifest> manifest;
    double seconds = 0;  // the write's, on its thread
  };
  struct PendingWrite {
    int64_t step = 0;
    double copy_seconds = 0;  // what the training loop waited for
    std::future<Written> done;
  };
  std::optional<PendingWrite> pending_;
};

absl::Status Trainer::Emit(const MetricRecord& record) {
  nlohmann::json j;
  j["step"] = record.step;
  for (const auto& [k, v] : record.values) j[k] = v;
  errno = 0;
  metrics_ << j.dump() << "\n";
  metrics_.flush();
  if (!metrics_) {
    // The stream keeps no reason; the failed write's errno is the one to tell a full disk by.
    const int err = errno;
    const std::string what = StrCat("cannot append to metrics.jsonl in ", options_.out_dir,
                                    err != 0 ? StrCat(": ", std::strerror(err)) : "");
    if (err == ENOSPC || err == EDQUOT) return NoSpaceError(what);
    return absl::InternalError(what);
  }
  if (options_.on_metrics) options_.on_metrics(record);
  return absl::OkStatus();
}

absl::Status Trainer::Evaluate(int64_t step) {
  MetricRecord record;
  record.step = step;
  for (const ValSet& v : val_sets_) {
    CART_ASSIGN_OR_RETURN(
        PerplexityResult r,
        EvaluatePerplexity(*model_, v.path, config_.train.seq_len, config_.train.eval_sequences,
                           /*loops=*/0, EvalCompute{config_.train.batch, mixed_precision_}));
    record.values["val_loss/" + v.name] = r.mean_loss;
    record.values["val_ppl/" + v.name] = r.perplexity;
    if (v.entropy_rate) {
      // A causal model cannot beat the entropy rate of its data; allow three standard errors of
      // sampling noise before calling it a leak.
      const double floor = *v.entropy_rate - std::max(3.0 * r.stderr_loss, 1e-3);
      record.values["entropy_floor/" + v.name] = *v.entropy_rate;
      if (r.mean_loss < floor) {
        record.values["leak_suspected"] = 1;
        if (!result_.leak_suspected) {
          Log(StrCat("leak_suspected: step ", step, ": validation loss on '", v.name, "' is ",
                     r.mean_loss, " nats/token, below the data's entropy rate ", *v.entropy_rate,
                     " (a causal model cannot do that: check cross_causal)"));
        }
        result_.leak_suspected = true;
      }
    }
  }
  if (!record.values.empty()) return Emit(record);
  return absl::OkStatus();
}

absl::Status Trainer::Checkpoint(int64_t step) {
  CART_RETURN_IF_ERROR(FinishCheckpoint(/*wait=*/true));  // at most one write in flight
  CheckpointState state;
  state.step = step;
  state.cursor = reader_->cursor();
  state.config_yaml = config::ToYaml(config_);
  CheckpointWriteOptions write;
  write.durable = options_.durable_checkpoints;
  write.discard = options_.discard_checkpoint;
  const int64_t keep = config_.train.keep_checkpoints;
  const auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  if (!options_.background_checkpoints) {
    CART_ASSIGN_OR_RETURN(CheckpointManifest m, WriteCheckpoint(checkpoint_dir_, state, *model_,
                                                                *optimizer_, keep, write));
    // What the checkpoint cost the training loop, in the run's log (bench/checkpoint_upload.sh).
    Checkpointed(m, StrCat("in ", Fixed(since(start), 2), " s"));
    return absl::OkStatus();
  }
  CART_RETURN_IF_ERROR(snapshot_->Take(*model_, *optimizer_));
  state.rng_cpu = snapshot_->rng();
  PendingWrite w;
  w.step = step;
  w.copy_seconds = since(start);
  // The thread reads only the snapshot, the directory and the options, none of which the loop
  // changes before FinishCheckpoint has waited for it.
  w.done = std::async(std::launch::async, [this, since, state = std::move(state), keep, write] {
    if (options_.background_niceness > 0) LowerThisThreadsPriority(options_.background_niceness);
    const auto began = std::chrono::steady_clock::now();
    snapshot_->WaitForCopies();
    Written out{WriteCheckpoint(checkpoint_dir_, state, snapshot_->model(), snapshot_->optimizer(),
                                keep, write)};
    out.seconds = since(began);
    return out;
  });
  pending_ = std::move(w);
  return absl::OkStatus();
}

absl::Status Trainer::FinishCheckpoint(bool wait) {
  if (!pending_) return absl::OkStatus();
  if (!wait && pending_->done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return absl::OkStatus();
  }
  PendingWrite w = std::move(*pending_);
  pending_.reset();
  Written written = w.done.get();
  if (!written.manifest.ok()) {
    return WithContext(written.manifest.status(),
                       StrCat("checkpoint at step ", w.step, " not written: "));
  }
  // Both halves, in the run's log (bench/checkpoint_upload.sh reads the first as the loop's cost).
  Checkpointed(*written.manifest,
               StrCat("copied in ", Fixed(w.copy_seconds, 2), " s on the training loop, ",
                      "then written in ", Fixed(written.seconds, 2), " s in the background"));
  return absl::OkStatus();
}

void Trainer::Checkpointed(const CheckpointManifest& m, const std::string& how) {
  Log(StrCat("checkpoint at step ", m.step, " written: ", Fixed(m.bytes / 1048576.0, 1), " MiB ",
             how));
  result_.last_checkpoint = m.path;
  if (options_.on_checkpoint) options_.on_checkpoint(m);
}

absl::Status Trainer::Prepare() {
  const fs::path out(options_.out_dir);
  checkpoint_dir_ = (out / "checkpoints").string();
  config_path_ = (out / "config.yaml").string();
  metrics_path_ = (out / "metrics.jsonl").string();
  std::error_code ec;
  fs::create_directories(checkpoint_dir_, ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", checkpoint_dir_, ": ", ec.message()));
  for (const std::string& name : RemoveInterruptedWrites(checkpoint_dir_)) {
    Log(StrCat("removed ", name, " from ", checkpoint_dir_, ": a write that was interrupted"));
  }
  if (options_.resume) {
    CART_ASSIGN_OR_RETURN(config_, config::LoadRunConfigFile(config_path_));
    if (options_.extend_to > 0) config_.train.steps = options_.extend_to;
  }
  CART_RETURN_IF_ERROR(config::Validate(config_));
  if (config_.data.train_data.empty()) {
    return absl::InvalidArgumentError("train_data: no training token file given");
  }

  UseThreads(ThreadsFor(config_.train));
  RetainFreedMemory();
  CART_ASSIGN_OR_RETURN(device_, ResolveDevice(options_.device));
  mixed_precision_ = UsesMixedPrecision(config_.train.dtype, device_);
  // Every run says where it trains: `--device auto` falling back to the CPU used to be silent.
  Log(StrCat("device: ", DeviceLineFor(device_, mixed_precision_, options_.device)));
  step_kernels_ = options_.step_kernels.value_or(DefaultStepKernels());
  if (step_kernels_ == StepKernels::kFused && !HasFusedStepKernels()) {
    return absl::FailedPreconditionError(
        "the fused optimizer step needs LibTorch 2.4 or newer (train/optimizer.h)");
  }
  Log(step_kernels_ == StepKernels::kFused
          ? "optimizer step: fused AdamW, foreach gradient clipping"
          : "optimizer step: per-tensor AdamW and gradient clipping");
  merged_projections_ = options_.merged_projections.value_or(DefaultMergedProjections(device_));
  Log(merged_projections_ ? "projections: merged (q with kv_down, k_up with v_up, gate with up)"
                          : "projections: one matmul each");
  fixed_step_ = options_.capturable_step || options_.cuda_graph;
  if (fixed_step_ && step_kernels_ != StepKernels::kFused) {
    return absl::FailedPreconditionError(
        StrCat(options_.cuda_graph ? "a CUDA graph" : "the capturable step",
               " needs the fused optimizer step (LibTorch 2.4 or newer; train/optimizer.h)"));
  }
  if (options_.cuda_graph) {
    CART_RETURN_IF_ERROR(CudaGraph::Check(device_));
    Log(StrCat("step: recorded as a CUDA graph after ", kEagerStepsBeforeGraph,
               " steps and replayed (docs/gpu.md \"CUDA graphs\")"));
  } else if (options_.capturable_step) {
    Log("step: the capturable step, without a graph");
  }

  CART_ASSIGN_OR_RETURN(data::TokenFile train_file, data::TokenFile::Open(config_.data.train_data));
  train_file_.emplace(std::move(train_file));
  if (train_file_->info().vocab > config_.model.vocab) {
    return absl::InvalidArgumentError(
        StrCat("vocab: ", config_.model.vocab, " is smaller than the vocabulary of ",
               config_.data.train_data, " (", train_file_->info().vocab, ")"));
  }
  CART_ASSIGN_OR_RETURN(WindowReader reader,
                        WindowReader::Create(&*train_file_, config_.train.seq_len));
  reader_.emplace(reader);
  for (const auto& [name, path] : config_.data.val_data) {
    CART_ASSIGN_OR_RETURN(data::TokenFileInfo info,
                          data::ReadTokenFileInfo(data::MetadataPath(path)));
    val_sets_.push_back({name, path, info.entropy_rate_nats});
  }
  return absl::OkStatus();
}

void Trainer::BuildOptimizer() {
  // Faithfulness note 2: `all` decays every parameter (the reference code), `matrices` exempts
  // 1-D parameters (norm weights, lti.a, hyper.weights).
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model_->parameters()) {
    (config_.train.weight_decay_scope == config::WeightDecayScope::kAll || p.dim() >= 2 ? decay
                                                                                        : no_decay)
        .push_back(p);
  }
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(config_.train.lr).betas({0.9, 0.95}).weight_decay(wd).eps(1e-8));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(config_.train.weight_decay));
  if (!no_decay.empty()) groups.emplace_back(no_decay, options(0.0));
  optimizer_ =
      std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(config_.train.lr));
}

absl::StatusOr<int64_t> Trainer::RestoreOrInit() {
  if (options_.resume) {
    std::vector<std::string> problems;
    absl::StatusOr<CheckpointManifest> latest = LatestValidCheckpoint(checkpoint_dir_, &problems);
    for (const std::string& p : problems) Log("checkpoint skipped: " + p);
    if (!latest.ok()) {
      return absl::DataLossError(
          StrCat("cannot resume ", options_.out_dir, ": ", Message(latest.status()),
                 problems.empty() ? "" : " (" + StrJoin(problems, "; ") + ")"));
    }
    CART_RETURN_IF_ERROR(LoadCheckpoint(*latest, *model_, optimizer_.get()));
    reader_->set_cursor(latest->cursor);
    CART_RETURN_IF_ERROR(TruncateMetrics(metrics_path_, latest->step));
    CART_RETURN_IF_ERROR(WriteFileAtomically(config_path_, config::ToYaml(config_)));
    Log(StrCat("resumed from ", latest->path, " at step ", latest->step));
    return latest->step;
  }
  if (!options_.init_from.empty()) {
    CART_ASSIGN_OR_RETURN(
        CheckpointManifest parent,
        ImportCheckpoint(options_.init_from, (fs::path(options_.out_dir) / "parent").string(),
                         config::ToYaml(config_)));
    CART_RETURN_IF_ERROR(LoadCheckpoint(parent, *model_, nullptr));
    Log(StrCat("initialised from ", options_.init_from, " (parent step ", parent.step, ")"));
  }
  CART_RETURN_IF_ERROR(WriteFileAtomically(config_path_, config::ToYaml(config_)));
  CART_RETURN_IF_ERROR(WriteFileAtomically(metrics_path_, ""));
  return 0;
}

absl::StatusOr<Trainer::StepResult> Trainer::Step(double lr, bool log_step) {
  if (fixed_step_) return FixedStep(lr, log_step);
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  // Gradients set to none, not zero-filled: the first backward then takes its gradient buffers
  // as they come instead of filling and adding to zeros (the same values, bit for bit).
  model_->zero_grad(/*set_to_none=*/true);
  // Nothing is read to the host until the step ends: the micro-batch losses, the gradient norm
  // and (on logging steps) ρ and the per-loop norms stay on the device and are read together,
  // once, so that a GPU step waits for the device once (model/readout.h).
  std::vector<torch::Tensor> losses;
  model::DiagnosticTensors diag;
  for (int64_t a = 0; a < config_.train.accum; ++a) {
    CART_ASSIGN_OR_RETURN(Batch batch, reader_->Next(config_.train.batch));
    model::ForwardOptions fo;
    fo.loops = config_.model.R;  // training always runs R loops; R_infer is for evaluation
    fo.diagnostics = log_step && a + 1 == config_.train.accum;
    torch::Tensor loss;
    {
      MixedPrecisionScope scope(mixed_precision_, device_);
      torch::Tensor logits = model_->Forward(ToDevice(batch.x, device_), fo, &diag);
      loss = torch::nn::functional::cross_entropy(
          logits.view({-1, logits.size(-1)}).to(torch::kFloat32),
          ToDevice(batch.y, device_).view({-1}));
    }
    (loss / static_cast<double>(config_.train.accum)).backward();
    losses.push_back(loss.detach());
  }
  torch::Tensor grad_norm;
  {
    RECORD_FUNCTION(kOptimizerScope, std::vector<c10::IValue>());  // train/step_profile.h
    grad_norm = ClipGradNorm(model_->parameters(), config_.train.clip, step_kernels_);
    if (snapshot_) snapshot_->BeforeUpdate();  // a checkpoint's copies read these weights
    AdamWStep(*optimizer_, step_kernels_);
  }
  // ρ belongs to the weights the record's step names: σ(a) after the optimizer step, not the value
  // the forward pass saw before it (the per-loop norms are of that pass).
  if (log_step) diag.rho = model_->RhoTensor();
  return ReadStep(losses, grad_norm, &diag);
}

Trainer::StepResult Trainer::ReadStep(const std::vector<torch::Tensor>& losses,
                                      const torch::Tensor& grad_norm,
                                      const model::DiagnosticTensors* diag) const {
  std::vector<torch::Tensor> read = losses;
  read.push_back(grad_norm);
  if (diag != nullptr) {
    read.push_back(diag->rho);
    read.insert(read.end(), diag->h_norm.begin(), diag->h_norm.end());
    read.insert(read.end(), diag->rel_update.begin(), diag->rel_update.end());
  }
  const std::vector<double> host = model::ReadToHost(read);

  StepResult s;
  size_t i = 0;
  double loss_sum = 0;
  for (; i < losses.size(); ++i) loss_sum += host[i];
  s.loss = loss_sum / static_cast<double>(config_.train.accum);
  s.grad_norm = host[i++];
  if (diag == nullptr) return s;
  if (diag->rho.defined()) {
    s.diag.rho_max = host[i++];
    s.diag.rho_mean = host[i++];
    s.diag.rho_min = host[i++];
  }
  for (size_t r = 0; r < diag->h_norm.size(); ++r) s.diag.h_norm.push_back(host[i++]);
  for (size_t r = 0; r < diag->rel_update.size(); ++r) s.diag.rel_update.push_back(host[i++]);
  return s;
}

void Trainer::FixedStepBody() {
  FixedTensors& f = *fixed_;
  f.losses.assign(f.x.size(), torch::Tensor());
  for (size_t a = 0; a < f.x.size(); ++a) {
    model::ForwardOptions fo;
    fo.loops = config_.model.R;
    fo.diagnostics = a + 1 == f.x.size();  // every step: a graph holds one shape of work
    torch::Tensor loss;
    {
      MixedPrecisionScope scope(mixed_precision_, device_);
      torch::Tensor logits = model_->Forward(f.x[a], fo, &f.diag);
      loss = torch::nn::functional::cross_entropy(
          logits.view({-1, logits.size(-1)}).to(torch::kFloat32), f.y[a].view({-1}));
    }
    (loss / static_cast<double>(f.x.size())).backward();
    f.losses[a] = loss.detach();
  }
  RECORD_FUNCTION(kOptimizerScope, std::vector<c10::IValue>());  // train/step_profile.h
  f.grad_norm = ClipGradNorm(model_->parameters(), config_.train.clip, StepKernels::kFused);
  AdamWStepOnDevice(*optimizer_, f.adamw);
  f.diag.rho = model_->RhoTensor();
}

absl::StatusOr<Trainer::StepResult> Trainer::FixedStep(double lr, bool log_step) {
  if (!fixed_) {
    CART_ASSIGN_OR_RETURN(DeviceAdamW adamw, MakeDeviceAdamW(*optimizer_));
    fixed_.emplace();
    fixed_->adamw = std::move(adamw);
    const auto ids = torch::TensorOptions().dtype(torch::kInt64).device(device_);
    for (int64_t a = 0; a < config_.train.accum; ++a) {
      fixed_->x.push_back(torch::empty({config_.train.batch, config_.train.seq_len}, ids));
      fixed_->y.push_back(torch::empty({config_.train.batch, config_.train.seq_len}, ids));
    }
  }
  FixedTensors& f = *fixed_;
  for (int64_t a = 0; a < config_.train.accum; ++a) {
    CART_ASSIGN_OR_RETURN(Batch batch, reader_->Next(config_.train.batch));
    f.x[a].copy_(ToDevice(batch.x, device_));
    f.y[a].copy_(ToDevice(batch.y, device_));
  }
  f.adamw.lr.fill_(lr);
  for (auto& group : optimizer_->param_groups()) {  // what a checkpoint saves of the options
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  if (snapshot_) snapshot_->BeforeUpdate();  // a checkpoint's copies read these weights
  if (graph_ && !graph_failed_ && !graph_->captured() && fixed_steps_ >= kEagerStepsBeforeGraph) {
    // No checkpoint write in flight: the writer's wait on the device (another thread) during
    // the recording would end it (a stream capture forbids such calls process-wide).
    CART_RETURN_IF_ERROR(FinishCheckpoint(/*wait=*/true));
    // Gradients unset, so that the recorded backward makes them in the graph's memory, where
    // every replay writes them again.
    model_->zero_grad(/*set_to_none=*/true);
    absl::Status recorded = graph_->Capture([this] { FixedStepBody(); });
    if (recorded.ok()) {
      Log(StrCat("step recorded as a CUDA graph at step ", fixed_steps_ + 1,
                 " of this attempt; replayed from now on"));
    } else {
      graph_failed_ = true;
      Log(StrCat(Message(recorded), "; training goes on without a graph"));
    }
  }
  if (graph_ && graph_->captured()) {
    graph_->Replay();
  } else {
    model_->zero_grad(/*set_to_none=*/true);
    FixedStepBody();
  }
  CountHostSteps(*optimizer_);
  ++fixed_steps_;

  return ReadStep(f.losses, f.grad_norm, log_step ? &f.diag : nullptr);
}

MetricRecord Trainer::StepMetrics(int64_t step, double lr, const StepResult& s,
                                  double tokens_per_s) {
  MetricRecord r;
  r.step = step;
  r.values = {{"loss", s.loss},
              {"lr", lr},
              {"grad_norm", s.grad_norm},
              {"tokens_per_s", tokens_per_s},
              {"tokens", static_cast<double>(step * TokensPerStep())},
              {"epoch", static_cast<double>(reader_->epoch())},
              {"rss_mib", ResidentMiB()}};
  if (config_.model.model == config::ModelKind::kCart) {
    const bool has_rho = config_.model.lti;  // without σ(a) the carry is 1
    r.values["rho_max"] = has_rho ? s.diag.rho_max : 1.0;
    r.values["rho_mean"] = has_rho ? s.diag.rho_mean : 1.0;
    r.values["rho_min"] = has_rho ? s.diag.rho_min : 1.0;
    for (size_t i = 0; i < s.diag.h_norm.size(); ++i) {
      r.values[StrCat("h_norm/", i)] = s.diag.h_norm[i];
      r.values[StrCat("rel_update/", i)] = s.diag.rel_update[i];
    }
  }
  return r;
}

absl::StatusOr<TrainResult> Trainer::Run() {
  CART_RETURN_IF_ERROR(Prepare());
  // cuda:N is the current device for the whole run: kernels, the caching allocator and any
  // context LibTorch opens stay on N (without it a context opens on GPU 0 as well).
  const RunOnDevice on_device(device_);
  CART_ASSIGN_OR_RETURN(model_, model::BuildModel(config_.model, config_.train.seed));
  model_->to(device_);
  model_->train();
  model::SetMergedProjections(*model_, merged_projections_);
  if (options_.cuda_graph) graph_ = std::make_unique<CudaGraph>(device_);  // its stream from here
  // The graph (its memory, its stream guard) goes before on_device restores the thread's device.
  struct DropGraph {
    Trainer* trainer;
    ~DropGraph() { trainer->graph_.reset(); }
  } const drop_graph{this};
  BuildOptimizer();
  if (options_.background_checkpoints) {  // the copy a checkpoint is taken into, on the host
    CART_ASSIGN_OR_RETURN(std::shared_ptr<model::LanguageModel> copy,
                          model::BuildModel(config_.model, config_.train.seed));
    snapshot_.emplace(std::move(copy));
  }
  CART_ASSIGN_OR_RETURN(int64_t step, RestoreOrInit());
  metrics_.open(metrics_path_, std::ios::app);

  const int64_t total = config_.train.steps;
  const int64_t start_step = step;
  auto since = std::chrono::steady_clock::now();
  int64_t steps_since = 0;
  int64_t last_epoch = reader_->epoch();
  while (step < total) {
    const double lr = config::ScheduledLr(config_.train, step);
    const bool log_step = (step + 1) % config_.train.log_every == 0 || step + 1 == total;
    CART_ASSIGN_OR_RETURN(StepResult s, Step(lr, log_step));
    ++step;
    ++steps_since;
    CART_RETURN_IF_ERROR(FinishCheckpoint(/*wait=*/false));  // announce a finished write
    result_.final_loss = s.loss;
    if (options_.on_step) options_.on_step(step, s.loss);
    if (!std::isfinite(s.loss)) {
      // loss_nonfinite: a typed mark for the alert (a NaN loss is stored as no value).
      CART_RETURN_IF_ERROR(Emit({step, {{"loss", s.loss}, {"lr", lr}, {"loss_nonfinite", 1}}}));
      // Which NaN the arithmetic left is noise ("-nan"): one spelling in messages and the store.
      const double loss = std::isnan(s.loss) ? std::numeric_limits<double>::quiet_NaN() : s.loss;
      Log(DivergenceMessage(Divergence{step, loss}));
      CART_RETURN_IF_ERROR(FinishCheckpoint(/*wait=*/true));  // the last good one, if in flight
      result_.diverged = Divergence{step, loss};
      result_.steps_done = step;
      return result_;
    }
    if (reader_->epoch() != last_epoch) {
      last_epoch = reader_->epoch();
      Log(StrCat("train data exhausted at step ", step, ": starting pass ", last_epoch + 1,
                 " over ", config_.data.train_data, " (the paper's recipe is one pass)"));
    }
    if (log_step) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
      CART_RETURN_IF_ERROR(
          Emit(StepMetrics(step, lr, s, steps_since * TokensPerStep() / std::max(seconds, 1e-9))));
      since = std::chrono::steady_clock::now();
      steps_since = 0;
    }
    if (config_.train.eval_every > 0 && (step % config_.train.eval_every == 0 || step == total)) {
      CART_RETURN_IF_ERROR(Evaluate(step));
    }
    const bool stopped = (options_.stop != nullptr && options_.stop->load()) ||
                         (options_.stop_after > 0 && step - start_step >= options_.stop_after);
    const bool periodic =
        config_.train.checkpoint_every > 0 && step % config_.train.checkpoint_every == 0;
    if (options_.write_checkpoints && (periodic || stopped || step == total)) {
      CART_RETURN_IF_ERROR(Checkpoint(step));
    }
    if (stopped) break;
  }
  CART_RETURN_IF_ERROR(FinishCheckpoint(/*wait=*/true));
  if (step == start_step && step == total) Log(StrCat("nothing to do: already at step ", step));
  result_.steps_done = step;
  result_.finished = step >= total;
  return result_;
}

}  // namespace

void UseThreads(int threads) {
  // Looked up at run time: the BLAS behind libblas.so.3 is chosen by the system, not by the build.
  using SetThreads = void (*)(int);
  static const SetThreads openblas =
      reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (openblas == nullptr || std::getenv("OPENBLAS_NUM_THREADS") != nullptr) {
    torch::set_num_threads(threads);
    return;
  }
  openblas(threads);
  torch::set_num_threads(1);
}

void RetainFreedMemory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "malloc") != nullptr) return;
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

int ThreadsFor(const config::TrainConfig& config) {
  if (config.threads > 0) return static_cast<int>(config.threads);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string DivergenceMessage(const Divergence& d) {
  return StrCat("loss became ", d.loss, " at step ", d.step,
                " (diverged; lower lr or check the data)");
}

absl::StatusOr<TrainResult> Train(const RunConfig& config, const TrainOptions& options) {
  try {
    Trainer trainer(config, options);
    return trainer.Run();
  } catch (const std::exception& e) {
    return FromTorchError(e);
  }
}

}  // namespace cart::train
