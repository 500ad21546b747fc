#include "worker/job.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/file.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/config.h"
#include "model/language_model.h"
#include "rpc/artifacts.h"
#include "train/checkpoint.h"
#include "train/eval.h"
#include "train/trainer.h"
#include "train/zero_shot.h"
#include "worker/metric_buffer.h"

namespace cart::worker {
namespace {

namespace fs = std::filesystem;
using cart::v1::JobResult;
using cart::v1::SchedulerControl;
using cart::v1::WorkerReport;

constexpr size_t kBatchPoints = 2000;
// Log lines a new stream resends at most (the newest; cartd drops the ones it has).
constexpr size_t kMaxResentLogLines = 1000;
// How the attempt's error begins when cartd refused one of its reports as invalid.
constexpr char kRejected[] = "cartd refused a report from this worker: ";

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Session {
 public:
  Session(const JobEnvironment& env, const cart::v1::Job& job, const std::atomic<bool>& shutdown)
      : env_(env), job_(job), shutdown_(shutdown), buffer_(env.metric_buffer_points) {}

  JobEnd Run();

 private:
  using Stream = grpc::ClientReaderWriter<WorkerReport, SchedulerControl>;

  // --- the trainer side (runs on the training thread) ---
  JobEnd Train();
  JobEnd Evaluate();
  absl::StatusOr<std::string> PrepareRunDir();
  void OnMetrics(const train::MetricRecord& r);
  void OnCheckpoint(const train::CheckpointManifest& m, int64_t total);
  void Log(const std::string& text);

  // --- the stream side (runs on the sender thread) ---
  // What is waiting to go after the metrics: the newest checkpoint notice, log lines, the result.
  struct Pending {
    std::optional<WorkerReport> checkpoint;
    std::vector<cart::v1::LogLine> logs;
    std::optional<WorkerReport> result;
  };
  void SenderLoop();
  bool SendMetrics();  // one batch of unsent points; false when there were none
  Pending TakePending(bool rejected);
  void SendLogs(std::vector<cart::v1::LogLine> logs);
  // Writes the result and waits for cartd to close the stream; true when the attempt is over.
  bool DeliverResult(const WorkerReport& result);
  bool Connect();
  void Disconnect();
  // Waits until the reader thread has seen the stream end, or `timeout` passes.
  void WaitForReaderEnd(absl::Duration timeout);
  bool Write(const WorkerReport& report);
  // True once shutdown_ has been set for longer than the grace period (remembers the first sight).
  bool PastShutdownGrace();
  WorkerReport Report() const {
    WorkerReport r;
    r.set_run_id(job_.run_id());
    r.set_attempt(job_.attempt());
    return r;
  }

  const JobEnvironment& env_;
  const cart::v1::Job& job_;
  const std::atomic<bool>& shutdown_;
  MetricBuffer buffer_;
  std::atomic<bool> stop_training_{false};
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> drain_requested_{false};
  std::atomic<bool> fenced_{false};
  std::atomic<bool> gave_up_{false};  // the shutdown grace ran out
  std::optional<std::chrono::steady_clock::time_point> shutdown_seen_;  // sender thread only
  std::atomic<int64_t> step_{0};
  std::string run_dir_;

  // mu_ guards what the trainer, sender and reader threads share beyond the atomics above; cv_
  // wakes the sender (new work, a control message, the reader's end).
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::string refused_ ABSL_GUARDED_BY(mu_);   // why cartd refused our token, if it did
  std::string rejected_ ABSL_GUARDED_BY(mu_);  // why cartd refused a report as invalid, if it did
  // The newest checkpoint notice, resent on reconnect.
  std::optional<cart::v1::CheckpointNotice> checkpoint_ ABSL_GUARDED_BY(mu_);
  bool checkpoint_sent_ ABSL_GUARDED_BY(mu_) = false;
  // Log lines: waiting to be written on the current stream, and written on an earlier one. A
  // stream can break before cartd read what was written on it, so each new stream resends the
  // lines written before; cartd stores a line once per (attempt, seq).
  std::vector<cart::v1::LogLine> logs_ ABSL_GUARDED_BY(mu_);
  std::deque<cart::v1::LogLine> logs_written_
      ABSL_GUARDED_BY(mu_);  // the newest kMaxResentLogLines
  int64_t next_log_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::optional<JobResult> result_ ABSL_GUARDED_BY(mu_);  // set when the work is over
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the result was delivered (or we were fenced)

  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<Stream> stream_;
  std::thread reader_;
  std::atomic<bool> reader_done_{false};
};

bool Session::Write(const WorkerReport& report) {
  if (stream_ == nullptr) return false;
  if (!stream_->Write(report)) {
    Disconnect();
    return false;
  }
  return true;
}

void Session::WaitForReaderEnd(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!reader_done_ && !cv_.WaitWithDeadline(&mu_, deadline)) {
  }
}

bool Session::Connect() {
  context_ = std::make_unique<grpc::ClientContext>();
  rpc::PrepareContext(*context_, env_.client, 0);
  stream_ = env_.stub->RunJob(context_.get());
  WorkerReport hello = Report();
  hello.mutable_hello();
  reader_done_ = false;
  if (!stream_->Write(hello)) {
    Disconnect();
    return false;
  }
  reader_ = std::thread([this, stream = stream_.get()] {
    SchedulerControl control;
    while (stream->Read(&control)) {
      if (control.has_ack()) {
        buffer_.Ack(control.ack().acked_step());
      } else if (control.has_cancel()) {
        cancel_requested_ = true;
        stop_training_ = true;
      } else if (control.has_drain()) {
        drain_requested_ = true;
      }
      cv_.SignalAll();
    }
    absl::MutexLock lock(&mu_);  // under mu_, so that WaitForReaderEnd cannot miss the signal
    reader_done_ = true;
    cv_.SignalAll();
  });
  buffer_.Rewind();
  absl::MutexLock lock(&mu_);
  checkpoint_sent_ = false;
  logs_.insert(logs_.begin(), logs_written_.begin(), logs_written_.end());
  logs_written_.clear();
  return true;
}

void Session::Disconnect() {
  if (stream_ == nullptr) return;
  // When cartd ended the stream, its status says why (FAILED_PRECONDITION: fenced); give the
  // reader a moment to see that end before cancelling, which would hide it behind CANCELLED.
  WaitForReaderEnd(absl::Seconds(2));
  if (!reader_done_) context_->TryCancel();
  if (reader_.joinable()) reader_.join();
  grpc::Status status = stream_->Finish();
  if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
      status.error_code() == grpc::StatusCode::NOT_FOUND) {
    // cartd no longer recognises this attempt (lease expired and the run moved on): fencing.
    fenced_ = true;
    stop_training_ = true;
  } else if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
             status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    // This token may not report on the attempt (e.g. a worker token whose name does not cover
    // this worker id): reconnecting cannot help, and the lease will lapse. Stop.
    absl::MutexLock lock(&mu_);
    refused_ = status.error_message();
    fenced_ = true;
    stop_training_ = true;
  } else if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    // cartd refused something we sent as invalid (say, a metric name an older cartd does not
    // accept). The same report would be refused again after a reconnect, so stop training, drop
    // the undelivered metrics and end the attempt FAILED with cartd's reason.
    absl::MutexLock lock(&mu_);
    if (rejected_.empty()) rejected_ = status.error_message();
    stop_training_ = true;
    buffer_.Close();
  }
  stream_.reset();
  context_.reset();
}

