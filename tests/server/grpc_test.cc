// The gRPC services in-process on 127.0.0.1 port 0, driven by a C++ fake worker: registration,
// leasing, the RunJob stream (acks, resends, controls, fencing), artifacts, metric streaming,
// results tables, reflection and shutdown.

#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "common/sha256.h"
#include "common/strings.h"
#include "common/version.h"
#include "server/internal/services.h"
#include "server/scheduler.h"
#include "store/run_store.h"
#include "tests/server/server_fixture.h"

namespace cart::server::testing {
namespace {

using ::testing::ElementsAre;

std::string Sha256Hex(std::string_view bytes) {
  Sha256 hash;
  hash.Update(bytes);
  return hash.HexDigest();
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string data(n, '\0');
  for (char& c : data) c = static_cast<char>(rng() & 0xff);
  return data;
}

// Reads controls until an ack for `step` (or anything else) arrives.
int64_t ReadAck(FakeWorker::Stream& stream) {
  v1::SchedulerControl control;
  if (!stream.Read(&control)) return -1;
  return control.has_ack() ? control.ack().acked_step() : -2;
}

// Every "loss" point of a run, from StreamMetrics without follow.
std::vector<v1::MetricPoint> LossPoints(v1::SchedulerService::Stub* stub, int64_t run_id) {
  grpc::ClientContext context;
  Prepare(context, "");
  v1::StreamMetricsRequest request;
  request.set_run_id(run_id);
  request.add_names("loss");
  auto reader = stub->StreamMetrics(&context, request);
  std::vector<v1::MetricPoint> points;
  v1::MetricBatchView view;
  while (reader->Read(&view))
    points.insert(points.end(), view.points().begin(), view.points().end());
  EXPECT_TRUE(reader->Finish().ok());
  return points;
}

class GrpcTest : public ServerFixture {
 protected:
  // Submits a one-run sweep, registers `worker` and leases the run to it.
  v1::Job LeaseOne(FakeWorker& worker, const std::string& sweep = "s") {
    Submit(TinySweep(sweep));
    EXPECT_TRUE(worker.Register().ok());
    std::optional<v1::Job> job;
    grpc::Status status = worker.Acquire(0, &job);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(job.has_value());
    return job.value_or(v1::Job{});
  }
};

TEST_F(GrpcTest, WorkerRegistersAcquiresAndGetsMetricsAcked) {
  auto worker = MakeWorker("w1");
  grpc::ClientContext context;
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.mutable_device()->set_memory_mib(8192);
  v1::RegisterWorkerResponse timing;
  ASSERT_TRUE(worker->stub()->RegisterWorker(&context, request, &timing).ok());
  EXPECT_EQ(timing.lease_ttl_ms(), 60'000);
  EXPECT_EQ(timing.heartbeat_interval_ms(), 15'000);

  v1::Job job = LeaseOne(*worker);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.run_name(), "s/0");
  EXPECT_EQ(job.kind(), v1::JOB_KIND_TRAIN);
  EXPECT_THAT(job.config_yaml(), ::testing::HasSubstr("steps: 10"));
  EXPECT_EQ(job.total_steps(), 10);
  EXPECT_FALSE(job.has_resume_from());

  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Metrics({{0, 5.0}, {1, 4.0}, {2, 3.5}}));
  EXPECT_EQ(ReadAck(*stream), 2);
  EXPECT_EQ(GetRun(job.run_id()).state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(LossPoints(scheduler_.get(), job.run_id()).size(), 3u);
}

// A worker's FAILED result with a divergence reaches the run over the wire: FAILED at once, the
// step and loss in the run's view, and a resume over gRPC needs a change.
// What a worker says of itself is bounded, each refusal naming the field and its limit: a 4 MiB
// host name made every ListWorkers answer megabytes long, 2^44 + 1 MiB of memory registered as
// 1 MiB (MiB × 2^20 overflowed), and a speed of 5e-324 planned runs never to finish.
TEST_F(GrpcTest, AWorkersRegistrationIsBoundedFieldByField) {
  auto worker = MakeWorker("w-bounds");
  auto attempt = [&](const std::function<void(v1::RegisterWorkerRequest&)>& change) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id("w-bounds");
    request.set_hostname("box");
    request.mutable_device()->set_kind("cuda");
    request.mutable_device()->set_memory_mib(24 * 1024);
    change(request);
    grpc::ClientContext context;
    Prepare(context, worker_token_);
    v1::RegisterWorkerResponse response;
    return worker->stub()->RegisterWorker(&context, request, &response);
  };
  struct Case {
    std::function<void(v1::RegisterWorkerRequest&)> change;
    std::string says;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.set_hostname(std::string(4 << 20, 'h')); },
       "hostname is 4194304 bytes; at most 255"},
      {[](auto& r) { r.mutable_device()->set_name(std::string(300, 'n')); },
       "device.name is 300 bytes; at most 256"},
      {[](auto& r) { r.mutable_device()->set_memory_mib((int64_t{1} << 44) + 1); },
       "device.memory_mib is 17592186044417; at most 1073741824"},
      {[](auto& r) { r.mutable_device()->set_memory_reserve_mib(48 * 1024); },
       "device.memory_reserve_mib (49152) is more than device.memory_mib (24576)"},
      {[](auto& r) { r.set_free_disk_mib(-1); }, "free_disk_mib is -1"},
      {[](auto& r) { r.mutable_device()->set_speed_factor(5e-324); },
       "speed_factor must be 0 (measure it) or between 1e-6 and 1000"},
      {[](auto& r) { r.mutable_device()->set_libtorch_major(200); },
       "device.libtorch_major is 200; allowed 0 (not said) to 99"},
  };
  for (const Case& c : cases) {
    const grpc::Status refused = attempt(c.change);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.says;
    EXPECT_THAT(refused.error_message(), ::testing::HasSubstr(c.says));
  }
  // Within the bounds it registers.
  EXPECT_TRUE(attempt([](auto& r) { r.mutable_device()->set_speed_factor(0.25); }).ok());
}

