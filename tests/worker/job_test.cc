// One attempt run by the worker's job code (worker::RunJob, real LibTorch training on CPU) against
// an in-process cartd: what happens when cartd refuses a report for good, when SIGTERM comes
// while nothing can be delivered, and on which device an evaluation job runs.

#include "worker/job.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "common/strings.h"
#include "config/accounting.h"
#include "config/config.h"
#include "config/devices.h"
#include "data/synth.h"
#include "server/scheduler.h"
#include "tests/server/server_fixture.h"
#include "tests/train/out_of_memory.h"
#include "train/device.h"
#include "worker/worker.h"

namespace cart::worker {
namespace {

using server::testing::FakeWorker;
using server::testing::ServerFixture;
using Clock = std::chrono::steady_clock;

class JobTest : public ServerFixture {
 protected:
  // A sweep of one tiny run that would train for a long time on synthetic tokens.
  std::string LongSweep(const std::string& name) {
    data::SynthOptions o;
    o.chain.vocab = 32;
    o.tokens = 20'000;
    o.val_tokens = 2'000;
    o.out = dir_.File("synth.bin");
    EXPECT_TRUE(data::WriteSynthetic(o).ok());
    return StrCat("name: ", name,
                  "\nbase: {d: 64, vocab: 32, P: 1, R: 2, seq_len: 32, batch: 4, steps: 100000, "
                  "log_every: 1, eval_every: 0, threads: 1, train_data: ",
                  o.out, "}\n");
  }

  // Registers a (fake) worker, once, and leases the next queued run to it.
  v1::Job Lease() {
    if (worker_ == nullptr) {
      worker_ = MakeWorker("w1");
      EXPECT_TRUE(worker_->Register().ok());
    }
    std::optional<v1::Job> job;
    EXPECT_TRUE(worker_->Acquire(1000, &job).ok());
    EXPECT_TRUE(job.has_value());
    return job.value_or(v1::Job());
  }

  JobEnvironment Environment() {
    JobEnvironment env;
    env.stub = worker_->stub();
    env.worker_id = worker_->id();
    env.cache_dir = dir_.File("worker");
    env.heartbeat_interval_ms = 200;
    env.threads = 1;
    return env;
  }

  // Submits a 4-step run with an evaluation of its final checkpoint at 1 and 2 loops, trains the
  // run here, and returns the evaluation's job, leased.
  v1::Job TrainedParentsEvaluation(const std::string& name) {
    std::string sweep = LongSweep(name);
    sweep.replace(sweep.find("steps: 100000"), 13, "steps: 4");
    sweep +=
        "derived:\n  - name: varR\n    from: {run: 0, checkpoint: final}\n"
        "    eval_loops: [1, 2]\n";
    EXPECT_EQ(Submit(sweep).size(), 2u);
    const v1::Job parent = Lease();
    EXPECT_NE(parent.kind(), v1::JOB_KIND_EVAL);
    std::atomic<bool> shutdown{false};
    EXPECT_EQ(RunJob(Environment(), parent, shutdown).outcome, v1::JobResult::OUTCOME_SUCCEEDED);
    const v1::Job eval = Lease();
    EXPECT_EQ(eval.kind(), v1::JOB_KIND_EVAL);
    return eval;
  }

  std::unique_ptr<FakeWorker> worker_;
};

// A newer worker's metric name that this cartd refuses stands for every report that cartd turns
// down as invalid: resending it after a reconnect would be refused again. Before, the worker
// resent it for ever, the run stayed RUNNING and SIGTERM could not end the worker.
TEST_F(JobTest, AReportCartdRefusesEndsTheAttemptWithCartdsReason) {
  const std::vector<int64_t> ids = Submit(LongSweep("refused"));
  ASSERT_EQ(ids.size(), 1u);
  const v1::Job job = Lease();
  JobEnvironment env = Environment();
  env.sample_system = [] { return std::map<std::string, double>{{"sys/gpu temp", 41.0}}; };
  std::atomic<bool> shutdown{false};
  auto done = std::async(std::launch::async, [&] { return RunJob(env, job, shutdown); });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(120)), std::future_status::ready)
      << "the attempt did not end after cartd refused its metrics";
  const JobEnd end = done.get();
  EXPECT_EQ(end.outcome, v1::JobResult::OUTCOME_FAILED);
  EXPECT_NE(end.error.find("bad metric name 'sys/gpu temp'"), std::string::npos) << end.error;
  EXPECT_FALSE(end.fenced);

