// worker::AttemptChannel, the stream protocol of one attempt, against a fake cartd: a real gRPC
// server on loopback whose RunJob the test scripts (acknowledge or not, break the stream, fence,
// refuse a report, cancel). No training runs: the test posts what a trainer would.

#include "worker/attempt_channel.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::worker {
namespace {

using ::cart::testing::WaitUntil;
using cart::v1::JobResult;
using cart::v1::SchedulerControl;
using cart::v1::WorkerReport;

// What the fake cartd does with one stream; the default acknowledges every metric batch and
// records the result, as cartd does.
struct StreamScript {
  bool ack = true;
  bool cancel_after_hello = false;
  bool preempt_after_hello = false;
  // Ends the stream with this status when the first metric batch arrives (OK: keep going).
  grpc::Status on_metrics = grpc::Status::OK;
};

class FakeCartd final : public cart::v1::WorkerService::Service {
 public:
  // `scripts[i]` drives stream i (0-based); streams past the list get the default.
  explicit FakeCartd(std::vector<StreamScript> scripts) : scripts_(std::move(scripts)) {}

  grpc::Status RunJob(grpc::ServerContext*,
                      grpc::ServerReaderWriter<SchedulerControl, WorkerReport>* stream) override {
    int index;
    {
      absl::MutexLock lock(&mu_);
      index = streams_++;
    }
    const StreamScript script =
        index < static_cast<int>(scripts_.size()) ? scripts_[index] : StreamScript{};
    WorkerReport r;
    while (stream->Read(&r)) {
      {
        absl::MutexLock lock(&mu_);
        reports_.push_back({index, r});
      }
      if (r.has_hello() && script.cancel_after_hello) {
        SchedulerControl c;
        c.mutable_cancel();
        stream->Write(c);
      }
      if (r.has_hello() && script.preempt_after_hello) {
        SchedulerControl c;
        c.mutable_preempt()->set_reason("run 9 waits at priority 5 > 1");
        stream->Write(c);
      }
      if (r.has_metrics()) {
        if (!script.on_metrics.ok()) return script.on_metrics;
        if (script.ack) {
          int64_t top = 0;
          for (const auto& p : r.metrics().points()) top = std::max(top, p.step());
          SchedulerControl c;
          c.mutable_ack()->set_acked_step(top);
          stream->Write(c);
        }
      }
      if (r.has_result()) return grpc::Status::OK;  // recorded: cartd closes the stream
    }
    return grpc::Status::OK;
  }

  struct Seen {
    int stream;
    WorkerReport report;
  };
  std::vector<Seen> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  int streams() {
    absl::MutexLock lock(&mu_);
    return streams_;
  }

