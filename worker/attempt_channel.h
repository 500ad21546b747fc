#pragma once

// The stream protocol of one attempt of one run. An AttemptChannel keeps cartd's RunJob stream up
// (reconnecting with backoff), and sends on it, in this order of precedence: heartbeats, the
// metric outbox in step order, the newest checkpoint notice, log lines, and last the result, which
// goes only once every metric point is acknowledged and the newest checkpoint notice is sent. A
// new stream resends what the old one may have lost: the unacknowledged points, the checkpoint
// notice and the recent log lines (cartd stores each once). It reads cartd's controls (ack,
// cancel, drain, preempt) and how a stream ended: fenced (the attempt is no longer cartd's), the
// token refused, or a report refused as invalid, after which only the result goes, as a failure
// carrying cartd's reason.
//
// The job side (worker/job.cc) posts to it from the training thread and polls stop(). The
// channel depends on rpc/ and the metric buffer only: tests drive it against a fake cartd,
// without training (tests/worker/attempt_channel_test.cc).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cart/v1/worker.grpc.pb.h"
#include "rpc/client.h"
#include "worker/metric_buffer.h"

namespace cart::worker {

struct ChannelOptions {
  rpc::ClientConfig client;
  cart::v1::WorkerService::Stub* stub = nullptr;
  int64_t heartbeat_interval_ms = 5000;
  size_t metric_buffer_points = 1'000'000;  // unacknowledged points held before PostMetrics waits
  // After `shutdown` turns true, how long the channel keeps trying to deliver before it gives up
  // (the lease then lapses and the run resumes from its last acknowledged checkpoint elsewhere).
  int64_t shutdown_grace_ms = 120'000;
};

// How an attempt's channel ended.
struct ChannelEnd {
  bool delivered = false;  // cartd recorded the result (or closed the stream on it: fenced)
  bool fenced = false;     // cartd no longer recognises this attempt
  bool gave_up = false;    // the shutdown grace ran out first
  bool cancel_requested = false;
  bool drain_requested = false;
  bool preempted = false;  // cartd asked for the worker back for other work (Preempt)
  std::string refused;     // why cartd refused this worker's token, if it did
  std::string rejected;    // why cartd refused a report as invalid, if it did
};

// How the result's error begins when cartd refused one of the attempt's reports as invalid.
inline constexpr char kReportRejected[] = "cartd refused a report from this worker: ";

class AttemptChannel {
 public:
  AttemptChannel(const ChannelOptions& options, int64_t run_id, int32_t attempt,
                 const std::atomic<bool>& shutdown);
  // Stops the sender if Finish was never called (without delivering anything more).
  ~AttemptChannel();
  AttemptChannel(const AttemptChannel&) = delete;
  AttemptChannel& operator=(const AttemptChannel&) = delete;

  // What the attempt runs on (worker/environment.h), sent with each hello; set before Start.
  void SetEnvironment(std::vector<std::pair<std::string, std::string>> items) {
    environment_ = std::move(items);
  }
  // Starts the sender thread. Call once, before posting.
  // The attempt's energy so far (joules since it began; nullopt: no reading now) and the counter
  // it comes from ("nvml", "rapl"), sent with each heartbeat. Call before Start().
  void SetEnergy(std::function<std::optional<double>()> read, std::string source) {
    energy_read_ = std::move(read);
    energy_source_ = std::move(source);
  }
  void Start();

  // --- the job side; from one thread (the training thread) ---
  // The points of one logged step (steps non-decreasing across calls). Blocks while the outbox is
  // full, until cartd acknowledges enough or the channel gives up.
  void PostMetrics(int64_t step, std::vector<Point> points);
  // The newest checkpoint notice; it replaces one not yet sent.
  void PostCheckpoint(const cart::v1::CheckpointNotice& notice);
  void PostLog(const std::string& text);
  // Hands over the result (steps_done is set from the last posted step) and waits until cartd has
  // it, the attempt is fenced, or the shutdown grace runs out. Once.
  ChannelEnd Finish(cart::v1::JobResult result);

  // True when training should stop: cartd cancelled or preempted the run, the attempt was fenced,
  // a token or a report was refused, or shutdown was asked for (after the trainer's next step).
  const std::atomic<bool>& stop() const { return stop_; }
  bool cancel_requested() const { return cancel_requested_; }
  bool fenced() const { return fenced_; }
  bool gave_up() const { return gave_up_; }
  int64_t last_step() const { return step_; }

 private:
  using Stream = grpc::ClientReaderWriter<cart::v1::WorkerReport, cart::v1::SchedulerControl>;

  // What is waiting to go after the metrics: the newest checkpoint notice, log lines, the result.
  struct Pending {
    std::optional<cart::v1::WorkerReport> checkpoint;
    std::vector<cart::v1::LogLine> logs;
    std::optional<cart::v1::WorkerReport> result;
  };
  void SenderLoop();
  bool SendMetrics();  // one batch of unsent points; false when there were none
  Pending TakePending(bool rejected);
  void SendLogs(std::vector<cart::v1::LogLine> logs);
  // Writes the result and waits for cartd to close the stream; true when the attempt is over.
  bool DeliverResult(const cart::v1::WorkerReport& result);
  bool Connect();
  void Disconnect();
  // Waits until the reader thread has seen the stream end, or `timeout` passes.
  void WaitForReaderEnd(absl::Duration timeout);
  bool Write(const cart::v1::WorkerReport& report);
  // True once shutdown_ has been set for longer than the grace period (remembers the first sight).
  bool PastShutdownGrace();
  cart::v1::WorkerReport Report() const;

  const ChannelOptions options_;
  const int64_t run_id_;
  const int32_t attempt_;
  const std::atomic<bool>& shutdown_;
  MetricBuffer buffer_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> drain_requested_{false};
  std::atomic<bool> preempted_{false};
  std::atomic<bool> fenced_{false};
  std::atomic<bool> gave_up_{false};
  std::atomic<bool> quit_{false};  // the destructor ends the sender
  std::atomic<int64_t> step_{0};
  std::optional<std::chrono::steady_clock::time_point> shutdown_seen_;  // sender thread only

  // mu_ guards what the job, sender and reader threads share beyond the atomics above; cv_ wakes
  // the sender (new work, a control message, the reader's end).
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::string refused_ ABSL_GUARDED_BY(mu_);
  std::string rejected_ ABSL_GUARDED_BY(mu_);
  std::optional<cart::v1::CheckpointNotice> checkpoint_ ABSL_GUARDED_BY(mu_);
  bool checkpoint_sent_ ABSL_GUARDED_BY(mu_) = false;
  // Log lines: waiting to be written on the current stream, and written on an earlier one. A
  // stream can break before cartd read what was written on it, so each new stream resends the
  // newest lines written before.
  std::vector<cart::v1::LogLine> logs_ ABSL_GUARDED_BY(mu_);
  std::deque<cart::v1::LogLine> logs_written_ ABSL_GUARDED_BY(mu_);
  int64_t next_log_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::optional<cart::v1::JobResult> result_ ABSL_GUARDED_BY(mu_);
  bool delivered_ ABSL_GUARDED_BY(mu_) = false;

  // Sender thread only (the reader thread has its own stream pointer).
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<Stream> stream_;
  std::thread reader_;
  std::atomic<bool> reader_done_{false};
  std::thread sender_;
  std::vector<std::pair<std::string, std::string>> environment_;  // for each hello
  // Set before Start(), then read by the sender thread only.
  std::function<std::optional<double>()> energy_read_;
  std::string energy_source_;
};

}  // namespace cart::worker