bool Session::PastShutdownGrace() {
  if (!shutdown_) return false;
  stop_training_ = true;  // also when the trainer is blocked in a full outbox
  const auto now = std::chrono::steady_clock::now();
  if (!shutdown_seen_) shutdown_seen_ = now;
  if (now - *shutdown_seen_ < std::chrono::milliseconds(env_.shutdown_grace_ms)) return false;
  if (!gave_up_.exchange(true)) {
    buffer_.Close();  // wakes a trainer waiting for room
    cv_.SignalAll();
  }
  return true;
}

void Session::SenderLoop() {
  int64_t backoff_ms = 200;
  auto next_heartbeat = std::chrono::steady_clock::now();
  while (!fenced_ && !PastShutdownGrace()) {
    if (stream_ == nullptr) {
      if (!Connect()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
        // Capped low: a restarted cartd keeps leases for one TTL, so reconnect well within it.
        backoff_ms = std::min<int64_t>(backoff_ms * 2, 1000);
        continue;
      }
      backoff_ms = 200;
    }
    if (reader_done_) {  // the server closed the stream (restart, network cut)
      Disconnect();
      continue;
    }
    if (std::chrono::steady_clock::now() >= next_heartbeat) {
      WorkerReport r = Report();
      r.mutable_heartbeat()->set_step(step_);
      next_heartbeat =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(env_.heartbeat_interval_ms);
      if (!Write(r)) continue;
    }
    bool rejected;
    {
      absl::MutexLock lock(&mu_);
      rejected = !rejected_.empty();
    }
    // Metrics first, in step order (none once cartd refused a report: only the result goes).
    if (!rejected && SendMetrics()) continue;
    Pending pending = TakePending(rejected);
    if (pending.checkpoint) {
      if (Write(*pending.checkpoint)) {
        absl::MutexLock lock(&mu_);
        checkpoint_sent_ = true;
      }
      continue;
    }
    SendLogs(std::move(pending.logs));
    if (pending.result) {
      if (DeliverResult(*pending.result)) return;
      continue;  // not confirmed: reconnect and send it again
    }
    absl::MutexLock lock(&mu_);
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
  }
  Disconnect();
}