// Version skew at registration: cartd says which release and worker protocol it is; a worker of
// an older protocol than min_worker_protocol (one that sends none is protocol 1, the releases
// before the number) is refused, naming both versions, before it can take a run.
class ProtocolTest : public GrpcTest {
 protected:
  void Configure(ServerConfig& config) override { config.min_worker_protocol = 2; }
};

TEST_F(ProtocolTest, AWorkerOfAnOlderProtocolIsRefusedNamingBothVersions) {
  auto worker = MakeWorker("w-skew");
  auto attempt = [&](int protocol, v1::RegisterWorkerResponse* response) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id("w-skew");
    request.set_hostname("oldbox");
    request.set_version("0.0.9");
    request.set_protocol(protocol);
    request.mutable_device()->set_kind("cuda");
    request.mutable_device()->set_memory_mib(24 * 1024);
    grpc::ClientContext context;
    Prepare(context, worker_token_);
    return worker->stub()->RegisterWorker(&context, request, response);
  };
  v1::RegisterWorkerResponse response;
  const grpc::Status old = attempt(0, &response);
  EXPECT_EQ(old.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(old.error_message(),
              ::testing::HasSubstr(StrCat("cart-worker 0.0.9 speaks worker protocol 1; this cartd ",
                                          kVersion, " (protocol ", kWorkerProtocol, ")")));
  EXPECT_THAT(old.error_message(), ::testing::HasSubstr("upgrade cart-worker on 'oldbox'"));
  EXPECT_TRUE(server_->scheduler().WorkerIds().empty()) << "a refused worker was registered";
  const grpc::Status current = attempt(kWorkerProtocol, &response);
  ASSERT_TRUE(current.ok()) << current.error_message();
  EXPECT_EQ(response.cartd_version(), kVersion);
  EXPECT_EQ(response.protocol(), kWorkerProtocol);
}

TEST_F(GrpcTest, ADivergenceReportedOnTheStreamFailsTheRunAndResumeNeedsAChange) {
  auto worker = MakeWorker("w1");
  ASSERT_TRUE(worker->Register().ok());
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Metrics({{0, 5.0}, {1, 4.0}}));
  EXPECT_EQ(ReadAck(*stream), 1);
  v1::WorkerReport result;
  result.mutable_result()->set_outcome(v1::JobResult::OUTCOME_FAILED);
  result.mutable_result()->set_error(
      "loss became inf at step 3 (diverged; lower lr or check the data)");
  result.mutable_result()->mutable_diverged()->set_step(3);
  result.mutable_result()->mutable_diverged()->set_loss(std::numeric_limits<double>::infinity());
  ASSERT_TRUE(stream->Send(result));
  ASSERT_TRUE(stream->Finish().ok());
  const v1::RunView run = GetRun(job.run_id());
  EXPECT_EQ(run.state(), v1::RUN_STATE_FAILED);
  EXPECT_EQ(run.attempt(), 1);
  ASSERT_TRUE(run.has_diverged());
  EXPECT_EQ(run.diverged().step(), 3);
  EXPECT_EQ(run.diverged().loss(), std::numeric_limits<double>::infinity());

  v1::ResumeRunRequest resume;
  resume.set_run_id(job.run_id());
  v1::RunResponse answer;
  {
    grpc::ClientContext context;
    Prepare(context, user_token_);
    const grpc::Status refused = scheduler_->ResumeRun(&context, resume, &answer);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("diverged (loss inf at step 3)"));
  }
  resume.add_set("lr=1e-4");
  grpc::ClientContext context;
  Prepare(context, user_token_);
  ASSERT_TRUE(scheduler_->ResumeRun(&context, resume, &answer).ok());
  EXPECT_EQ(answer.run().state(), v1::RUN_STATE_QUEUED);
  EXPECT_FALSE(answer.run().has_diverged());
}