  // cartd recorded the failure with its own reason; the run is queued for its next attempt.
  const v1::RunView run = GetRun(ids[0]);
  EXPECT_EQ(run.state(), v1::RUN_STATE_QUEUED);
  bool recorded = false;
  const v1::GetRunResponse response = GetRunResponse(ids[0]);
  for (const v1::RunEvent& e : response.events()) {
    recorded |= e.from_state() == "RUNNING" &&
                e.why().find("bad metric name 'sys/gpu temp'") != std::string::npos;
  }
  EXPECT_TRUE(recorded) << "no RUNNING -> QUEUED event carries cartd's refusal";
}

// With the device's peak known, every logged tokens_per_s comes with its MFU by each convention:
// the model's training FLOPs per token (config::CountFlops) or the paper's 6 x effective
// parameters, times the tokens per second, over the peak.
TEST_F(JobTest, TrainingLogsMfuAgainstTheDevicesPeak) {
  std::string sweep = LongSweep("mfu");
  sweep.replace(sweep.find("steps: 100000"), 13, "steps: 6");
  const std::vector<int64_t> ids = Submit(sweep);
  ASSERT_EQ(ids.size(), 1u);
  const v1::Job job = Lease();
  JobEnvironment env = Environment();
  env.peak_tflops = 0.5;
  std::atomic<bool> shutdown{false};
  const JobEnd end = RunJob(env, job, shutdown);
  ASSERT_EQ(end.outcome, v1::JobResult::OUTCOME_SUCCEEDED) << end.error;
  const v1::RunView run = GetRunResponse(ids[0]).run();
  ASSERT_EQ(run.latest().count("mfu"), 1u) << "no mfu logged";
  ASSERT_EQ(run.latest().count("tokens_per_s"), 1u);
  auto config = config::ParseRunConfigYaml(GetRunResponse(ids[0]).run().config_yaml(), "run");
  ASSERT_TRUE(config.ok()) << config.status();
  const double flops = config::CountFlops(config->model, config->train.seq_len).train_per_token;
  EXPECT_DOUBLE_EQ(run.latest().at("mfu"),
                   config::Mfu(flops, run.latest().at("tokens_per_s"), 0.5));
  EXPECT_GT(run.latest().at("mfu"), 0);
  ASSERT_EQ(run.latest().count("mfu_6n"), 1u) << "no mfu_6n logged";
  const double six_n = 6.0 * static_cast<double>(config::CountParams(config->model).effective);
  EXPECT_DOUBLE_EQ(run.latest().at("mfu_6n"),
                   config::Mfu(six_n, run.latest().at("tokens_per_s"), 0.5));
  // The two conventions differ by the attention products, which 6N leaves out.
  EXPECT_NE(run.latest().at("mfu_6n"), run.latest().at("mfu"));
  // A CPU worker divides by its measured fp32 matmul rate.
  EXPECT_GT(train::MeasureCpuMatmulTflops(0.05), 0);
}

