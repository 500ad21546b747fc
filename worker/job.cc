#include "worker/job.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/accounting.h"
#include "config/config.h"
#include "config/devices.h"
#include "data/tokenizer.h"
#include "hf/export.h"
#include "hf/harness.h"
#include "model/language_model.h"
#include "rpc/artifacts.h"
#include "train/checkpoint.h"
#include "train/eval.h"
#include "train/precision.h"
#include "train/torch_error.h"
#include "train/trainer.h"
#include "train/zero_shot.h"
#include "worker/attempt_channel.h"
#include "worker/checkpoint_uploader.h"
#include "worker/data_lineage.h"
#include "worker/environment.h"
#include "worker/shared_store.h"
#include "worker/unary_call.h"

namespace cart::worker {
namespace {

namespace fs = std::filesystem;
using cart::v1::JobResult;

// The end of an attempt that failed with `s`:
// - for want of room on this worker's disk (a write that met ENOSPC, common/file.h IsNoSpace,
//   or any failure while the cache directory is below the worker's floor): DRAINED, the run
//   handed back without counting an attempt, as the disk is the worker's fault and not the
//   run's; the worker then takes no job until it has room (worker/worker.cc);
// - out of device memory (ResourceExhausted without that mark, train/torch_error.h):
//   OUT_OF_MEMORY, so that cartd places it again with a smaller micro-batch;
// - anything else: FAILED.
JobEnd Failed(const absl::Status& s, const JobEnvironment& env) {
  JobEnd end;
  end.error = Message(s);
  const int64_t free_mib = SystemMetrics::FreeDiskMib(env.cache_dir);
  if (IsNoSpace(s) || (env.min_free_disk_mib > 0 && free_mib < env.min_free_disk_mib)) {
    end.outcome = JobResult::OUTCOME_DRAINED;
    end.no_space = true;
    end.error = StrCat("this worker's disk is full (", free_mib, " MiB free in ", env.cache_dir,
                       ", floor ", env.min_free_disk_mib, " MiB): ", Message(s),
                       "; handed back without counting an attempt");
    return end;
  }
  end.outcome = s.code() == absl::StatusCode::kResourceExhausted ? JobResult::OUTCOME_OUT_OF_MEMORY
                                                                 : JobResult::OUTCOME_FAILED;
  return end;
}

ChannelOptions ChannelOptionsFor(const JobEnvironment& env) {
  ChannelOptions o;
  o.client = env.client;
  o.stub = env.stub;
  o.heartbeat_interval_ms = env.heartbeat_interval_ms;
  o.metric_buffer_points = env.metric_buffer_points;
  o.shutdown_grace_ms = env.shutdown_grace_ms;
  return o;
}

// The job side of one attempt: runs the trainer or the evaluation on this thread and posts what
// they produce to the attempt's channel (worker/attempt_channel.h), which delivers it.
class Session {
 public:
  Session(const JobEnvironment& env, const cart::v1::Job& job, const std::atomic<bool>& shutdown)
      : env_(env),
        job_(job),
        channel_(ChannelOptionsFor(env), job.run_id(), job.attempt(), shutdown) {}

  JobEnd Run();

 private:
  JobEnd Train();
  JobEnd Evaluate();
  void SendEvalItems(const train::LoopEvaluation& e);
  // The checkpoint written as a Hugging Face model directory in the run directory, for the
  // harness (hf/export.h); its path.
  absl::StatusOr<std::string> ExportForHarness(const config::RunConfig& config,
                                               const train::CheckpointManifest& ckpt,
                                               const std::string& tokenizer_spec);
  absl::StatusOr<std::string> PrepareRunDir();
  absl::Status CheckData(const config::RunConfig& config, bool with_train);
  void OnMetrics(const train::MetricRecord& r);
  void OnCheckpoint(const train::CheckpointManifest& m, int64_t total);