TEST_F(GrpcTest, EnergyCartdCannotTakeNeverFailsTheReportItCameWith) {
  auto worker = MakeWorker("w1");
  ASSERT_TRUE(worker->Register().ok());
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  v1::WorkerReport beat;
  beat.mutable_heartbeat()->set_step(1);
  beat.mutable_heartbeat()->mutable_energy()->set_joules(12.5);
  beat.mutable_heartbeat()->mutable_energy()->set_source("nvml");
  ASSERT_TRUE(stream->Send(beat));
  // A counter cartd does not know (a newer worker's): dropped, the stream goes on.
  beat.mutable_heartbeat()->mutable_energy()->set_source("a-meter-from-the-future");
  beat.mutable_heartbeat()->mutable_energy()->set_joules(20);
  ASSERT_TRUE(stream->Send(beat));
  ASSERT_TRUE(stream->Metrics({{0, 5.0}, {1, 4.0}}));
  EXPECT_EQ(ReadAck(*stream), 1);
  v1::WorkerReport result;
  result.mutable_result()->set_outcome(v1::JobResult::OUTCOME_SUCCEEDED);
  result.mutable_result()->mutable_energy()->set_joules(-1);  // malformed: dropped too
  result.mutable_result()->mutable_energy()->set_source("nvml");
  ASSERT_TRUE(stream->Send(result));
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_EQ(GetRun(job.run_id()).state(), v1::RUN_STATE_SUCCEEDED);
  v1::GetRunRequest get;
  get.set_run_id(job.run_id());
  v1::GetRunResponse details;
  grpc::ClientContext context;
  Prepare(context, user_token_);
  ASSERT_TRUE(scheduler_->GetRun(&context, get, &details).ok());
  ASSERT_EQ(details.attempts_size(), 1);
  EXPECT_TRUE(details.attempts(0).energy_measured());
  EXPECT_EQ(details.attempts(0).energy_j(), 12.5);  // the one good reading
  EXPECT_EQ(details.spending().measured_attempts(), 1);
}

TEST_F(GrpcTest, ListRunsShowsAFinishedRunsLastStepAndLatestValuesAfterARestart) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  // log_every need not divide steps: the last record is at step 8 of 10.
  ASSERT_TRUE(stream->Metrics({{4, 4.0}, {8, 3.25}}));
  EXPECT_EQ(ReadAck(*stream), 8);
  ASSERT_TRUE(stream->Finish(v1::JobResult::OUTCOME_SUCCEEDED).ok());
  // A restarted cartd has no in-memory progress: the list reads it from the store.
  server_.reset();
  auto restarted = RunServer(config_);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  server_ = std::move(*restarted);
  scheduler_ = v1::SchedulerService::NewStub(Channel());
  grpc::ClientContext context;
  Prepare(context, "");
  v1::ListRunsRequest request;
  request.set_sweep("s");
  v1::ListRunsResponse response;
  ASSERT_TRUE(scheduler_->ListRuns(&context, request, &response).ok());
  ASSERT_EQ(response.runs_size(), 1);
  const v1::RunView& run = response.runs(0);
  EXPECT_EQ(run.state(), v1::RUN_STATE_SUCCEEDED);
  EXPECT_EQ(run.step(), 10);  // was 0 before the paged read: `cart runs ls` showed 0%
  EXPECT_EQ(run.latest().at("loss"), 3.25);
  EXPECT_EQ(run.worker_id(), "w1");
}

// ForecastRuns over gRPC: one finish per run asked for, and a run without work refused naming it.
TEST_F(GrpcTest, ForecastRunsAnswersPerRunAndRefusesARunWithoutWork) {
  auto worker = MakeWorker("w1");
  ASSERT_TRUE(worker->Register().ok());
  v1::ForecastRunsRequest request;
  request.add_runs()->set_rtx3090_hours(0.5);
  request.add_runs()->set_rtx3090_hours(0.25);
  {
    grpc::ClientContext context;
    Prepare(context, "");
    v1::ForecastRunsResponse response;
    ASSERT_TRUE(scheduler_->ForecastRuns(&context, request, &response).ok());
    ASSERT_EQ(response.expected_finish_us_size(), 2);
    EXPECT_GT(response.expected_finish_us(0), 0);
    EXPECT_GT(response.expected_finish_us(1), 0);
  }
  request.add_runs()->set_rtx3090_hours(0);
  grpc::ClientContext context;
  Prepare(context, "");
  v1::ForecastRunsResponse response;
  const grpc::Status refused = scheduler_->ForecastRuns(&context, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("run 2 has rtx3090_hours 0"));
}

TEST_F(GrpcTest, ListRunsAndGetSweepPageABigSweep) {
  Submit("name: p\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\nseeds: [1, 2, 3, 4, 5]\n");
  grpc::ClientContext context;
  Prepare(context, "");
  v1::ListRunsRequest request;
  request.set_sweep("p");
  request.set_limit(2);
  request.set_offset(2);
  v1::ListRunsResponse response;
  ASSERT_TRUE(scheduler_->ListRuns(&context, request, &response).ok());
  EXPECT_EQ(response.total(), 5);
  ASSERT_EQ(response.runs_size(), 2);
  EXPECT_EQ(response.runs(0).name(), "p/2");
  EXPECT_EQ(response.runs(1).name(), "p/3");
  grpc::ClientContext get_context;
  Prepare(get_context, "");
  v1::GetSweepRequest get;
  get.set_name("p");
  get.set_run_limit(1);
  v1::GetSweepResponse sweep;
  ASSERT_TRUE(scheduler_->GetSweep(&get_context, get, &sweep).ok());
  EXPECT_EQ(sweep.runs_size(), 1);
  // A submit may ask for only the first runs back; its counts still cover every run.
  for (bool dry_run : {true, false}) {
    grpc::ClientContext submit_context;
    Prepare(submit_context, "");
    v1::SubmitSweepRequest submit;
    submit.set_spec_yaml(
        "name: q\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\nseeds: [1, 2, 3]\n");
    submit.set_dry_run(dry_run);
    submit.set_run_limit(1);
    v1::SubmitSweepResponse submitted;
    ASSERT_TRUE(scheduler_->SubmitSweep(&submit_context, submit, &submitted).ok());
    ASSERT_EQ(submitted.runs_size(), 1) << "dry run " << dry_run;
    EXPECT_EQ(submitted.runs(0).name(), "q/0");
    EXPECT_EQ(submitted.sweep().runs_by_state().at("QUEUED"), 3);
  }
  grpc::ClientContext bad_context;
  Prepare(bad_context, "");
  request.set_offset(-1);
  EXPECT_EQ(scheduler_->ListRuns(&bad_context, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcTest, MetricsResentAfterAReconnectAreStoredOnce) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  {
    auto stream = worker->Open(job.run_id(), job.attempt());
    ASSERT_TRUE(stream->Metrics({{0, 5.0}, {1, 4.0}, {2, 3.0}}));
    EXPECT_EQ(ReadAck(*stream), 2);
    stream->Cancel();  // the connection drops
    stream->Finish();
  }
  // The worker reconnects under the same lease and resends everything, plus new steps.
  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Metrics({{0, 99.0}, {1, 99.0}, {2, 99.0}, {3, 2.5}, {4, 2.0}}));
  EXPECT_EQ(ReadAck(*stream), 4);
  std::vector<v1::MetricPoint> points = LossPoints(scheduler_.get(), job.run_id());
  ASSERT_EQ(points.size(), 5u);
  EXPECT_EQ(points[0].value(), 5.0);  // the first copy of a step is kept
  EXPECT_EQ(points[4].value(), 2.0);
}