// SIGTERM while cartd cannot be reached and the outbox is full (the trainer is blocked waiting for
// acknowledgements that cannot come): the job still ends within the shutdown grace.
TEST_F(JobTest, ShutdownEndsTheJobWithinTheGraceWhenNothingCanBeDelivered) {
  const std::vector<int64_t> ids = Submit(LongSweep("stuck"));
  ASSERT_EQ(ids.size(), 1u);
  const v1::Job job = Lease();
  JobEnvironment env = Environment();
  env.metric_buffer_points = 64;  // fills within a few steps once nothing is acknowledged
  env.shutdown_grace_ms = 2000;
  std::atomic<bool> shutdown{false};
  auto done = std::async(std::launch::async, [&] { return RunJob(env, job, shutdown); });

  // Training is under way (metrics reached cartd), then cartd goes away.
  const auto started = Clock::now();
  while (GetRun(ids[0]).step() < 3 && Clock::now() - started < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(GetRun(ids[0]).step(), 3);
  server_->Shutdown();
  server_.reset();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the outbox fills; the trainer waits

  const auto term = Clock::now();
  shutdown = true;
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "SIGTERM did not end the job";
  const double seconds = std::chrono::duration<double>(Clock::now() - term).count();
  const JobEnd end = done.get();
  EXPECT_TRUE(end.gave_up);
  // The grace (2 s) plus at most one upload backoff (5 s) and the stream's close (2 s).
  EXPECT_LT(seconds, 12.0) << "the job took " << seconds << " s to end after SIGTERM";
}

// An evaluation job runs where the worker trains. It used to build and load its model on the CPU
// whatever the worker's device, so a GPU worker evaluated on its CPU. Asked for a CUDA device on a
// machine without one, it now fails naming what LibTorch sees; on the CPU it succeeds.
TEST_F(JobTest, EvaluationJobRunsOnTheWorkersDevice) {
  if (train::CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const v1::Job eval = TrainedParentsEvaluation("evaldev");
  ASSERT_EQ(eval.kind(), v1::JOB_KIND_EVAL);
  JobEnvironment env = Environment();
  std::atomic<bool> shutdown{false};
  env.torch_device = "cuda:0";
  const JobEnd on_gpu = RunJob(env, eval, shutdown);
  EXPECT_EQ(on_gpu.outcome, v1::JobResult::OUTCOME_FAILED);
  EXPECT_NE(on_gpu.error.find("LibTorch sees 0 CUDA device(s)"), std::string::npos) << on_gpu.error;

  const v1::Job again = Lease();
  ASSERT_EQ(again.run_id(), eval.run_id());
  env.torch_device = "cpu";
  EXPECT_EQ(RunJob(env, again, shutdown).outcome, v1::JobResult::OUTCOME_SUCCEEDED);
}

// An evaluation that runs out of memory goes back to the queue as OUT_OF_MEMORY, as a training
// run does, so that cartd places it on a device with more memory: it used to end FAILED, because
// the eval path did not recognise LibTorch's out-of-memory error. Here every CPU allocation fails
// from the moment the eval job starts (tests/train/out_of_memory.h), so it is the checkpoint's
// load that runs out, a real LibTorch error thrown from inside LibTorch.
TEST_F(JobTest, AnEvaluationThatRunsOutOfMemoryIsRequeuedAsOutOfMemory) {
  const v1::Job eval = TrainedParentsEvaluation("evaloom");
  ASSERT_EQ(eval.kind(), v1::JOB_KIND_EVAL);
  const JobEnvironment env = Environment();
  std::atomic<bool> shutdown{false};
  JobEnd end;
  {
    ::cart::testing::ScopedOutOfMemory no_memory;
    end = RunJob(env, eval, shutdown);
  }
  EXPECT_GT(::cart::testing::OutOfMemoryAllocator::Get().refused(), 0);
  EXPECT_EQ(end.outcome, v1::JobResult::OUTCOME_OUT_OF_MEMORY) << end.error;
  EXPECT_NE(end.error.find("out of memory"), std::string::npos) << end.error;
  EXPECT_NE(end.error.find("not enough memory"), std::string::npos) << end.error;
  EXPECT_EQ(end.error.find("not a readable checkpoint"), std::string::npos) << end.error;

  // cartd took it as such: queued again (an OOM is not counted as a failed attempt), waiting for
  // a device with more memory than this worker's.
  const v1::GetRunResponse after = GetRunResponse(eval.run_id());
  EXPECT_EQ(after.run().state(), v1::RUN_STATE_QUEUED);
  bool recorded = false;
  for (const v1::RunEvent& e : after.events()) {
    if (e.why().find("out of memory") != std::string::npos) recorded = true;
  }
  EXPECT_TRUE(recorded) << "no event says the eval ran out of memory";
  EXPECT_NE(after.run().waiting_reason().find("ran out of memory"), std::string::npos)
      << after.run().waiting_reason();
}

// A training attempt that runs out of memory at micro-batch 4 is retried at micro-batch 2 with
// twice the accumulation (cartd caps the run's micro-batch), on the same device, and finishes with
// the losses of a run submitted at micro-batch 2, bit for bit: the retry is that run. Every CPU
// allocation fails while the first attempt runs (tests/train/out_of_memory.h), a real LibTorch
// out-of-memory error. Before, the run waited for ever for a device with more memory.
TEST_F(JobTest, AnOutOfMemoryRetriesAtASmallerMicroBatchWithTheLossesOfARunStartedThere) {
  std::string sweep = LongSweep("oomfit");
  sweep.replace(sweep.find("steps: 100000"), 13, "steps: 6");
  std::string reference = sweep;
  reference.replace(reference.find("oomfit"), 6, "oomref");
  // batch 4 with the default accumulation 4: a global batch of 16, retried as 2 x 8.
  reference.replace(reference.find("batch: 4"), 8, "batch: 2, accum: 8");
  const std::vector<int64_t> run = Submit(sweep);
  ASSERT_EQ(run.size(), 1u);
  const v1::Job job = Lease();
  const JobEnvironment env = Environment();
  std::atomic<bool> shutdown{false};
  JobEnd first;
  {
    ::cart::testing::ScopedOutOfMemory no_memory;
    first = RunJob(env, job, shutdown);
  }
  ASSERT_EQ(first.outcome, v1::JobResult::OUTCOME_OUT_OF_MEMORY) << first.error;
  const v1::GetRunResponse after = GetRunResponse(run[0]);
  EXPECT_EQ(after.run().state(), v1::RUN_STATE_QUEUED);
  bool said = false;
  for (const v1::RunEvent& e : after.events()) {
    said |= e.why().find("retried at micro-batch 2") != std::string::npos;
  }
  EXPECT_TRUE(said) << "no event says the micro-batch was lowered";

  const v1::Job retry = Lease();
  ASSERT_EQ(retry.run_id(), run[0]);
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig sent,
                            config::ParseRunConfigYaml(retry.config_yaml(), "retry"));
  EXPECT_EQ(sent.train.batch, 2);
  EXPECT_EQ(sent.train.accum, 8);
  ASSERT_EQ(RunJob(env, retry, shutdown).outcome, v1::JobResult::OUTCOME_SUCCEEDED);

  const std::vector<int64_t> ref = Submit(reference);
  ASSERT_EQ(ref.size(), 1u);
  ASSERT_EQ(RunJob(env, Lease(), shutdown).outcome, v1::JobResult::OUTCOME_SUCCEEDED);
  auto losses = [&](int64_t id) {
    store::SeriesRequest request;
    request.run_id = id;
    request.metric = "loss";
    request.max_points = 0;
    absl::StatusOr<store::Series> series = server_->scheduler().MetricSeries(request);
    EXPECT_TRUE(series.ok()) << series.status();
    std::vector<std::pair<int64_t, double>> out;
    if (series.ok()) {
      for (const store::SeriesPoint& p : series->points) out.emplace_back(p.step, p.value);
    }
    return out;
  };
  const auto retried = losses(run[0]);
  EXPECT_EQ(retried.size(), 6u);
  EXPECT_EQ(retried, losses(ref[0]));  // bit for bit
}

// A drained cart-worker exits when AcquireJob answers with the drain mark (a field of the answer;
// it used to look for the word "drain" in an error message).
TEST_F(JobTest, ADrainedWorkerExitsWhenAcquireSaysSo) {
  WorkerConfig config;
  config.client.server = server_->dial_address();
  config.worker_id = "w-drain";
  config.device = "cpu";
  config.cache_dir = dir_.File("drain-worker");
  config.acquire_wait_ms = 200;
  std::atomic<bool> shutdown{false};
  auto done = std::async(std::launch::async, [&] { return RunWorker(config, shutdown); });
  const bool registered = ::cart::testing::WaitUntil([&] {
    grpc::ClientContext context;
    server::testing::Prepare(context, user_token_);
    v1::ListWorkersRequest request;
    v1::ListWorkersResponse response;
    if (!scheduler_->ListWorkers(&context, request, &response).ok()) return false;
    for (const auto& w : response.workers()) {
      if (w.worker_id() == "w-drain") return true;
    }
    return false;
  });
  ASSERT_TRUE(registered);
  grpc::ClientContext context;
  server::testing::Prepare(context, user_token_);
  v1::DrainWorkerRequest drain;
  drain.set_worker_id("w-drain");
  v1::DrainWorkerResponse response;
  ASSERT_TRUE(scheduler_->DrainWorker(&context, drain, &response).ok());
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "the drained worker kept polling";
  EXPECT_TRUE(done.get().ok());
  shutdown = true;
}

}  // namespace
}  // namespace cart::worker