  // Whether this attempt writes and reads checkpoints in cartd's shared store itself
  // (shared_dir_), said in the run's log either way when cartd has one.
  void ResolveSharedStore();
  // Checkpoint `sha256` into `file`: from the shared store when this worker sees it, else (or
  // when that fails, saying so) from cartd.
  absl::Status Fetch(const std::string& sha256, const std::string& file);
  // Stores the checkpoint at `path` where cartd keeps them; its sha256. Into the shared store
  // (then recorded by cartd) when this worker sees it, else uploaded. A shared write that fails,
  // or that cartd cannot find or verify, falls back to the upload, saying so; cartd's refusal
  // for room and an unreachable cartd are returned as they are (the uploader retries them).
  absl::StatusOr<std::string> Store(const std::string& path);
  // Hands the trainer's checkpoints to `uploader_` (or, with env.upload_inline, waits for each).
  void StartUploader();
  // Waits for the queued uploads; the reason when the final checkpoint was not stored.
  absl::Status FinishUploads();

  const JobEnvironment& env_;
  const cart::v1::Job& job_;
  AttemptChannel channel_;
  std::unique_ptr<CheckpointUploader> uploader_;
  std::string run_dir_;
  std::string shared_dir_;  // where this worker sees cartd's shared store; empty: through cartd
  // The trainer's file last written into the shared store and its sha256 (the upload thread's).
  std::pair<std::string, std::string> shared_written_;
  bool shared_unseen_ = false;  // cartd did not find a blob written there (the upload thread's)
  // For "mfu" and "mfu_6n" (Train sets them from the run's config and the device; 0: none
  // logged): training FLOPs per token by config::CountFlops and by the paper's 6N.
  double train_flops_per_token_ = 0;
  double six_n_flops_per_token_ = 0;
  double peak_tflops_ = 0;
};

void Session::OnMetrics(const train::MetricRecord& r) {
  const int64_t now = absl::ToUnixMicros(absl::Now());
  std::vector<Point> points;
  for (const auto& [name, value] : r.values) points.push_back({r.step, name, value, now});
  if (auto tps = r.values.find("tokens_per_s"); tps != r.values.end() && peak_tflops_ > 0) {
    const double mfu = config::Mfu(train_flops_per_token_, tps->second, peak_tflops_);
    if (mfu > 0) points.push_back({r.step, "mfu", mfu, now});
    const double mfu_6n = config::Mfu(six_n_flops_per_token_, tps->second, peak_tflops_);
    if (mfu_6n > 0) points.push_back({r.step, "mfu_6n", mfu_6n, now});
  }
  if (r.values.count("loss") && env_.sample_system) {
    for (const auto& [name, value] : env_.sample_system()) {
      points.push_back({r.step, name, value, now});
    }
  }
  channel_.PostMetrics(r.step, std::move(points));
}

void Session::ResolveSharedStore() {
  shared_dir_.clear();
  if (!job_.has_shared_store()) return;
  if (env_.shared_store_mount == "off") {
    channel_.PostLog("checkpoints go through cartd: cart-worker --shared-artifacts off");
    return;
  }
  absl::StatusOr<std::string> dir = SharedStoreDir(job_.shared_store(), env_.shared_store_mount);
  if (!dir.ok()) {
    channel_.PostLog(StrCat("checkpoints go through cartd: ", Message(dir.status())));
    return;
  }
  shared_dir_ = *dir;
  channel_.PostLog(StrCat("checkpoints are written to and read from the shared store at ", *dir));
}

absl::Status Session::Fetch(const std::string& sha256, const std::string& file) {
  if (!shared_dir_.empty()) {
    std::error_code ec;
    if (fs::exists(file, ec) && Sha256File(file) == sha256) return absl::OkStatus();
    absl::Status copied = CopyFromSharedStore(shared_dir_, sha256, file);
    if (copied.ok()) return copied;
    channel_.PostLog(StrCat("checkpoint ", sha256.substr(0, 12),
                            " not read from the shared store (", Message(copied),
                            "); downloading it from cartd"));
  }
  return FetchArtifact(*env_.stub, env_.client, sha256, file);
}

absl::StatusOr<std::string> Session::Store(const std::string& path) {
  if (shared_dir_.empty() || shared_unseen_) return UploadArtifact(*env_.stub, env_.client, path);
  std::error_code ec;
  const int64_t size = static_cast<int64_t>(fs::file_size(path, ec));
  // A retry after cartd could not be reached records the blob written before.
  if (shared_written_.first != path) {
    // Room first: no 1.4 GiB write for a blob cartd would refuse (and remove).
    absl::Status room = RecordSharedArtifact(*env_.stub, env_.client, "", ec ? -1 : size,
                                             /*check_only=*/true);
    auto upload_instead = [&](const absl::Status& why) {
      channel_.PostLog(StrCat("checkpoint ", path, " not written to the shared store (",
                              Message(why), "); uploading it to cartd"));
      return UploadArtifact(*env_.stub, env_.client, path);
    };
    if (absl::IsFailedPrecondition(room)) return upload_instead(room);  // no longer shared
    if (!room.ok()) return room;                                        // no room, or no cartd
    absl::StatusOr<std::string> sha = WriteToSharedStore(shared_dir_, path);
    if (!sha.ok()) return upload_instead(sha.status());
    shared_written_ = {path, *sha};
  }
  const std::string sha = shared_written_.second;
  const absl::Status recorded =
      RecordSharedArtifact(*env_.stub, env_.client, sha, ec ? -1 : size, /*check_only=*/false);
  if (recorded.ok()) return sha;
  if (absl::IsResourceExhausted(recorded)) shared_written_ = {};  // cartd removed it
  // cartd cannot see or verify what this worker wrote: it takes the bytes instead. Its refusal
  // for room, or not being reachable, is the uploader's to handle, as for an upload.
  if (absl::IsNotFound(recorded) || absl::IsDataLoss(recorded) ||
      absl::IsFailedPrecondition(recorded) || absl::IsInvalidArgument(recorded)) {
    shared_written_ = {};
    // Not where cartd looks (another filesystem under the same id): so for the whole attempt.
    shared_unseen_ = absl::IsNotFound(recorded);
    channel_.PostLog(StrCat("checkpoint ", path, " not recorded from the shared store (",
                            Message(recorded), "); uploading it to cartd",
                            shared_unseen_ ? ", and this attempt's later checkpoints too" : ""));
    return UploadArtifact(*env_.stub, env_.client, path);
  }
  return recorded;
}

void Session::StartUploader() {
  UploaderOptions o;
  o.upload = [this](const std::string& path) { return Store(path); };
  o.announce = [this](const cart::v1::CheckpointNotice& n) { channel_.PostCheckpoint(n); };
  o.log = [this](const std::string& line) { channel_.PostLog(line); };
  o.abandoned = [this] { return channel_.fenced() || channel_.gave_up(); };
  o.outbox_dir = (fs::path(run_dir_) / "outbox").string();
  o.space_wait_ms = env_.space_wait_ms;
  uploader_ = std::make_unique<CheckpointUploader>(std::move(o));
}

void Session::OnCheckpoint(const train::CheckpointManifest& m, int64_t total) {
  // The uploader takes it (a hard link) and training goes on; a final checkpoint is the last.
  const bool final = channel_.stop() || m.step >= total;
  if (absl::Status queued = uploader_->Submit({m.step, m.cursor, m.bytes, m.path}, final);
      !queued.ok()) {
    channel_.PostLog(StrCat("checkpoint at step ", m.step, " not uploaded: ", Message(queued)));
    return;
  }
  if (env_.upload_inline) uploader_->Drain().IgnoreError();  // FinishUploads reports it
}

absl::Status Session::FinishUploads() {
  if (uploader_ == nullptr) return absl::OkStatus();
  absl::Status drained = uploader_->Drain();
  // Abandoned (fenced, or out of grace): the channel says so; nothing more to report here.
  return absl::IsCancelled(drained) ? absl::OkStatus() : drained;
}

// Data lineage: the attempt's files against the run's record; those it has none for recorded.
absl::Status Session::CheckData(const config::RunConfig& config, bool with_train) {
  CART_ASSIGN_OR_RETURN(std::vector<cart::v1::DataIdentity> unrecorded,
                        CheckRunData(config, with_train, job_.data(), env_.hash_cache));
  std::vector<std::string> checked, recorded;
  for (const cart::v1::DataIdentity& d : job_.data()) {
    if (!d.sha256().empty()) checked.push_back(d.role());
  }
  for (const cart::v1::DataIdentity& d : unrecorded) {
    recorded.push_back(StrCat(d.role(), " ", d.sha256().substr(0, 12)));
  }
  if (!checked.empty() && with_train) {
    channel_.PostLog(StrCat("data matches the run's record: ", StrJoin(checked, ", ")));
  }
  if (unrecorded.empty()) return absl::OkStatus();
  absl::Status sent = SendRunData(*env_.stub, env_.client, env_.worker_id, job_.run_id(),
                                  job_.attempt(), unrecorded);
  channel_.PostLog(sent.ok() ? StrCat("data identity recorded: ", StrJoin(recorded, ", "))
                             : StrCat("data identity not recorded (the next attempt records it): ",
                                      Message(sent)));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Session::PrepareRunDir() {
  run_dir_ =
      (fs::path(env_.cache_dir) / "runs" / StrCat(job_.run_id(), "-a", job_.attempt())).string();
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
  fs::create_directories(fs::path(run_dir_) / "checkpoints", ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", run_dir_, ": ", ec.message()));
  return run_dir_;
}

JobEnd Session::Train() {
  JobEnd end;
  auto fail = [&](const absl::Status& s) { return Failed(s, env_); };
  absl::StatusOr<config::RunConfig> parsed =
      config::ParseRunConfigYaml(job_.config_yaml(), StrCat("run ", job_.run_name()));
  if (!parsed.ok()) return fail(parsed.status());
  config::RunConfig config = *parsed;
  if (job_.total_steps() > 0) config.train.steps = job_.total_steps();
  if (env_.threads > 0) config.train.threads = env_.threads;
  if (absl::Status data = CheckData(config, /*with_train=*/true); !data.ok()) return fail(data);
  absl::StatusOr<std::string> dir = PrepareRunDir();
  if (!dir.ok()) return fail(dir.status());
  train_flops_per_token_ = config::CountFlops(config.model, config.train.seq_len).train_per_token;
  six_n_flops_per_token_ = config::SixNFlopsPerToken(config.model);
  peak_tflops_ = env_.peak_tflops;
  if (peak_tflops_ <= 0 && env_.torch_device != "cpu") {
    if (std::optional<config::CardPeak> card = config::PeakOf(env_.device_name)) {
      peak_tflops_ =
          config.train.dtype == config::DType::kFloat32 ? card->fp32_tflops : card->bf16_tflops;
    }
  }

  train::TrainOptions options;
  options.out_dir = run_dir_;
  options.device = env_.torch_device;
  options.stop = &channel_.stop();
  // Written whole and atomically, not fsync'ed: cartd's store holds the durable copy, and an
  // attempt never resumes from its own local files (docs/design.md "Storage").
  options.durable_checkpoints = false;
  // The loop serializes each checkpoint into memory; a thread writes it (docs/design.md
  // "Storage"): a GPU waits for the copy to the host, not for the disk.
  options.background_checkpoints = !env_.write_inline;
  options.cuda_graph = env_.cuda_graph;
  // Old local checkpoints are deleted on the upload thread (StartUploader runs before Train).
  options.discard_checkpoint = [this](const std::string& path) { uploader_->Discard(path); };
  options.on_metrics = [this](const train::MetricRecord& r) { OnMetrics(r); };
  const int64_t total = config.train.steps;
  options.on_checkpoint = [this, total](const train::CheckpointManifest& m) {
    OnCheckpoint(m, total);
  };
  options.on_log = [this](const std::string& s) { channel_.PostLog(s); };
  const std::string artifacts = (fs::path(env_.cache_dir) / "artifacts").string();
  if (job_.has_resume_from()) {
    const auto& ref = job_.resume_from();
    const std::string file = (fs::path(artifacts) / (ref.sha256() + ".pt")).string();
    absl::Status fetched = Fetch(ref.sha256(), file);
    if (!fetched.ok()) return fail(fetched);
    absl::Status written =
        WriteFileAtomically((fs::path(run_dir_) / "config.yaml").string(), config::ToYaml(config));
    if (!written.ok()) return fail(written);
    absl::StatusOr<train::CheckpointManifest> imported = train::ImportCheckpoint(
        file, (fs::path(run_dir_) / "checkpoints").string(), config::ToYaml(config));
    if (!imported.ok()) return fail(imported.status());
    options.resume = true;
    options.extend_to = config.train.steps;
    channel_.PostLog(StrCat("resuming from step ", imported->step));
  } else if (job_.has_init_from()) {
    const std::string file = (fs::path(artifacts) / (job_.init_from().sha256() + ".pt")).string();
    absl::Status fetched = Fetch(job_.init_from().sha256(), file);
    if (!fetched.ok()) return fail(fetched);
    options.init_from = file;
  }
  StartUploader();
  absl::StatusOr<train::TrainResult> result = train::Train(config, options);
  // The checkpoints already written are worth storing whatever the trainer says next.
  const absl::Status uploads = FinishUploads();
  if (!result.ok()) return fail(result.status());
  if (!uploads.ok()) return fail(uploads);
  if (result->diverged) {
    end.outcome = JobResult::OUTCOME_FAILED;
    end.error = train::DivergenceMessage(*result->diverged);
    end.diverged.emplace();
    end.diverged->set_step(result->diverged->step);
    end.diverged->set_loss(result->diverged->loss);
    return end;
  }
  if (result->finished) {
    end.outcome = JobResult::OUTCOME_SUCCEEDED;
  } else if (channel_.cancel_requested()) {
    end.outcome = JobResult::OUTCOME_CANCELLED;
  } else {
    end.outcome = JobResult::OUTCOME_DRAINED;
  }
  if (result->leak_suspected) {
    channel_.PostLog("leak_suspected: validation loss fell below the entropy floor");
  }
  return end;
}

// Each task's per-item outcomes at this loop count go to cartd before its metrics: a loop count
// acknowledged has its items stored. A failure is logged, not fatal: the metrics still count.
void Session::SendEvalItems(const train::LoopEvaluation& e) {
  cart::v1::RecordEvalItemsRequest request;
  request.set_run_id(job_.run_id());
  request.set_attempt(job_.attempt());
  request.set_worker_id(env_.worker_id);
  for (const train::TaskResult& t : e.tasks) {
    if (t.item_correct.empty()) continue;
    cart::v1::EvalItems* items = request.add_tasks();
    items->set_task(t.name);
    items->set_loops(e.loops);
    items->set_correct(t.item_correct);
    items->set_correct_norm(t.item_correct_norm);
    items->mutable_logprob()->Add(t.item_logprob.begin(), t.item_logprob.end());
  }
  if (request.tasks_size() == 0) return;
  const absl::Status sent = CallWithRetries(env_.client, [&](grpc::ClientContext& ctx) {
    cart::v1::RecordEvalItemsResponse response;
    return env_.stub->RecordEvalItems(&ctx, request, &response);
  });
  if (!sent.ok()) {
    channel_.PostLog(
        StrCat("per-item outcomes at ", e.loops, " loops not stored: ", Message(sent)));
  }
}

absl::StatusOr<std::string> Session::ExportForHarness(const config::RunConfig& config,
                                                      const train::CheckpointManifest& ckpt,
                                                      const std::string& tokenizer_spec) {
  const std::string dir = (fs::path(run_dir_) / "hf-model").string();
  std::error_code ec;
  fs::remove_all(dir, ec);  // an earlier attempt's
  try {
    CART_ASSIGN_OR_RETURN(std::shared_ptr<model::LanguageModel> m,
                          model::BuildModel(config.model, config.train.seed));
    CART_RETURN_IF_ERROR(train::LoadCheckpoint(ckpt, *m, nullptr));
    hf::HfExportRequest request;
    request.out_dir = dir;
    request.tokenizer_spec = tokenizer_spec;
    request.source = StrCat("run ", job_.run_id(), " (", job_.run_name(), ")");
    request.step = ckpt.step;
    CART_RETURN_IF_ERROR(hf::ExportHfModel(*m, config, request));
  } catch (const std::exception& e) {
    return train::FromTorchError(e, "exporting the model for lm-eval");
  }
  return dir;
}

JobEnd Session::Evaluate() {
  JobEnd end;
  auto fail = [&](const absl::Status& s) { return Failed(s, env_); };
  absl::StatusOr<config::RunConfig> config =
      config::ParseRunConfigYaml(job_.config_yaml(), StrCat("run ", job_.run_name()));
  if (!config.ok()) return fail(config.status());
  if (!job_.has_init_from())
    return fail(absl::InvalidArgumentError("eval job without a checkpoint"));
  if (absl::Status data = CheckData(*config, /*with_train=*/false); !data.ok()) return fail(data);
  absl::StatusOr<std::string> dir = PrepareRunDir();
  if (!dir.ok()) return fail(dir.status());
  const std::string file =
      (fs::path(env_.cache_dir) / "artifacts" / (job_.init_from().sha256() + ".pt")).string();
  absl::Status fetched = Fetch(job_.init_from().sha256(), file);
  if (!fetched.ok()) return fail(fetched);
  absl::StatusOr<train::CheckpointManifest> ckpt = train::ImportCheckpoint(
      file, (fs::path(run_dir_) / "checkpoints").string(), job_.config_yaml());
  if (!ckpt.ok()) return fail(ckpt.status());
  absl::StatusOr<std::vector<data::Task>> tasks = train::LoadRunTasks(*config);
  if (!tasks.ok()) return fail(tasks.status());
  // Tasks the config names in lm_eval are scored by the harness, not by CART Lab's scorer.
  absl::StatusOr<std::vector<hf::HarnessTask>> harness_tasks = hf::HarnessTasksFor(*config);
  if (!harness_tasks.ok()) return fail(harness_tasks.status());
  for (const hf::HarnessTask& h : *harness_tasks) {
    tasks->erase(std::remove_if(tasks->begin(), tasks->end(),
                                [&](const data::Task& t) { return t.name == h.name; }),
                 tasks->end());
  }
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!tasks->empty() || !harness_tasks->empty()) {
    absl::StatusOr<std::unique_ptr<data::Tokenizer>> t = train::RunTokenizer(*config);
    if (!t.ok()) return fail(t.status());
    tokenizer = std::move(*t);
  }
  train::CheckpointEvalOptions options;
  options.device = env_.torch_device;
  options.threads = static_cast<int>(env_.threads);
  options.loops.assign(job_.eval_loops().begin(), job_.eval_loops().end());
  options.val_sets = config->data.val_data;
  options.tasks = std::move(*tasks);
  options.tokenizer = tokenizer.get();
  options.prepend_bos = config->train.eval_bos;  // the config records it with the results
  options.stop = &channel_.stop();
  if (!harness_tasks->empty()) {
    // The checkpoint as a model directory once; the harness reads it at every loop count.
    absl::StatusOr<std::string> model_dir = ExportForHarness(*config, *ckpt, tokenizer->spec());
    if (!model_dir.ok()) return fail(model_dir.status());
    channel_.PostLog(StrCat("lm-eval: ", harness_tasks->size(),
                            " task(s) scored by lm-evaluation-harness on ", *model_dir, " with ",
                            env_.python));
    options.more_tasks = [this, config = *config, dir = *model_dir, htasks = *harness_tasks](
                             int loops, train::LoopEvaluation& e) {
      hf::HarnessRequest request;
      request.python = env_.python;
      request.model_dir = dir;
      request.work_dir = (fs::path(run_dir_) / StrCat("lm-eval-", loops)).string();
      request.device = env_.torch_device;
      request.loops = config.model.model == config::ModelKind::kCart ? loops : 0;
      request.add_bos = config.train.eval_bos;
      request.tasks = htasks;
      request.batch = train::CheckpointEvalOptions().task_batch;  // as CART Lab's scorer
      request.threads = env_.threads > 0 ? env_.threads : config.train.threads;
      request.stop = &channel_.stop();
      CART_ASSIGN_OR_RETURN(std::vector<train::TaskResult> results, hf::RunHarness(request));
      for (train::TaskResult& r : results) e.tasks.push_back(std::move(r));
      return absl::OkStatus();
    };
  }
  options.on_log = [this](const std::string& s) { channel_.PostLog(s); };
  // One record per loop count (step = R_infer, so the run's series is the variable-R curve), in
  // ascending order: the outbox acknowledges by step.
  absl::Status evaluated =
      train::EvaluateCheckpoint(*config, *ckpt, options, [this](const train::LoopEvaluation& e) {
        SendEvalItems(e);
        train::MetricRecord record;
        record.step = e.loops;
        record.values = train::EvalMetrics(e);
        if (!record.values.empty()) OnMetrics(record);
      });
  // A harness ended because the job was asked to stop is a stop, not a failure.
  if (!evaluated.ok() && !(absl::IsCancelled(evaluated) && channel_.stop())) {
    return fail(evaluated);
  }
  // A drain (SIGTERM) stops an evaluation part-way: hand it back, to be evaluated again whole.
  end.outcome = channel_.cancel_requested() ? JobResult::OUTCOME_CANCELLED
                : channel_.stop()           ? JobResult::OUTCOME_DRAINED
                                            : JobResult::OUTCOME_SUCCEEDED;
  return end;
}

JobEnd Session::Run() {
  // What the attempt runs on goes with its hello: the precision its config resolves to here.
  std::string precision = "unknown (the config does not parse)";
  int64_t threads = env_.threads;
  if (absl::StatusOr<config::RunConfig> config = config::ParseRunConfigYaml(job_.config_yaml(), "");
      config.ok()) {
    const bool bf16 =
        train::UsesMixedPrecision(config->train.dtype, c10::Device(env_.torch_device));
    precision =
        StrCat(bf16 ? "bf16 autocast" : "fp32", " (dtype ", ToString(config->train.dtype), ")");
    if (threads <= 0) threads = config->train.threads;
  }
  channel_.SetEnvironment(
      AttemptEnvironment(env_.device, env_.torch_device, precision, threads, env_.cuda_graph));
  // The attempt's energy, from the start of its work (docs/operations.md "Energy").
  std::unique_ptr<EnergyMeter> meter = env_.energy_meter ? env_.energy_meter() : nullptr;
  if (meter != nullptr && !meter->source().empty()) {
    EnergyMeter* reading = meter.get();
    channel_.SetEnergy([reading] { return reading->Joules(); }, meter->source());
  }
  channel_.Start();
  if (meter != nullptr && meter->source().empty()) {
    channel_.PostLog("energy: not measured: " + meter->why_not());
  }
  ResolveSharedStore();
  JobEnd end = job_.kind() == cart::v1::JOB_KIND_EVAL ? Evaluate() : Train();
  if (!end.error.empty()) channel_.PostLog("error: " + end.error);
  JobResult result;
  result.set_outcome(end.outcome);
  result.set_error(end.error);
  if (end.diverged) *result.mutable_diverged() = *end.diverged;
  if (meter != nullptr && !meter->source().empty()) {
    if (std::optional<double> joules = meter->Joules()) {
      result.mutable_energy()->set_joules(*joules);
      result.mutable_energy()->set_source(meter->source());
    }
  }
  const ChannelEnd delivered = channel_.Finish(result);
  end.fenced = delivered.fenced;
  end.gave_up = delivered.gave_up;
  end.drain_requested = delivered.drain_requested;
  end.preempted = delivered.preempted;
  if (!delivered.refused.empty()) {
    end.error = "cartd refused this worker's token: " + delivered.refused;
  }
  if (!delivered.rejected.empty()) {
    end.outcome = JobResult::OUTCOME_FAILED;
    end.error = StrCat(kReportRejected, delivered.rejected);
  }
  return end;
}

}  // namespace

JobEnd RunJob(const JobEnvironment& env, const cart::v1::Job& job,
              const std::atomic<bool>& shutdown) {
  Session session(env, job, shutdown);
  return session.Run();
}

absl::Status FetchArtifact(cart::v1::WorkerService::Stub& stub, const rpc::ClientConfig& client,
                           const std::string& sha256, const std::string& path) {
  if (fs::exists(path) && Sha256File(path) == sha256) return absl::OkStatus();
  // cartd bounds the downloads one token streams at once (max_downloads_per_caller): a refusal
  // is waited out for a while, and never read as the device running out of memory (which
  // ResourceExhausted means to the attempt, see Failed above).
  absl::Status last;
  int64_t backoff_ms = 500;
  for (int i = 0; i < 8; ++i) {
    grpc::ClientContext context;
    rpc::PrepareContext(context, client, 0);
    cart::v1::GetArtifactRequest request;
    request.set_sha256(sha256);
    auto reader = stub.GetArtifact(&context, request);
    last = rpc::ReceiveArtifact(*reader, path, sha256, StrCat("artifact ", sha256)).status();
    if (!absl::IsResourceExhausted(last) || IsNoSpace(last)) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 8000);
  }
  return absl::UnavailableError(StrCat("cartd is busy: ", Message(last)));
}

absl::Status RecordSharedArtifact(cart::v1::WorkerService::Stub& stub,
                                  const rpc::ClientConfig& client, const std::string& sha256,
                                  int64_t size_bytes, bool check_only) {
  grpc::ClientContext context;
  rpc::PrepareContext(context, client, 0);
  cart::v1::RecordArtifactRequest request;
  request.set_sha256(sha256);
  request.set_size_bytes(size_bytes);
  request.set_check_only(check_only);
  cart::v1::RecordArtifactResponse response;
  return rpc::FromGrpc(stub.RecordArtifact(&context, request, &response));
}

absl::StatusOr<std::string> UploadArtifact(cart::v1::WorkerService::Stub& stub,
                                           const rpc::ClientConfig& client,
                                           const std::string& path) {
  grpc::ClientContext context;
  rpc::PrepareContext(context, client, 0);
  cart::v1::PutArtifactResponse response;
  auto writer = stub.PutArtifact(&context, &response);
  absl::StatusOr<std::string> sha = rpc::SendArtifact(*writer, path);
  const grpc::Status finished = writer->Finish();
  CART_RETURN_IF_ERROR(sha.status());
  CART_RETURN_IF_ERROR(rpc::FromGrpc(finished));
  return sha;
}

}  // namespace cart::worker