bool Session::SendMetrics() {
  std::vector<Point> batch = buffer_.NextBatch(kBatchPoints);
  if (batch.empty()) return false;
  WorkerReport r = Report();
  for (const Point& p : batch) {
    auto* m = r.mutable_metrics()->add_points();
    m->set_step(p.step);
    m->set_name(p.name);
    m->set_value(p.value);
    m->set_wall_time_us(p.wall_time_us);
  }
  Write(r);
  return true;
}

Session::Pending Session::TakePending(bool rejected) {
  Pending pending;
  absl::MutexLock lock(&mu_);
  if (checkpoint_ && !checkpoint_sent_ && !rejected) {
    pending.checkpoint = Report();
    *pending.checkpoint->mutable_checkpoint() = *checkpoint_;
  }
  // Lines wait while a checkpoint notice goes first.
  if (!pending.checkpoint && !rejected) pending.logs.swap(logs_);
  // The result goes last, once every metric is acknowledged and the newest checkpoint sent;
  // after a refusal, at once, as a failure that carries cartd's reason.
  if (result_ && (rejected || (buffer_.unacked() == 0 && (!checkpoint_ || checkpoint_sent_) &&
                               !pending.checkpoint))) {
    pending.result = Report();
    *pending.result->mutable_result() = *result_;
    if (rejected) {
      pending.result->mutable_result()->set_outcome(JobResult::OUTCOME_FAILED);
      pending.result->mutable_result()->set_error(StrCat(kRejected, rejected_));
    }
  }
  return pending;
}

void Session::SendLogs(std::vector<cart::v1::LogLine> logs) {
  for (size_t i = 0; i < logs.size(); ++i) {
    WorkerReport r = Report();
    *r.mutable_log() = logs[i];
    const bool written = Write(r);  // (Write may disconnect, which takes mu_)
    absl::MutexLock lock(&mu_);
    if (!written) {  // not written: first in line for the next stream
      logs_.insert(logs_.begin(), logs.begin() + static_cast<std::ptrdiff_t>(i), logs.end());
      return;
    }
    logs_written_.push_back(logs[i]);
    if (logs_written_.size() > kMaxResentLogLines) logs_written_.pop_front();
  }
}