TEST_F(GrpcTest, CancelIsPushedDownTheStreamAndTheRunEndsCancelled) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Metrics({{0, 5.0}}));
  ASSERT_EQ(ReadAck(*stream), 0);  // the stream is attached and RUNNING

  grpc::ClientContext context;
  Prepare(context, user_token_);
  v1::CancelRunRequest cancel;
  cancel.set_run_id(job.run_id());
  cancel.set_reason("bad lr");
  v1::RunResponse response;
  ASSERT_TRUE(scheduler_->CancelRun(&context, cancel, &response).ok());

  v1::SchedulerControl control;
  ASSERT_TRUE(stream->Read(&control));
  ASSERT_TRUE(control.has_cancel());
  EXPECT_EQ(control.cancel().reason(), "bad lr");

  EXPECT_TRUE(stream->Finish(v1::JobResult::OUTCOME_CANCELLED).ok());
  EXPECT_EQ(GetRun(job.run_id()).state(), v1::RUN_STATE_CANCELLED);
}

TEST_F(GrpcTest, DrainIsPushedToTheWorkersStream) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Metrics({{0, 5.0}}));
  ASSERT_EQ(ReadAck(*stream), 0);
  grpc::ClientContext context;
  Prepare(context, user_token_);
  v1::DrainWorkerRequest drain;
  drain.set_worker_id("w1");
  v1::DrainWorkerResponse response;
  ASSERT_TRUE(scheduler_->DrainWorker(&context, drain, &response).ok());
  v1::SchedulerControl control;
  ASSERT_TRUE(stream->Read(&control));
  EXPECT_TRUE(control.has_drain());
  // The next AcquireJob answers with the drain mark (a field, not an error's wording) and no job.
  std::optional<v1::Job> none;
  bool drained = false;
  EXPECT_TRUE(worker->Acquire(0, &none, &drained).ok());
  EXPECT_TRUE(drained);
  EXPECT_FALSE(none.has_value());
}

TEST_F(GrpcTest, StaleAttemptIsRejectedAndItsStreamClosed) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker, "stale");
  // The run's current attempt is 1; attempt 2 does not exist (a worker from the future or past).
  auto stale = worker->Open(job.run_id(), job.attempt() + 1);
  grpc::Status status = stale->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("stale"));

  // A live stream whose lease was taken back is closed at its next report.
  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Metrics({{0, 5.0}}));
  ASSERT_EQ(ReadAck(*stream), 0);
  clock_.Advance(absl::Minutes(5));  // past the start-up grace and the lease
  CART_ASSERT_OK_AND_ASSIGN(auto expired, server_->scheduler().ExpireLeases());
  ASSERT_EQ(expired.size(), 1u);
  ASSERT_TRUE(stream->Metrics({{1, 4.0}}));
  v1::SchedulerControl control;
  while (stream->Read(&control)) {
  }
  status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(GrpcTest, CheckpointUploadAndDownloadAreHashVerified) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  const std::string data = RandomBytes(2 * kMiB + 12345, 7);  // three chunks
  const std::string sha = Sha256Hex(data);
  v1::PutArtifactResponse put;
  grpc::Status status = worker->Put(data, sha, data.size(), &put);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(put.sha256(), sha);
  EXPECT_EQ(put.size_bytes(), static_cast<int64_t>(data.size()));
  // Idempotent: the same blob again is accepted at once.
  EXPECT_TRUE(worker->Put(data, sha, data.size()).ok());

  std::string back;
  ASSERT_TRUE(worker->Get(sha, &back).ok());
  EXPECT_EQ(back.size(), data.size());
  EXPECT_EQ(Sha256Hex(back), sha);

  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Checkpoint(5, sha, data.size()));
  ASSERT_TRUE(stream->Finish(v1::JobResult::OUTCOME_SUCCEEDED).ok());

  const v1::GetRunResponse run = GetRunResponse(job.run_id());
  EXPECT_EQ(run.run().state(), v1::RUN_STATE_SUCCEEDED);
  ASSERT_EQ(run.checkpoints_size(), 1);
  EXPECT_EQ(run.checkpoints(0).sha256(), sha);
  EXPECT_TRUE(run.checkpoints(0).final());
  EXPECT_GE(run.events_size(), 4);  // QUEUED, LEASED, RUNNING, SUCCEEDED
}