 private:
  const std::vector<StreamScript> scripts_;
  absl::Mutex mu_;
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Seen> reports_ ABSL_GUARDED_BY(mu_);
};

class AttemptChannelTest : public ::testing::Test {
 protected:
  void Serve(std::vector<StreamScript> scripts) {
    cartd_ = std::make_unique<FakeCartd>(std::move(scripts));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(cartd_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = cart::v1::WorkerService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    options_.stub = stub_.get();
    options_.heartbeat_interval_ms = 60'000;  // out of the way: the tests count reports
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  static std::vector<Point> Points(int64_t step) {
    return {{step, "loss", 1.0 / static_cast<double>(step), 0}, {step, "lr", 1e-3, 0}};
  }
  static JobResult Outcome(JobResult::Outcome o) {
    JobResult r;
    r.set_outcome(o);
    return r;
  }
  static cart::v1::CheckpointNotice Notice(int64_t step) {
    cart::v1::CheckpointNotice n;
    n.mutable_checkpoint()->set_step(step);
    n.mutable_checkpoint()->set_sha256(std::string(64, 'a'));
    n.set_final(true);
    return n;
  }

  std::unique_ptr<FakeCartd> cartd_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<cart::v1::WorkerService::Stub> stub_;
  ChannelOptions options_;
  std::atomic<bool> shutdown_{false};
};

TEST_F(AttemptChannelTest, SendsMetricsThenTheCheckpointThenLogsAndTheResultLast) {
  Serve({});
  AttemptChannel channel(options_, 7, 2, shutdown_);
  channel.Start();
  for (int64_t step = 1; step <= 3; ++step) channel.PostMetrics(step, Points(step));
  channel.PostCheckpoint(Notice(3));
  channel.PostLog("finished");
  const ChannelEnd end = channel.Finish(Outcome(JobResult::OUTCOME_SUCCEEDED));
  EXPECT_TRUE(end.delivered);
  EXPECT_FALSE(end.fenced || end.gave_up || end.cancel_requested);

  const auto seen = cartd_->reports();
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.front().report.has_hello());
  int points = 0, checkpoint_at = -1, log_at = -1, result_at = -1;
  for (size_t i = 0; i < seen.size(); ++i) {
    const WorkerReport& r = seen[i].report;
    EXPECT_EQ(r.run_id(), 7);
    EXPECT_EQ(r.attempt(), 2);
    if (r.has_metrics()) {
      EXPECT_EQ(checkpoint_at, -1) << "a metric batch after the checkpoint notice";
      points += r.metrics().points_size();
    }
    if (r.has_checkpoint()) checkpoint_at = static_cast<int>(i);
    if (r.has_log()) log_at = static_cast<int>(i);
    if (r.has_result()) result_at = static_cast<int>(i);
  }
  EXPECT_EQ(points, 6);
  ASSERT_GE(checkpoint_at, 0);
  ASSERT_GE(log_at, 0);
  EXPECT_LT(checkpoint_at, log_at);  // log lines wait while a checkpoint notice goes first
  EXPECT_EQ(result_at, static_cast<int>(seen.size()) - 1);
  EXPECT_EQ(seen.back().report.result().outcome(), JobResult::OUTCOME_SUCCEEDED);
  EXPECT_EQ(seen.back().report.result().steps_done(), 3);
  EXPECT_EQ(seen[log_at].report.log().text(), "finished");
  EXPECT_EQ(seen[log_at].report.log().seq(), 1);
}

// The first stream breaks after taking a batch it never acknowledged: the next stream carries the
// same points again, the log line written on the first, and the checkpoint notice, and the result
// goes only on it, after the acknowledgement.
TEST_F(AttemptChannelTest, ANewStreamResendsWhatTheBrokenOneMayHaveLost) {
  StreamScript breaks;
  breaks.ack = false;
  breaks.on_metrics = grpc::Status(grpc::StatusCode::UNAVAILABLE, "cartd restarting");
  Serve({breaks});
  AttemptChannel channel(options_, 1, 1, shutdown_);
  channel.PostLog("before the break");  // queued before the first stream exists
  channel.Start();
  ASSERT_TRUE(WaitUntil([&] { return cartd_->streams() >= 1; }));
  channel.PostMetrics(1, Points(1));
  channel.PostMetrics(2, Points(2));
  ASSERT_TRUE(WaitUntil([&] { return cartd_->streams() >= 2; }));
  channel.PostCheckpoint(Notice(2));
  const ChannelEnd end = channel.Finish(Outcome(JobResult::OUTCOME_SUCCEEDED));
  EXPECT_TRUE(end.delivered);

  std::vector<int64_t> second_stream_steps;
  int logs_on_second = 0, results = 0;
  for (const auto& s : cartd_->reports()) {
    if (s.report.has_result()) {
      ++results;
      EXPECT_EQ(s.stream, cartd_->streams() - 1) << "the result went on a broken stream";
    }
    if (s.stream == 0) continue;
    if (s.report.has_metrics()) {
      for (const auto& p : s.report.metrics().points()) second_stream_steps.push_back(p.step());
    }
    if (s.report.has_log() && s.report.log().text() == "before the break") ++logs_on_second;
  }
  EXPECT_EQ(results, 1);
  // Steps 1 and 2, two points each, all sent again after the break.
  EXPECT_EQ(second_stream_steps, (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_GE(logs_on_second, 1);
}

// cartd takes the points but never acknowledges them: the result must not go, since points it
// has not stored would be lost with the attempt. Only shutdown's grace ends the wait.
TEST_F(AttemptChannelTest, TheResultWaitsUntilEveryPointIsAcknowledged) {
  StreamScript silent;
  silent.ack = false;
  Serve({silent});
  options_.shutdown_grace_ms = 200;
  AttemptChannel channel(options_, 1, 1, shutdown_);
  channel.Start();
  channel.PostMetrics(1, Points(1));
  ASSERT_TRUE(WaitUntil([&] {
    for (const auto& s : cartd_->reports()) {
      if (s.report.has_metrics()) return true;
    }
    return false;
  }));
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    shutdown_ = true;
  });
  const ChannelEnd end = channel.Finish(Outcome(JobResult::OUTCOME_SUCCEEDED));
  later.join();
  EXPECT_TRUE(end.gave_up);
  EXPECT_FALSE(end.delivered);
  for (const auto& s : cartd_->reports()) {
    EXPECT_FALSE(s.report.has_result()) << "the result went before its points were stored";
  }
}

TEST_F(AttemptChannelTest, CancelFromCartdStopsTraining) {
  StreamScript cancel;
  cancel.cancel_after_hello = true;
  Serve({cancel});
  AttemptChannel channel(options_, 1, 1, shutdown_);
  channel.Start();
  EXPECT_TRUE(WaitUntil([&] { return channel.stop().load() && channel.cancel_requested(); }));
  const ChannelEnd end = channel.Finish(Outcome(JobResult::OUTCOME_CANCELLED));
  EXPECT_TRUE(end.cancel_requested);
  EXPECT_TRUE(end.delivered);
  EXPECT_EQ(cartd_->reports().back().report.result().outcome(), JobResult::OUTCOME_CANCELLED);
}

// A preempt stops training as a cancel does, but it is no cancel and no drain: the job hands the
// run back DRAINED and the worker asks for the next job.
TEST_F(AttemptChannelTest, PreemptFromCartdStopsTrainingWithoutCancellingOrDraining) {
  StreamScript preempt;
  preempt.preempt_after_hello = true;
  Serve({preempt});
  AttemptChannel channel(options_, 1, 1, shutdown_);
  channel.Start();
  EXPECT_TRUE(WaitUntil([&] { return channel.stop().load(); }));
  EXPECT_FALSE(channel.cancel_requested());
  const ChannelEnd end = channel.Finish(Outcome(JobResult::OUTCOME_DRAINED));
  EXPECT_TRUE(end.preempted);
  EXPECT_FALSE(end.cancel_requested);
  EXPECT_FALSE(end.drain_requested);
  EXPECT_TRUE(end.delivered);
  EXPECT_EQ(cartd_->reports().back().report.result().outcome(), JobResult::OUTCOME_DRAINED);
}

// cartd ends the stream with FAILED_PRECONDITION: the attempt is no longer its. Training stops
// and the channel ends without delivering (another attempt owns the run).
TEST_F(AttemptChannelTest, AFencedAttemptStopsAndEndsWithoutItsResult) {
  StreamScript fence;
  fence.on_metrics = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "attempt 1 is stale");
  Serve({fence});
  AttemptChannel channel(options_, 1, 1, shutdown_);
  channel.Start();
  channel.PostMetrics(1, Points(1));
  EXPECT_TRUE(WaitUntil([&] { return channel.fenced() && channel.stop().load(); }));
  const ChannelEnd end = channel.Finish(Outcome(JobResult::OUTCOME_CANCELLED));
  EXPECT_TRUE(end.fenced);
  EXPECT_FALSE(end.delivered);
  EXPECT_EQ(cartd_->streams(), 1) << "a fenced attempt reconnected";
  for (const auto& s : cartd_->reports()) EXPECT_FALSE(s.report.has_result());
}

// cartd refuses a report as invalid: the same report would be refused again, so metrics stop,
// and the result goes on the next stream as a failure that carries cartd's reason.
TEST_F(AttemptChannelTest, AReportRefusedAsInvalidEndsTheAttemptFailedWithTheReason) {
  StreamScript refuse;
  refuse.on_metrics =
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "metric name 'x y' is not allowed");
  Serve({refuse});
  AttemptChannel channel(options_, 1, 1, shutdown_);
  channel.Start();
  channel.PostMetrics(1, Points(1));
  EXPECT_TRUE(WaitUntil([&] { return channel.stop().load(); }));
  channel.PostMetrics(2, Points(2));  // the trainer's next step: dropped, not blocked
  const ChannelEnd end = channel.Finish(Outcome(JobResult::OUTCOME_SUCCEEDED));
  EXPECT_EQ(end.rejected, "metric name 'x y' is not allowed");
  const WorkerReport last = cartd_->reports().back().report;
  ASSERT_TRUE(last.has_result());
  EXPECT_EQ(last.result().outcome(), JobResult::OUTCOME_FAILED);
  EXPECT_EQ(last.result().error(),
            std::string(kReportRejected) + "metric name 'x y' is not allowed");
  for (const auto& s : cartd_->reports()) {
    if (s.stream > 0) {
      EXPECT_FALSE(s.report.has_metrics()) << "metrics sent after the refusal";
    }
  }
}

// Nothing is ever acknowledged and shutdown is asked for: the channel stops training at once and
// gives up after the grace, so that a SIGTERM'd worker exits.
TEST_F(AttemptChannelTest, ShutdownGivesUpAfterTheGraceWhenNothingIsAcknowledged) {
  StreamScript silent;
  silent.ack = false;
  Serve({silent, silent, silent});
  options_.shutdown_grace_ms = 300;
  options_.metric_buffer_points = 4;
  AttemptChannel channel(options_, 1, 1, shutdown_);
  channel.Start();
  channel.PostMetrics(1, Points(1));
  channel.PostMetrics(2, Points(2));  // the outbox is full now
  shutdown_ = true;
  EXPECT_TRUE(WaitUntil([&] { return channel.stop().load(); }));
  channel.PostMetrics(3, Points(3));  // would block for ever without the grace
  const ChannelEnd end = channel.Finish(Outcome(JobResult::OUTCOME_DRAINED));
  EXPECT_TRUE(end.gave_up);
  EXPECT_FALSE(end.delivered);
}

}  // namespace
}  // namespace cart::worker