bool Session::DeliverResult(const WorkerReport& result) {
  if (!Write(result)) return false;
  stream_->WritesDone();
  // cartd closes the stream once the result is recorded.
  WaitForReaderEnd(absl::Seconds(30));
  if (reader_.joinable()) reader_.join();
  grpc::Status status = stream_->Finish();
  stream_.reset();
  context_.reset();
  if (status.ok() || status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
      status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    // Recorded, or fenced, or refused as invalid (resending cannot help: the lease lapses).
    absl::MutexLock l(&mu_);
    finished_ = true;
    return true;
  }
  return false;
}

void Session::Log(const std::string& text) {
  cart::v1::LogLine line;
  line.set_text(ValidUtf8(text));  // a proto string must be UTF-8, or the stream breaks
  line.set_wall_time_us(WallMicros());
  absl::MutexLock lock(&mu_);
  line.set_seq(next_log_seq_++);
  logs_.push_back(line);
  cv_.SignalAll();
}

void Session::OnMetrics(const train::MetricRecord& r) {
  step_ = r.step;
  const int64_t now = WallMicros();
  std::vector<Point> points;
  for (const auto& [name, value] : r.values) points.push_back({r.step, name, value, now});
  if (r.values.count("loss") && env_.sample_system) {
    for (const auto& [name, value] : env_.sample_system()) {
      points.push_back({r.step, name, value, now});
    }
  }
  buffer_.Add(std::move(points));
  cv_.SignalAll();
  if (shutdown_) stop_training_ = true;
}

void Session::OnCheckpoint(const train::CheckpointManifest& m, int64_t total) {
  // Upload with retries; a non-final checkpoint that cannot be uploaded is skipped (the next
  // one will be), a final one is retried until cartd takes it or fences us.
  const bool final = stop_training_ || m.step >= total;
  int64_t backoff_ms = 200;
  for (int attempt = 0; !fenced_ && !gave_up_; ++attempt) {
    absl::StatusOr<std::string> sha = UploadArtifact(*env_.stub, env_.client, m.path);
    if (sha.ok()) {
      cart::v1::CheckpointNotice notice;
      notice.mutable_checkpoint()->set_step(m.step);
      notice.mutable_checkpoint()->set_sha256(*sha);
      notice.mutable_checkpoint()->set_size_bytes(m.bytes);
      notice.set_cursor(m.cursor);
      notice.set_final(final);
      absl::MutexLock lock(&mu_);
      checkpoint_ = notice;
      checkpoint_sent_ = false;
      cv_.SignalAll();
      return;
    }
    if (!final && attempt >= 3) {
      Log(StrCat("checkpoint at step ", m.step, " not uploaded: ", Message(sha.status())));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 5000);
  }
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
  auto fail = [&](const absl::Status& s) {
    end.outcome = s.code() == absl::StatusCode::kResourceExhausted
                      ? JobResult::OUTCOME_OUT_OF_MEMORY
                      : JobResult::OUTCOME_FAILED;
    end.error = Message(s);
    return end;
  };
  absl::StatusOr<model::RunConfig> parsed =
      model::ParseRunConfigYaml(job_.config_yaml(), StrCat("run ", job_.run_name()));
  if (!parsed.ok()) return fail(parsed.status());
  model::RunConfig config = *parsed;
  if (job_.total_steps() > 0) config.train.steps = job_.total_steps();
  if (env_.threads > 0) config.train.threads = env_.threads;
  absl::StatusOr<std::string> dir = PrepareRunDir();
  if (!dir.ok()) return fail(dir.status());

  train::TrainOptions options;
  options.out_dir = run_dir_;
  options.device = env_.torch_device;
  options.stop = &stop_training_;
  options.on_metrics = [this](const train::MetricRecord& r) { OnMetrics(r); };
  const int64_t total = config.train.steps;
  options.on_checkpoint = [this, total](const train::CheckpointManifest& m) {
    OnCheckpoint(m, total);
  };
  options.on_log = [this](const std::string& s) { Log(s); };
  const std::string artifacts = (fs::path(env_.cache_dir) / "artifacts").string();
  if (job_.has_resume_from()) {
    const auto& ref = job_.resume_from();
    const std::string file = (fs::path(artifacts) / (ref.sha256() + ".pt")).string();
    absl::Status fetched = FetchArtifact(*env_.stub, env_.client, ref.sha256(), file);
    if (!fetched.ok()) return fail(fetched);
    absl::Status written =
        WriteFileAtomically((fs::path(run_dir_) / "config.yaml").string(), model::ToYaml(config));
    if (!written.ok()) return fail(written);
    absl::StatusOr<train::CheckpointManifest> imported = train::ImportCheckpoint(
        file, (fs::path(run_dir_) / "checkpoints").string(), model::ToYaml(config));
    if (!imported.ok()) return fail(imported.status());
    options.resume = true;
    options.extend_to = config.train.steps;
    Log(StrCat("resuming from step ", imported->step));
  } else if (job_.has_init_from()) {
    const std::string file = (fs::path(artifacts) / (job_.init_from().sha256() + ".pt")).string();
    absl::Status fetched = FetchArtifact(*env_.stub, env_.client, job_.init_from().sha256(), file);
    if (!fetched.ok()) return fail(fetched);
    options.init_from = file;
  }
  absl::StatusOr<train::TrainResult> result = train::Train(config, options);
  if (!result.ok()) return fail(result.status());
  if (result->finished) {
    end.outcome = JobResult::OUTCOME_SUCCEEDED;
  } else if (cancel_requested_) {
    end.outcome = JobResult::OUTCOME_CANCELLED;
  } else {
    end.outcome = JobResult::OUTCOME_DRAINED;
  }
  if (result->leak_suspected) Log("leak_suspected: validation loss fell below the entropy floor");
  return end;
}