// Retention (keep_checkpoints_per_run, 3 by default): as checkpoints arrive, a run's older ones
// are forgotten and their blobs deleted from disk; the newest three stay downloadable.
TEST_F(GrpcTest, CheckpointsPastTheRetentionAreDeletedFromDisk) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  std::vector<std::string> shas;
  for (int step = 1; step <= 5; ++step) {
    const std::string data = RandomBytes(1000, step);
    shas.push_back(Sha256Hex(data));
    ASSERT_TRUE(worker->Put(data, shas.back(), data.size()).ok());
    ASSERT_TRUE(stream->Checkpoint(step, shas.back(), data.size()));
  }
  ASSERT_TRUE(stream->Finish(v1::JobResult::OUTCOME_SUCCEEDED).ok());

  const v1::GetRunResponse run = GetRunResponse(job.run_id());
  std::vector<int64_t> steps;
  for (const v1::CheckpointView& c : run.checkpoints()) steps.push_back(c.step());
  EXPECT_THAT(steps, ElementsAre(3, 4, 5));
  const std::string root = config_.data_dir + "/artifacts/";
  for (int i = 0; i < 5; ++i) {
    const std::string path = root + shas[i].substr(0, 2) + "/" + shas[i];
    EXPECT_EQ(std::filesystem::exists(path), i >= 2) << "checkpoint at step " << i + 1;
  }
  std::string back;
  EXPECT_TRUE(worker->Get(shas[4], &back).ok());
  EXPECT_EQ(worker->Get(shas[0], &back).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcTest, CorruptOrMisdeclaredUploadsAreRejected) {
  auto worker = MakeWorker("w1");
  ASSERT_TRUE(worker->Register().ok());
  const std::string data = RandomBytes(kMiB + 10, 3);
  const std::string sha = Sha256Hex(data);
  std::string corrupt = data;
  corrupt[kMiB / 2] ^= 0x01;

  grpc::Status wrong_hash = worker->Put(corrupt, sha, data.size());
  EXPECT_EQ(wrong_hash.error_code(), grpc::StatusCode::DATA_LOSS);
  grpc::Status short_size = worker->Put(data, sha, data.size() + 1);
  EXPECT_EQ(short_size.error_code(), grpc::StatusCode::DATA_LOSS);
  grpc::Status bad_name = worker->Put(data, "../../etc/passwd", data.size());
  EXPECT_EQ(bad_name.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::string back;
  EXPECT_EQ(worker->Get(sha, &back).error_code(), grpc::StatusCode::NOT_FOUND);

  // A checkpoint notice naming a blob that was never stored closes the stream.
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  stream->Checkpoint(5, sha, data.size());
  v1::SchedulerControl control;
  while (stream->Read(&control)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(GrpcTest, LongPollsDoNotStarveOtherCalls) {
  constexpr int kPollers = 40;
  std::vector<std::unique_ptr<FakeWorker>> workers;
  for (int i = 0; i < kPollers; ++i) {
    workers.push_back(MakeWorker(StrCat("idle", i)));
    ASSERT_TRUE(workers.back()->Register().ok());
  }
  std::vector<std::thread> polls;
  std::atomic<int> finished{0};
  for (auto& worker : workers) {
    polls.emplace_back([&worker, &finished] {
      std::optional<v1::Job> job;
      worker->Acquire(3000, &job);
      ++finished;
    });
  }
  ASSERT_TRUE(::cart::testing::WaitUntil(
      [&] { return server_->scheduler().waiting_acquires() == kPollers; }));
  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  Prepare(context, user_token_, 5);
  v1::ListWorkersResponse response;
  grpc::Status status = scheduler_->ListWorkers(&context, v1::ListWorkersRequest{}, &response);
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.workers_size(), kPollers);
  EXPECT_LT(took, absl::Seconds(1));
  EXPECT_EQ(finished.load(), 0);  // the polls were all still waiting meanwhile
  for (auto& t : polls) t.join();
}

TEST_F(GrpcTest, StreamMetricsFollowSeesNewPointsUntilTheRunEnds) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Metrics({{0, 5.0}}));
  ASSERT_EQ(ReadAck(*stream), 0);

  std::vector<int64_t> steps;
  std::atomic<int> seen{0};
  v1::RunState last_state = v1::RUN_STATE_UNSPECIFIED;
  std::thread follower([&] {
    grpc::ClientContext context;
    Prepare(context, user_token_, 30);
    v1::StreamMetricsRequest request;
    request.set_run_id(job.run_id());
    request.set_follow(true);
    auto reader = scheduler_->StreamMetrics(&context, request);
    v1::MetricBatchView view;
    while (reader->Read(&view)) {
      for (const auto& p : view.points()) steps.push_back(p.step());
      seen = static_cast<int>(steps.size());
      last_state = view.state();
    }
    EXPECT_TRUE(reader->Finish().ok());
  });
  // The new points go once the follower has read the old one: it must see them by following.
  ASSERT_TRUE(::cart::testing::WaitUntil([&] { return seen.load() >= 1; }));
  ASSERT_TRUE(stream->Metrics({{1, 4.0}, {2, 3.0}}));
  ASSERT_EQ(ReadAck(*stream), 2);
  ASSERT_TRUE(stream->Finish(v1::JobResult::OUTCOME_SUCCEEDED).ok());
  follower.join();
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(last_state, v1::RUN_STATE_SUCCEEDED);
}

