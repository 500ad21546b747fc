#include "worker/attempt_channel.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/strings.h"

namespace cart::worker {
namespace {

using cart::v1::JobResult;
using cart::v1::SchedulerControl;
using cart::v1::WorkerReport;

constexpr size_t kBatchPoints = 2000;
// Log lines a new stream resends at most (the newest; cartd drops the ones it has).
constexpr size_t kMaxResentLogLines = 1000;

}  // namespace

AttemptChannel::AttemptChannel(const ChannelOptions& options, int64_t run_id, int32_t attempt,
                               const std::atomic<bool>& shutdown)
    : options_(options),
      run_id_(run_id),
      attempt_(attempt),
      shutdown_(shutdown),
      buffer_(options.metric_buffer_points) {}

AttemptChannel::~AttemptChannel() {
  if (!sender_.joinable()) return;
  quit_ = true;
  buffer_.Close();
  cv_.SignalAll();
  sender_.join();
}

void AttemptChannel::Start() {
  sender_ = std::thread([this] { SenderLoop(); });
}

WorkerReport AttemptChannel::Report() const {
  WorkerReport r;
  r.set_run_id(run_id_);
  r.set_attempt(attempt_);
  return r;
}

void AttemptChannel::PostMetrics(int64_t step, std::vector<Point> points) {
  step_ = step;
  buffer_.Add(std::move(points));
  cv_.SignalAll();
  if (shutdown_) stop_ = true;
}

void AttemptChannel::PostCheckpoint(const cart::v1::CheckpointNotice& notice) {
  absl::MutexLock lock(&mu_);
  checkpoint_ = notice;
  checkpoint_sent_ = false;
  cv_.SignalAll();
}

void AttemptChannel::PostLog(const std::string& text) {
  cart::v1::LogLine line;
  line.set_text(ValidUtf8(text));  // a proto string must be UTF-8, or the stream breaks
  line.set_wall_time_us(absl::ToUnixMicros(absl::Now()));
  absl::MutexLock lock(&mu_);
  line.set_seq(next_log_seq_++);
  logs_.push_back(line);
  cv_.SignalAll();
}

ChannelEnd AttemptChannel::Finish(JobResult result) {
  {
    absl::MutexLock lock(&mu_);
    result.set_steps_done(step_);
    result_ = result;
    cv_.SignalAll();
  }
  if (sender_.joinable()) sender_.join();
  buffer_.Close();
  ChannelEnd end;
  end.fenced = fenced_;
  end.gave_up = gave_up_;
  end.cancel_requested = cancel_requested_;
  end.drain_requested = drain_requested_;
  end.preempted = preempted_;
  absl::MutexLock lock(&mu_);
  end.delivered = delivered_;
  end.refused = refused_;
  end.rejected = rejected_;
  return end;
}

bool AttemptChannel::Write(const WorkerReport& report) {
  if (stream_ == nullptr) return false;
  if (!stream_->Write(report)) {
    Disconnect();
    return false;
  }
  return true;
}

void AttemptChannel::WaitForReaderEnd(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (!reader_done_ && !cv_.WaitWithDeadline(&mu_, deadline)) {
  }
}

bool AttemptChannel::Connect() {
  context_ = std::make_unique<grpc::ClientContext>();
  rpc::PrepareContext(*context_, options_.client, 0);
  stream_ = options_.stub->RunJob(context_.get());
  WorkerReport hello = Report();
  for (const auto& [key, value] : environment_) {
    cart::v1::EnvironmentItem* item = hello.mutable_hello()->add_environment();
    item->set_key(key);
    item->set_value(value);
  }
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
        stop_ = true;
      } else if (control.has_drain()) {
        drain_requested_ = true;
      } else if (control.has_preempt()) {
        // Training stops at the next step with a checkpoint there; the result is DRAINED.
        preempted_ = true;
        stop_ = true;
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

void AttemptChannel::Disconnect() {
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
    stop_ = true;
  } else if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
             status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    // This token may not report on the attempt (e.g. a worker token whose name does not cover
    // this worker id): reconnecting cannot help, and the lease will lapse. Stop.
    absl::MutexLock lock(&mu_);
    refused_ = status.error_message();
    fenced_ = true;
    stop_ = true;
  } else if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    // cartd refused something we sent as invalid (say, a metric name an older cartd does not
    // accept). The same report would be refused again after a reconnect, so stop training, drop
    // the undelivered metrics and end the attempt FAILED with cartd's reason.
    absl::MutexLock lock(&mu_);
    if (rejected_.empty()) rejected_ = status.error_message();
    stop_ = true;
    buffer_.Close();
  }
  stream_.reset();
  context_.reset();
}

bool AttemptChannel::PastShutdownGrace() {
  if (!shutdown_) return false;
  stop_ = true;  // also when the trainer is blocked in a full outbox
  const auto now = std::chrono::steady_clock::now();
  if (!shutdown_seen_) shutdown_seen_ = now;
  if (now - *shutdown_seen_ < std::chrono::milliseconds(options_.shutdown_grace_ms)) return false;
  if (!gave_up_.exchange(true)) {
    buffer_.Close();  // wakes a trainer waiting for room
    cv_.SignalAll();
  }
  return true;
}

void AttemptChannel::SenderLoop() {
  int64_t backoff_ms = 200;
  auto next_heartbeat = std::chrono::steady_clock::now();
  while (!quit_ && !fenced_ && !PastShutdownGrace()) {
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
      if (energy_read_) {
        if (std::optional<double> joules = energy_read_()) {
          r.mutable_heartbeat()->mutable_energy()->set_joules(*joules);
          r.mutable_heartbeat()->mutable_energy()->set_source(energy_source_);
        }
      }
      next_heartbeat = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(options_.heartbeat_interval_ms);
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

bool AttemptChannel::SendMetrics() {
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

AttemptChannel::Pending AttemptChannel::TakePending(bool rejected) {
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
      pending.result->mutable_result()->set_error(StrCat(kReportRejected, rejected_));
    }
  }
  return pending;
}

void AttemptChannel::SendLogs(std::vector<cart::v1::LogLine> logs) {
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

bool AttemptChannel::DeliverResult(const WorkerReport& result) {
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
    delivered_ = true;
    return true;
  }
  return false;
}

}  // namespace cart::worker