JobEnd Session::Evaluate() {
  JobEnd end;
  auto fail = [&](const absl::Status& s) {
    end.outcome = JobResult::OUTCOME_FAILED;
    end.error = Message(s);
    return end;
  };
  absl::StatusOr<model::RunConfig> config =
      model::ParseRunConfigYaml(job_.config_yaml(), StrCat("run ", job_.run_name()));
  if (!config.ok()) return fail(config.status());
  if (!job_.has_init_from())
    return fail(absl::InvalidArgumentError("eval job without a checkpoint"));
  absl::StatusOr<std::string> dir = PrepareRunDir();
  if (!dir.ok()) return fail(dir.status());
  const std::string file =
      (fs::path(env_.cache_dir) / "artifacts" / (job_.init_from().sha256() + ".pt")).string();
  absl::Status fetched = FetchArtifact(*env_.stub, env_.client, job_.init_from().sha256(), file);
  if (!fetched.ok()) return fail(fetched);
  try {
    train::UseThreads(env_.threads > 0 ? static_cast<int>(env_.threads)
                                       : train::ThreadsFor(config->train));
    absl::StatusOr<std::shared_ptr<model::LanguageModel>> m =
        model::BuildModel(config->model, config->train.seed);
    if (!m.ok()) return fail(m.status());
    absl::StatusOr<train::CheckpointManifest> ckpt = train::ImportCheckpoint(
        file, (fs::path(run_dir_) / "checkpoints").string(), job_.config_yaml());
    if (!ckpt.ok()) return fail(ckpt.status());
    absl::Status loaded = train::LoadCheckpoint(*ckpt, **m, nullptr);
    if (!loaded.ok()) return fail(loaded);
    std::vector<int> loops(job_.eval_loops().begin(), job_.eval_loops().end());
    if (loops.empty()) loops.push_back(config->model.effective_R_infer());
    absl::StatusOr<std::vector<data::Task>> tasks = train::LoadRunTasks(*config);
    if (!tasks.ok()) return fail(tasks.status());
    std::unique_ptr<data::Tokenizer> tokenizer;
    if (!tasks->empty()) {
      absl::StatusOr<std::unique_ptr<data::Tokenizer>> t = train::RunTokenizer(*config);
      if (!t.ok()) return fail(t.status());
      tokenizer = std::move(*t);
    }
    // One record per loop count (step = R_infer, so the run's series is the variable-R curve),
    // in ascending order: the outbox acknowledges by step, so steps must never go back. It holds
    // the zero-shot task metrics (named after the task; the config records eval_bos) and the
    // perplexity of every validation set.
    std::sort(loops.begin(), loops.end());
    loops.erase(std::unique(loops.begin(), loops.end()), loops.end());
    for (int r : loops) {
      if (stop_training_) break;
      train::MetricRecord record;
      record.step = r;
      for (const data::Task& task : *tasks) {
        train::ZeroShotOptions options;
        options.loops = r;
        options.max_len = config->train.seq_len;
        options.prepend_bos = config->train.eval_bos;
        absl::StatusOr<train::TaskResult> t = train::EvaluateTask(**m, *tokenizer, task, options);
        if (!t.ok()) return fail(t.status());
        record.values[StrCat("task_acc/", task.name)] = t->acc;
        if (task.kind == data::TaskKind::kLambada) {
          record.values[StrCat("task_ppl/", task.name)] = t->perplexity;
        } else {
          record.values[StrCat("task_acc_norm/", task.name)] = t->acc_norm;
        }
      }
      for (const auto& [name, path] : config->data.val_data) {
        absl::StatusOr<train::PerplexityResult> p = train::EvaluatePerplexity(
            **m, path, config->train.seq_len, config->train.eval_sequences, r);
        if (!p.ok()) return fail(p.status());
        record.values[StrCat("val_loss/", name)] = p->mean_loss;
        record.values[StrCat("val_ppl/", name)] = p->perplexity;
      }
      if (!record.values.empty()) OnMetrics(record);
    }
  } catch (const c10::Error& e) {
    return fail(absl::InternalError(StrCat("LibTorch error: ", e.what_without_backtrace())));
  }
  // A drain (SIGTERM) stops an evaluation part-way: hand it back, to be evaluated again whole.
  end.outcome = cancel_requested_ ? JobResult::OUTCOME_CANCELLED
                : stop_training_  ? JobResult::OUTCOME_DRAINED
                                  : JobResult::OUTCOME_SUCCEEDED;
  return end;
}