// The run's log through StreamRunLog (tail, after_id, follow as given).
std::vector<v1::RunLogLine> RunLog(v1::SchedulerService::Stub* stub, const std::string& token,
                                   int64_t run_id, int tail, int64_t after_id, bool follow,
                                   v1::RunState* last_state = nullptr) {
  grpc::ClientContext context;
  Prepare(context, token, 30);
  v1::StreamRunLogRequest request;
  request.set_run_id(run_id);
  request.set_tail(tail);
  request.set_after_id(after_id);
  request.set_follow(follow);
  auto reader = stub->StreamRunLog(&context, request);
  std::vector<v1::RunLogLine> lines;
  v1::RunLogView view;
  while (reader->Read(&view)) {
    for (const auto& line : view.lines()) lines.push_back(line);
    if (last_state != nullptr) *last_state = view.state();
  }
  EXPECT_TRUE(reader->Finish().ok());
  return lines;
}

std::vector<std::string> Texts(const std::vector<v1::RunLogLine>& lines) {
  std::vector<std::string> out;
  for (const auto& line : lines) out.push_back(line.text());
  return out;
}

v1::WorkerReport LogReport(int64_t seq, const std::string& text) {
  v1::WorkerReport report;
  report.mutable_log()->set_seq(seq);
  report.mutable_log()->set_text(text);
  report.mutable_log()->set_wall_time_us(1'700'000'000'000'000 + seq);
  return report;
}

TEST_F(GrpcTest, LogLinesResentAfterAReconnectAreStoredOnceAndFollowed) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  {
    auto stream = worker->Open(job.run_id(), job.attempt());
    ASSERT_TRUE(stream->Send(LogReport(1, "resuming from step 0")));
    ASSERT_TRUE(stream->Send(LogReport(2, "checkpoint skipped")));
    ASSERT_TRUE(stream->Metrics({{0, 5.0}}));
    EXPECT_EQ(ReadAck(*stream), 0);  // handled in order: the lines before it are stored
    stream->Cancel();
    stream->Finish();
  }
  std::vector<std::string> followed;
  v1::RunState last_state = v1::RUN_STATE_UNSPECIFIED;
  std::thread follower([&] {
    followed = Texts(RunLog(scheduler_.get(), user_token_, job.run_id(), 0, 0, true, &last_state));
  });
  absl::SleepFor(absl::Milliseconds(200));
  // The worker reconnects and resends both lines (it cannot know they arrived), then a new one.
  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Send(LogReport(1, "resuming from step 0")));
  ASSERT_TRUE(stream->Send(LogReport(2, "checkpoint skipped")));
  ASSERT_TRUE(stream->Send(LogReport(3, "error: none")));
  ASSERT_TRUE(stream->Finish(v1::JobResult::OUTCOME_SUCCEEDED).ok());
  follower.join();
  const std::vector<std::string> all = {"resuming from step 0", "checkpoint skipped",
                                        "error: none"};
  EXPECT_EQ(followed, all);
  EXPECT_EQ(last_state, v1::RUN_STATE_SUCCEEDED);

  std::vector<v1::RunLogLine> lines =
      RunLog(scheduler_.get(), user_token_, job.run_id(), 0, 0, false);
  ASSERT_EQ(Texts(lines), all);
  EXPECT_EQ(lines[0].attempt(), job.attempt());
  EXPECT_EQ(lines[2].wall_time_us(), 1'700'000'000'000'003);
  EXPECT_EQ(Texts(RunLog(scheduler_.get(), user_token_, job.run_id(), 1, 0, false)),
            std::vector<std::string>{"error: none"});
  EXPECT_EQ(Texts(RunLog(scheduler_.get(), user_token_, job.run_id(), 0, lines[0].id(), false)),
            (std::vector<std::string>{"checkpoint skipped", "error: none"}));

  grpc::ClientContext context;
  Prepare(context, user_token_, 30);
  v1::StreamRunLogRequest unknown;
  unknown.set_run_id(job.run_id() + 1000);
  auto reader = scheduler_->StreamRunLog(&context, unknown);
  v1::RunLogView view;
  while (reader->Read(&view)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcTest, QueryTablePivotsFinalMetrics) {
  Submit(R"(name: grid
base: {d: 64, vocab: 100, P: 1, steps: 10}
grid: {R: [2, 4]}
seeds: [1, 2]
)");
  auto worker = MakeWorker("w1");
  ASSERT_TRUE(worker->Register().ok());
  for (int i = 0; i < 4; ++i) {
    std::optional<v1::Job> job;
    ASSERT_TRUE(worker->Acquire(0, &job).ok());
    ASSERT_TRUE(job.has_value());
    auto stream = worker->Open(job->run_id(), job->attempt());
    // loss = R + seed index, so the R=2 cell averages 2.5 and the R=4 cell 4.5.
    const bool r4 = job->config_yaml().find("R: 4") != std::string::npos;
    ASSERT_TRUE(stream->Metrics({{9, (r4 ? 4.0 : 2.0) + (i % 2)}}));
    ASSERT_GE(ReadAck(*stream), 9);
    ASSERT_TRUE(stream->Finish(v1::JobResult::OUTCOME_SUCCEEDED).ok());
  }
  grpc::ClientContext context;
  Prepare(context, user_token_);
  v1::QueryTableRequest request;
  request.set_table("pivot");
  request.set_metric("loss");
  request.set_rows("d");
  request.set_cols("R");
  request.add_sweeps("grid");
  v1::Table table;
  grpc::Status status = scheduler_->QueryTable(&context, request, &table);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(table.columns_size(), 3);
  EXPECT_EQ(table.columns(1), "R=2");
  ASSERT_EQ(table.rows_size(), 1);
  EXPECT_EQ(table.rows(0).cells(0).text(), "64");
  EXPECT_DOUBLE_EQ(table.rows(0).cells(1).mean(), 2.5);
  EXPECT_EQ(table.rows(0).cells(1).n(), 2);
  EXPECT_DOUBLE_EQ(table.rows(0).cells(2).mean(), 4.5);

  grpc::ClientContext bad_context;
  Prepare(bad_context, user_token_);
  request.set_table("nonsense");
  EXPECT_EQ(scheduler_->QueryTable(&bad_context, request, &table).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcTest, QueuedRunSaysWhyItWaits) {
  const std::vector<int64_t> ids = Submit(TinySweep("s"));
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(GetRun(ids[0]).waiting_reason(), "no worker is registered");
  auto tiny = MakeWorker("tiny", /*memory_mib=*/1);
  ASSERT_TRUE(tiny->Register().ok());
  EXPECT_THAT(GetRun(ids[0]).waiting_reason(),
              ::testing::HasSubstr("exceeds every registered worker (largest 0.0 GiB)"));
}

TEST_F(GrpcTest, ServerReflectionListsTheServices) {
  // ServerReflectionInfo with list_services, spoken through the generic stub so the test needs no
  // reflection client library: request field 7 (list_services) = "".
  grpc::GenericStub stub(Channel());
  grpc::ClientContext context;
  Prepare(context, "");
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const std::string request("\x3a\x00", 2);  // field 7, length-delimited, empty
  grpc::Slice slice(request);
  grpc::ByteBuffer send(&slice, 1);
  call->Write(send, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer received;
  call->Read(&received, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(received.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_THAT(bytes, ::testing::HasSubstr("cart.v1.SchedulerService"));
  EXPECT_THAT(bytes, ::testing::HasSubstr("cart.v1.WorkerService"));
  context.TryCancel();
  call->Finish(nullptr, reinterpret_cast<void*>(4));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(GrpcTest, ShutdownEndsLongPollsAndStreamsPromptlyAndKeepsTheLease) {
  auto worker = MakeWorker("w1");
  v1::Job job = LeaseOne(*worker);
  auto stream = worker->Open(job.run_id(), job.attempt());
  ASSERT_TRUE(stream->Metrics({{0, 5.0}}));
  ASSERT_EQ(ReadAck(*stream), 0);
  auto idle = MakeWorker("idle");
  ASSERT_TRUE(idle->Register().ok());
  std::thread poll([&] {
    std::optional<v1::Job> none;
    idle->Acquire(8000, &none);
    EXPECT_FALSE(none.has_value());
  });
  ASSERT_TRUE(
      ::cart::testing::WaitUntil([&] { return server_->scheduler().waiting_acquires() == 1; }));
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  poll.join();
  v1::SchedulerControl control;
  EXPECT_FALSE(stream->Read(&control));
  stream->Finish();

  // The lease is still in the database: a restarted cartd lets the worker carry on.
  ServerConfig again = config_;
  auto restarted = RunServer(again);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  CART_ASSERT_OK_AND_ASSIGN(store::RunRecord run, (*restarted)->store().GetRun(job.run_id()));
  EXPECT_EQ(run.state, store::RunState::kRunning);
  FakeWorker back(
      (grpc::CreateChannel((*restarted)->dial_address(), grpc::InsecureChannelCredentials())), "w1",
      24 * 1024);
  auto resumed = back.Open(job.run_id(), job.attempt());
  ASSERT_TRUE(resumed->Metrics({{1, 4.0}}));
  EXPECT_EQ(ReadAck(*resumed), 1);
  resumed->Cancel();
  resumed->Finish();
  (*restarted)->Shutdown();
}

TEST(CallerSlotsTest, BoundsEachCallerAndEveryone) {
  CallerSlots slots(/*per_caller=*/2, /*total=*/3, "follow streams", "close some");
  auto a1 = slots.Take("user:a");
  auto a2 = slots.Take("user:a");
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_THAT(slots.Take("user:a").status(),
              ::cart::testing::StatusIs(absl::StatusCode::kResourceExhausted,
                                        ::testing::HasSubstr("limit 2 per caller")));
  auto b1 = slots.Take("user:b");
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(slots.Take("user:c").status().code(), absl::StatusCode::kResourceExhausted);
  a1->reset();  // one of a's streams ends
  EXPECT_TRUE(slots.Take("user:c").ok());
}

// A user opening more follow streams than allowed gets RESOURCE_EXHAUSTED for the extra one, and a
// worker still registers (before the bound, such streams took every server thread).
class FollowLimitTest : public GrpcTest {
 protected:
  void Configure(ServerConfig& config) override { config.max_follows_per_caller = 3; }
};

TEST_F(FollowLimitTest, ExtraFollowersAreRefusedAndWorkersStillGetThreads) {
  const int64_t run = Submit(TinySweep("f")).at(0);  // QUEUED: a follower waits on it
  constexpr int kStreams = 4;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::thread> readers;
  std::atomic<int> ended{0};
  std::vector<grpc::StatusCode> codes(kStreams, grpc::StatusCode::OK);
  absl::Mutex mu;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    Prepare(*contexts.back(), "", 60);
    readers.emplace_back([&, i] {
      v1::StreamRunLogRequest request;
      request.set_run_id(run);
      request.set_follow(true);
      auto reader = scheduler_->StreamRunLog(contexts[i].get(), request);
      v1::RunLogView view;
      while (reader->Read(&view)) {
      }
      const grpc::StatusCode code = reader->Finish().error_code();
      absl::MutexLock lock(&mu);
      codes[i] = code;
      ++ended;
    });
  }
  // Exactly one of the four is refused; the other three keep following.
  for (int i = 0; i < 200 && ended.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(ended.load(), 1);
    EXPECT_EQ(std::count(codes.begin(), codes.end(), grpc::StatusCode::RESOURCE_EXHAUSTED), 1);
  }
  auto worker = MakeWorker("w1");
  EXPECT_TRUE(worker->Register().ok());
  for (auto& c : contexts) c->TryCancel();
  for (auto& t : readers) t.join();
}

// Downloads and long polls hold server threads: each caller holds at most its share of them,
// and a download whose client reads nothing is cancelled at the send deadline. A thousand
// unread GetCheckpoint streams of one user, or two thousand AcquireJob polls of one worker
// token, once left every other call with "Server Threadpool Exhausted".
class StreamLimitTest : public GrpcTest {
 protected:
  void Configure(ServerConfig& config) override {
    config.max_downloads_per_caller = 2;
    config.max_polls_per_token = 2;
    config.stream_send_timeout = absl::Seconds(5);
  }
  // A channel of its own (its own connection): a download left unread there stalls nothing else.
  std::shared_ptr<grpc::Channel> OwnChannel() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(server_->dial_address(), grpc::InsecureChannelCredentials(),
                                     args);
  }
};

TEST_F(StreamLimitTest, UnreadDownloadsAreCutAtTheSendDeadlineAndNoCallerHoldsMoreThanItsShare) {
  auto worker = MakeWorker("w1");
  ASSERT_TRUE(worker->Register().ok());
  // 32 MiB: more than a stream's flow-control window and the socket buffers hold.
  const std::string data = RandomBytes(32 * kMiB, 11);
  const std::string sha = Sha256Hex(data);
  ASSERT_TRUE(worker->Put(data, sha, data.size()).ok());

  // Two downloads the client never reads, on connections of their own.
  struct Unread {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::WorkerService::Stub> stub;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::ArtifactChunk>> reader;
  };
  std::vector<std::unique_ptr<Unread>> unread;
  v1::GetArtifactRequest request;
  request.set_sha256(sha);
  for (int i = 0; i < 2; ++i) {
    auto u = std::make_unique<Unread>();
    u->channel = OwnChannel();
    u->stub = v1::WorkerService::NewStub(u->channel);
    Prepare(u->context, worker_token_, 60);
    u->reader = u->stub->GetArtifact(&u->context, request);
    // Its first chunk read: its handler runs and holds its slot (the rest stays unread). Asking
    // the third download before both held theirs let it take one of the two, so the second was
    // refused and every later third download went through beside the first.
    v1::ArtifactChunk first;
    ASSERT_TRUE(u->reader->Read(&first)) << u->reader->Finish().error_message();
    unread.push_back(std::move(u));
  }
  // A third download of the same token is refused, naming the bound.
  std::string got;
  const grpc::Status third = worker->Get(sha, &got);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.error_message();
  EXPECT_THAT(third.error_message(), ::testing::HasSubstr("checkpoint downloads"));
  // Past the send deadline the unread ones are cancelled and both their slots come back: two
  // downloads that read go through whole at once (one alone could pass while the other unread
  // stream still held its slot, and draining that one below would then finish it).
  ASSERT_TRUE(::cart::testing::WaitUntil(
      [&] {
        std::string first, second;
        grpc::Status first_status;
        std::thread beside([&] { first_status = worker->Get(sha, &first); });
        const grpc::Status second_status = worker->Get(sha, &second);
        beside.join();
        return first_status.ok() && second_status.ok() && first == data && second == data;
      },
      absl::Seconds(30)));
  for (auto& u : unread) {
    v1::ArtifactChunk chunk;
    while (u->reader->Read(&chunk)) {
    }
    EXPECT_EQ(u->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }

  // Long polls: two of this token wait; a third is refused; another token's calls go on.
  std::vector<std::thread> polls;
  std::atomic<int> finished{0};
  for (int i = 0; i < 2; ++i) {
    polls.emplace_back([&] {
      std::optional<v1::Job> job;
      EXPECT_TRUE(worker->Acquire(3000, &job).ok());
      ++finished;
    });
  }
  ASSERT_TRUE(::cart::testing::WaitUntil(
      [&] { return server_->scheduler().waiting_acquires() == 2; }, absl::Seconds(10)));
  std::optional<v1::Job> job;
  const grpc::Status refused = worker->Acquire(3000, &job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("AcquireJob long polls"));
  grpc::ClientContext context;
  Prepare(context, user_token_);
  v1::ListSweepsResponse sweeps;
  EXPECT_TRUE(scheduler_->ListSweeps(&context, {}, &sweeps).ok());
  for (std::thread& t : polls) t.join();
  EXPECT_EQ(finished.load(), 2);
}

}  // namespace
}  // namespace cart::server::testing