JobEnd Session::Run() {
  std::thread sender([this] { SenderLoop(); });
  JobEnd end = job_.kind() == cart::v1::JOB_KIND_EVAL ? Evaluate() : Train();
  if (!end.error.empty()) Log("error: " + end.error);
  {
    absl::MutexLock lock(&mu_);
    JobResult result;
    result.set_outcome(end.outcome);
    result.set_error(end.error);
    result.set_steps_done(step_);
    result_ = result;
    cv_.SignalAll();
  }
  sender.join();
  buffer_.Close();
  end.fenced = fenced_;
  end.gave_up = gave_up_;
  end.drain_requested = drain_requested_;
  {
    absl::MutexLock lock(&mu_);
    if (!refused_.empty()) end.error = "cartd refused this worker's token: " + refused_;
    if (!rejected_.empty()) {
      end.outcome = JobResult::OUTCOME_FAILED;
      end.error = StrCat(kRejected, rejected_);
    }
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
  grpc::ClientContext context;
  rpc::PrepareContext(context, client, 0);
  cart::v1::GetArtifactRequest request;
  request.set_sha256(sha256);
  auto reader = stub.GetArtifact(&context, request);
  return rpc::ReceiveArtifact(*reader, path, sha256, StrCat("artifact ", sha256)).status();
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
