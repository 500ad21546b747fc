// Scheduler: placement, leases, retries, derived jobs and user actions, driven by a FakeClock over
// a real RunStore in a temp dir. No gRPC here.

#include "server/scheduler.h"

#include <atomic>
#include <cmath>
#include <thread>

#include "common/clock.h"
#include "common/strings.h"
#include "config/accounting.h"
#include "config/config.h"
#include "config/schedule.h"
#include "server/run_cursor.h"
#include "store/run_store.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::server {
namespace {

using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using store::RunState;
using ::testing::_;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kHuge = 1024 * kGiB;
const absl::Duration kTtl = absl::Seconds(60);

// Two tiny CART configs whose memory estimates differ by orders of magnitude.
constexpr char kTwoSizes[] = R"(name: sizes
base: {vocab: 100, P: 1, R: 2, steps: 10, seq_len: 64, batch: 2}
grid: {d: [64, 1024]}
seeds: [1]
)";

std::string OneRunSweep(const std::string& name, int priority = 0, int max_attempts = 3) {
  return StrCat("name: ", name, "\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\n",
                "priority: ", priority, "\nmax_attempts: ", max_attempts, "\n");
}

constexpr char kWithDerived[] = R"(name: parent
base: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}
derived:
  - name: varR
    kind: eval
    from: {run: 0, checkpoint: final}
    eval_loops: [1, 2, 4]
)";

// Records the controls a stream receives.
class RecordingStream : public AttemptStream {
 public:
  void Send(const Control& control) override {
    absl::MutexLock lock(&mu_);
    controls_.push_back(control);
  }
  void Close() override {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  std::vector<Control> controls() {
    absl::MutexLock lock(&mu_);
    return controls_;
  }
  bool closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Control> controls_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions store_options;
    store_options.path = dir_.File("cart.db");
    store_options.lease_ttl_us = absl::ToInt64Microseconds(kTtl);
    auto store = store::RunStore::Open(store_options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    scheduler_ = MakeScheduler(absl::ZeroDuration());
  }

  std::unique_ptr<Scheduler> MakeScheduler(absl::Duration grace, int64_t max_runs = 100'000) {
    SchedulerOptions options;
    options.lease_ttl = kTtl;
    options.expiry_interval = absl::ZeroDuration();
    options.startup_grace = grace;
    options.max_runs_per_sweep = max_runs;
    options.raise_micro_batch = raise_micro_batch_;  // the fake workers say "cuda"
    return std::make_unique<Scheduler>(store_.get(), &clock_, options);
  }

  SubmitResult Submit(const std::string& yaml, const std::string& request_id = "") {
    SubmitRequest request;
    request.spec_yaml = yaml;
    request.file_name = "test.yaml";
    request.request_id = request_id;
    request.who = "user:test";
    auto result = scheduler_->SubmitSweep(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : SubmitResult{};
  }

  // The placement tests give the memory a run may use: no reserve unless they ask for one
  // (negative: cartd's default).
  // An RTX 3090 worker with a huge memory that reports its speed (× a 3090).
  void RegisterAtSpeed(const std::string& id, double speed_factor) {
    WorkerInfo worker;
    worker.id = id;
    worker.device_kind = "cuda";
    worker.device_name = "NVIDIA GeForce RTX 3090";
    worker.memory_bytes = kHuge;
    worker.memory_reserve_bytes = 0;
    worker.speed_factor = speed_factor;
    CART_ASSERT_OK(scheduler_->RegisterWorker(worker).status());
  }
  void Register(const std::string& id, int64_t memory, int64_t reserve = 0,
                const std::string& kind = "cuda") {
    WorkerInfo worker;
    worker.id = id;
    worker.device_kind = kind;
    worker.device_name = StrCat("gpu-", memory / kGiB, "g");
    worker.memory_bytes = memory;
    worker.memory_reserve_bytes = reserve;
    // As cart-worker reports its kernels: a CUDA LibTorch 2.x merges projections on a card.
    worker.libtorch_major = 2;
    worker.merged_projections = kind == "cuda";
    CART_ASSERT_OK(scheduler_->RegisterWorker(worker).status());
  }

  // Acquire without waiting; nullopt when nothing fits.
  std::optional<Job> AcquireNow(const std::string& worker) {
    auto job = scheduler_->Acquire(worker, absl::ZeroDuration());
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : std::nullopt;
  }

  // Acquire and attach a stream (the run goes RUNNING).
  Job Start(const std::string& worker, std::shared_ptr<RecordingStream> stream = nullptr) {
    std::optional<Job> job = AcquireNow(worker);
    EXPECT_TRUE(job.has_value());
    if (!job) return Job{};
    if (!stream) stream = std::make_shared<RecordingStream>();
    EXPECT_TRUE(scheduler_->AttachStream(job->run.id, job->attempt, stream).ok());
    return *job;
  }

  store::NewCheckpoint Checkpoint(int64_t step, char fill = 'a') {
    store::NewCheckpoint checkpoint;
    checkpoint.step = step;
    checkpoint.sha256 = std::string(63, fill) + static_cast<char>('0' + step % 10);
    checkpoint.size_bytes = 1000 + step;
    checkpoint.path = StrCat("ab/", checkpoint.sha256);
    return checkpoint;
  }

  RunState StateOf(int64_t run_id) {
    auto run = store_->GetRun(run_id);
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? run->state : RunState::kFailed;
  }

  TempDir dir_;
  FakeClock clock_;
  bool raise_micro_batch_ = false;  // SchedulerOptions::raise_micro_batch, for MakeScheduler
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, PlacesRunsOnlyWhereTheMemoryEstimateFits) {
  SubmitResult sweep = Submit(kTwoSizes);
  ASSERT_EQ(sweep.runs.size(), 2u);
  const store::RunRecord& small = sweep.runs[0];
  const store::RunRecord& big = sweep.runs[1];
  ASSERT_LT(small.memory_estimate_bytes, big.memory_estimate_bytes);

  // A device between the two estimates gets the small run and nothing else.
  const int64_t between = (small.memory_estimate_bytes + big.memory_estimate_bytes) / 2;
  Register("mid", between);
  std::optional<Job> first = AcquireNow("mid");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->run.id, small.id);
  EXPECT_FALSE(AcquireNow("mid").has_value());

  CART_ASSERT_OK_AND_ASSIGN(RunDetails waiting, scheduler_->GetRun(big.id));
  EXPECT_THAT(
      waiting.info.waiting_reason,
      HasSubstr(StrCat("memory estimate ", FormatGiB(big.memory_estimate_bytes),
                       " exceeds every registered worker (largest ", FormatGiB(between), ")")));

  Register("large", big.memory_estimate_bytes);
  std::optional<Job> second = AcquireNow("large");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->run.id, big.id);
}

TEST_F(SchedulerTest, SmallDeviceGetsALowerMicroBatchWithMoreAccumulationAndTheSameGlobalBatch) {
  // Activations dominate here, so the micro-batch decides the memory.
  SubmitResult sweep = Submit(R"(name: fit
base: {vocab: 100, d: 128, P: 1, R: 2, steps: 10, seq_len: 512, batch: 8, accum: 1}
seeds: [1]
)");
  ASSERT_EQ(sweep.runs.size(), 1u);
  const store::RunRecord& run = sweep.runs[0];
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig config,
                            config::ParseRunConfigYaml(run.config_yaml, "run"));
  // On a GPU worker's kernels, the global batch of 8 kept by accumulation.
  const config::MemoryKernels gpu = config::GpuWorkerKernels();
  const int64_t at2 = config::EstimateTrainingBytes(config.model, {512, 2, 4, true}, gpu);
  const int64_t at1 = config::EstimateTrainingBytes(config.model, {512, 1, 8, true}, gpu);
  EXPECT_EQ(run.min_memory_bytes, at1);
  ASSERT_LT(at2, run.memory_estimate_bytes);

  // Smaller than micro-batch 1 needs: waits, and says what even the smallest micro-batch needs.
  Register("tiny", at1 - 1);
  EXPECT_FALSE(AcquireNow("tiny").has_value());
  CART_ASSERT_OK_AND_ASSIGN(RunDetails waiting, scheduler_->GetRun(run.id));
  EXPECT_THAT(waiting.info.waiting_reason,
              HasSubstr(StrCat("even at micro-batch 1 it needs ", FormatGiB(at1))));

  // Room for a micro-batch of 2 (but not 4): batch 8 x accum 1 becomes 2 x 4.
  Register("small", at2);
  std::optional<Job> job = AcquireNow("small");
  ASSERT_TRUE(job.has_value());
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig sent,
                            config::ParseRunConfigYaml(job->run.config_yaml, "job"));
  EXPECT_EQ(sent.train.batch, 2);
  EXPECT_EQ(sent.train.accum, 4);
  sent.train.batch = 8;
  sent.train.accum = 1;
  EXPECT_EQ(config::ToYaml(sent), config::ToYaml(config)) << "only batch and accum may change";
  // The stored run keeps the researcher's config; the run's log says what was changed and why.
  CART_ASSERT_OK_AND_ASSIGN(store::RunRecord stored, store_->GetRun(run.id));
  EXPECT_EQ(stored.config_yaml, run.config_yaml);
  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::LogLine> log, store_->RunLog(run.id, 0, 0));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0].text, HasSubstr("micro-batch 8 -> 2, gradient accumulation 1 -> 4"));
  EXPECT_THAT(log[0].text, HasSubstr("global batch 8 kept"));
}

// The other way: on a GPU with room, a run configured with accumulation (written for a smaller
// card) gets a larger micro-batch and less accumulation, the global batch kept; a CPU worker
// trains it as configured (it gains nothing from larger micro-batches).
TEST_F(SchedulerTest, AGpuWithRoomRaisesTheMicroBatchACpuDoesNot) {
  raise_micro_batch_ = true;  // cartd's default
  scheduler_ = MakeScheduler(absl::ZeroDuration());
  SubmitResult sweep = Submit(R"(name: raise
base: {vocab: 1000, d: 128, P: 1, R: 2, steps: 10, seq_len: 256, batch: 2, accum: 6}
seeds: [1, 2, 3]
)");
  ASSERT_EQ(sweep.runs.size(), 3u);
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig config,
                            config::ParseRunConfigYaml(sweep.runs[0].config_yaml, "run"));
  auto bytes = [&](int64_t b) {  // a GPU worker's estimate at micro-batch b, global batch 12
    return config::EstimateTrainingBytes(config.model, {256, b, b >= 12 ? 1 : 12 / b, true},
                                         config::GpuWorkerKernels());
  };
  auto sent = [&](const std::optional<Job>& job) {
    auto c = config::ParseRunConfigYaml(job->run.config_yaml, "job");
    EXPECT_TRUE(c.ok()) << c.status();
    return std::pair{c->train.batch, c->train.accum};
  };
  // A CPU worker with all the memory in the world (alone, so that placement gives it a run):
  // as configured.
  Register("cpu", bytes(12) * 100, 0, "cpu");
  std::optional<Job> cpu = AcquireNow("cpu");
  ASSERT_TRUE(cpu.has_value());
  EXPECT_EQ(sent(cpu), (std::pair<int64_t, int64_t>{2, 6}));
  // Room for the whole global batch of 12 at once: 2 x 6 becomes 12 x 1.
  Register("big", bytes(12));
  std::optional<Job> big = AcquireNow("big");
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(sent(big), (std::pair<int64_t, int64_t>{12, 1}));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::LogLine> log, store_->RunLog(big->run.id, 0, 0));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0].text, HasSubstr("micro-batch 2 -> 12, gradient accumulation 6 -> 1"));
  EXPECT_THAT(log[0].text, HasSubstr("to use the memory of worker 'big'"));
  // Room for 5 but not 6: the largest divisor of 12 that fits, 4 x 3.
  Register("mid", bytes(5));
  std::optional<Job> mid = AcquireNow("mid");
  ASSERT_TRUE(mid.has_value());
  EXPECT_EQ(sent(mid), (std::pair<int64_t, int64_t>{4, 3}));
}

// A card's whole memory is not the run's: the CUDA context, cuBLAS's workspace and a desktop take
// their share. By default cartd keeps max(1 GiB, 10 %) free; a worker can set its own reserve.
// Each worker is fitted by the kernels it reported (docs/model.md §5 "Training memory"): LibTorch
// 1.x writes attention out and keeps T x T probabilities that a 2.x fused kernel does not, so at a
// long sequence the same memory takes a smaller micro-batch on a 1.x worker; a worker that said
// nothing (a release before the field) is counted as 1.x, the larger estimate.
TEST_F(SchedulerTest, EachWorkerIsFittedByTheKernelsItReported) {
  SubmitResult sweep = Submit(R"(name: kernels
base: {vocab: 1000, d: 128, P: 1, R: 2, steps: 10, seq_len: 2048, batch: 8, accum: 1}
seeds: [1, 2]
)");
  ASSERT_EQ(sweep.runs.size(), 2u);
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig config,
                            config::ParseRunConfigYaml(sweep.runs[0].config_yaml, "run"));
  const config::MemoryKernels gpu = config::GpuWorkerKernels();
  config::MemoryKernels old = gpu;
  old.libtorch_major = 1;
  old.merged_projections = false;
  // Room for a micro-batch of 4 on a GPU worker's kernels, not on LibTorch 1.x's.
  const int64_t memory = config::EstimateTrainingBytes(config.model, {2048, 4, 2, true}, gpu);
  ASSERT_GT(config::EstimateTrainingBytes(config.model, {2048, 2, 4, true}, old), memory);
  auto sent = [](const Job& job) {
    auto c = config::ParseRunConfigYaml(job.run.config_yaml, "job");
    EXPECT_TRUE(c.ok()) << c.status();
    return std::pair{c->train.batch, c->train.accum};
  };
  Register("new", memory);  // reports LibTorch 2, merged (the fixture's CUDA workers)
  std::optional<Job> fitted = AcquireNow("new");
  ASSERT_TRUE(fitted.has_value());
  EXPECT_EQ(sent(*fitted), (std::pair<int64_t, int64_t>{4, 2}));

  WorkerInfo silent;  // says nothing of its kernels
  silent.id = "silent";
  silent.device_kind = "cuda";
  silent.device_name = "gpu-old";
  silent.memory_bytes = memory;
  silent.memory_reserve_bytes = 0;
  CART_ASSERT_OK(scheduler_->RegisterWorker(silent).status());
  std::optional<Job> smaller = AcquireNow("silent");
  ASSERT_TRUE(smaller.has_value());
  EXPECT_EQ(sent(*smaller), (std::pair<int64_t, int64_t>{1, 8}));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::LogLine> log, store_->RunLog(smaller->run.id, 0, 0));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0].text, HasSubstr("estimate on LibTorch 1.x, CUDA, separate projections"));
  EXPECT_EQ(config::DescribeKernels(KernelsOf(silent)), config::DescribeKernels(old));
}

TEST_F(SchedulerTest, RunsAreFittedIntoTheMemoryTheReserveLeaves) {
  EXPECT_EQ(config::DefaultMemoryReserveBytes(8 * kGiB), kGiB);
  EXPECT_EQ(config::DefaultMemoryReserveBytes(24 * kGiB), 24 * kGiB / 10);
  EXPECT_EQ(config::UsableMemoryBytes(24 * kGiB, -1), 24 * kGiB - 24 * kGiB / 10);
  EXPECT_EQ(config::UsableMemoryBytes(24 * kGiB, 0), 24 * kGiB);
  EXPECT_EQ(config::UsableMemoryBytes(kGiB / 2, -1), 0);

  SubmitResult sweep = Submit(R"(name: reserve
base: {vocab: 32000, d: 512, P: 2, R: 2, steps: 10, seq_len: 2048, batch: 16, accum: 1}
seeds: [1, 2]
)");
  ASSERT_EQ(sweep.runs.size(), 2u);
  const int64_t estimate = sweep.runs[0].memory_estimate_bytes;
  ASSERT_GT(estimate, 10 * kGiB);  // so that the default reserve is the 10 %

  // A card 5 % larger than the estimate: the whole card would take the run as configured, but
  // the default reserve (10 %) leaves less, so the micro-batch shrinks, the global batch stays.
  const int64_t card = estimate + estimate / 20;
  Register("gpu", card, /*reserve=*/-1);
  std::optional<Job> job = AcquireNow("gpu");
  ASSERT_TRUE(job.has_value());
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig sent,
                            config::ParseRunConfigYaml(job->run.config_yaml, "job"));
  EXPECT_LT(sent.train.batch, 16);
  EXPECT_EQ(sent.train.batch * sent.train.accum, 16);
  EXPECT_LE(config::EstimateTrainingBytes(sent, config::GpuWorkerKernels()),
            config::UsableMemoryBytes(card, -1));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::WorkerRecord> workers, store_->ListWorkers());
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].memory_bytes, card - card / 10);  // what placement uses, after a restart too

  // The same card registered with no reserve (--memory-reserve-mib 0) takes the run unchanged.
  Register("gpu", card, /*reserve=*/0);
  std::optional<Job> second = AcquireNow("gpu");
  ASSERT_TRUE(second.has_value());
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig whole,
                            config::ParseRunConfigYaml(second->run.config_yaml, "job"));
  EXPECT_EQ(whole.train.batch, 16);
}

TEST(FitMicroBatchTest, LargestDivisorOfTheGlobalBatchThatFitsNeverAboveTheConfigured) {
  config::RunConfig c;
  c.model.vocab = 100;
  c.model.d = 128;
  c.train.seq_len = 512;
  c.train.batch = 6;
  c.train.accum = 2;  // global 12: micro-batches 6, 4, 3, 2, 1 keep it
  const config::MemoryKernels k = config::GpuWorkerKernels();
  // At micro-batch b with the gradients held between micro-batches (b below the global batch).
  auto bytes = [&](int64_t b) {
    return config::EstimateTrainingBytes(c.model, {512, b, b >= 12 ? 1 : 2, true}, k);
  };
  EXPECT_EQ(config::FitMicroBatch(c, bytes(6), k)->batch, 6);
  EXPECT_EQ(config::FitMicroBatch(c, bytes(100), k)->batch, 6);  // never above the configured
  auto five = config::FitMicroBatch(c, bytes(5), k);             // 5 does not divide 12
  ASSERT_TRUE(five.has_value());
  EXPECT_EQ(five->batch, 4);
  EXPECT_EQ(five->accum, 3);
  EXPECT_EQ(five->bytes, bytes(4));
  EXPECT_EQ(config::FitMicroBatch(c, bytes(1), k)->accum, 12);
  EXPECT_FALSE(config::FitMicroBatch(c, bytes(1) - 1, k).has_value());
  // Allowed up to the global batch, it raises where the memory has room.
  EXPECT_EQ(config::FitMicroBatch(c, bytes(12), k, 12)->batch, 12);
  EXPECT_EQ(config::FitMicroBatch(c, bytes(12), k, 12)->accum, 1);
  EXPECT_EQ(config::FitMicroBatch(c, bytes(11), k, 12)->batch, 6);  // the largest divisor that fits
  EXPECT_EQ(config::FitMicroBatch(c, bytes(100), k, 100)->batch, 12);  // never above the global
  EXPECT_EQ(config::MinTrainingBytes(c, k), bytes(1));
  // A huge batch on a small device: the largest power-of-two divisor of 2^20 that fits.
  c.train.batch = 1 << 20;
  c.train.accum = 1;
  auto huge = config::FitMicroBatch(c, bytes(1000), k);
  ASSERT_TRUE(huge.has_value());
  EXPECT_EQ(huge->batch, 512);
  EXPECT_EQ(huge->accum, 2048);
}

// Placement knows speeds and lengths (server/placement.h): a slow worker asking first takes the
// short run, and the fast one the long run; the long run's "why it waits" said why the slow one
// did not get it. First fit (the old policy) gives the slow worker the oldest run.
constexpr char kLongAndShort[] = R"(name: ls
base: {vocab: 100, P: 1, R: 2, seq_len: 64, batch: 2, d: 64}
grid: {steps: [100000, 1000]}
seeds: [1]
)";

TEST_F(SchedulerTest, AFastWorkerGetsTheLongRunAndASlowOneTheShortOne) {
  SubmitResult sweep = Submit(kLongAndShort);
  ASSERT_EQ(sweep.runs.size(), 2u);
  const int64_t long_run = sweep.runs[0].id, short_run = sweep.runs[1].id;
  auto reg = [&](const std::string& id, double speed) {
    WorkerInfo w;
    w.id = id;
    w.device_kind = "cuda";
    w.device_name = id;
    w.memory_bytes = 24 * kGiB;
    w.memory_reserve_bytes = 0;
    w.speed_factor = speed;
    CART_ASSERT_OK(scheduler_->RegisterWorker(w).status());
  };
  reg("slow", 0.2);
  reg("fast", 1.0);
  auto run = store_->GetRun(long_run);
  ASSERT_TRUE(run.ok());
  EXPECT_GT(run->work_hours, 0);
  std::optional<Job> slow = AcquireNow("slow");
  ASSERT_TRUE(slow.has_value());
  EXPECT_EQ(slow->run.id, short_run);
  auto waiting = scheduler_->GetRun(long_run);
  ASSERT_TRUE(waiting.ok());
  EXPECT_THAT(waiting->info.waiting_reason, HasSubstr("not given to worker slow"));
  EXPECT_THAT(waiting->info.waiting_reason, HasSubstr("finishes sooner on fast"));
  std::optional<Job> fast = AcquireNow("fast");
  ASSERT_TRUE(fast.has_value());
  EXPECT_EQ(fast->run.id, long_run);
  // The workers list shows each speed and where it came from.
  for (const WorkerStatus& w : scheduler_->ListWorkers()) {
    EXPECT_EQ(w.speed_source, "reported") << w.info.id;
    EXPECT_DOUBLE_EQ(w.speed, w.info.id == "fast" ? 1.0 : 0.2);
  }

  // The old policy, kept selectable: the oldest run goes to whoever asks first.
  SchedulerOptions first_fit;
  first_fit.lease_ttl = kTtl;
  first_fit.expiry_interval = absl::ZeroDuration();
  first_fit.placement = SchedulerOptions::Placement::kFirstFit;
  scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, first_fit);
  Submit(StrCat(kLongAndShort).replace(6, 2, "l2"), "req-l2");
  reg("slow", 0.2);
  std::optional<Job> oldest = AcquireNow("slow");
  ASSERT_TRUE(oldest.has_value());
  EXPECT_EQ(oldest->run.name, "0");  // the long run, expanded first
}

// A worker that reports no speed starts from its card's peak and then runs at what its runs'
// tokens/s measure; a new worker of the same device starts from that measurement.
TEST_F(SchedulerTest, SpeedIsMeasuredFromTokensPerSecond) {
  SubmitResult sweep = Submit(kLongAndShort);
  WorkerInfo w;
  w.id = "w1";
  w.device_kind = "cuda";
  w.device_name = "NVIDIA GeForce RTX 3050";
  w.memory_bytes = 8 * kGiB;
  w.memory_reserve_bytes = 0;
  CART_ASSERT_OK(scheduler_->RegisterWorker(w).status());
  auto speed_of = [&](const std::string& id) {
    for (const WorkerStatus& s : scheduler_->ListWorkers()) {
      if (s.info.id == id) return std::make_pair(s.speed, s.speed_source);
    }
    return std::make_pair(0.0, std::string());
  };
  EXPECT_NEAR(speed_of("w1").first, 18.2 / 71.0, 1e-9);
  EXPECT_EQ(speed_of("w1").second, "card peak");
  Job job = Start("w1");
  // The run's tokens at what an RTX 3090 would reach (its work estimate), times 0.2.
  auto config = config::ParseRunConfigYaml(job.run.config_yaml, "run");
  ASSERT_TRUE(config.ok());
  const int64_t tokens =
      config->train.steps * config->train.batch * config->train.accum * config->train.seq_len;
  const double rtx3090 = static_cast<double>(tokens) / (job.run.work_hours * 3600.0);
  CART_ASSERT_OK(
      scheduler_->AppendMetrics(job.run.id, job.attempt, {{1, "tokens_per_s", 0.2 * rtx3090, 0}})
          .status());
  EXPECT_NEAR(speed_of("w1").first, 0.2, 1e-9);
  EXPECT_EQ(speed_of("w1").second, "measured");
  w.id = "w2";
  CART_ASSERT_OK(scheduler_->RegisterWorker(w).status());
  EXPECT_NEAR(speed_of("w2").first, 0.2, 1e-9);
  EXPECT_EQ(speed_of("w2").second, "measured on NVIDIA GeForce RTX 3050");
}

// A user may not give a sweep a priority above the cap (an admin may, and may re-prioritise a
// sweep later; a user may not).
TEST_F(SchedulerTest, PriorityAboveTheUsersCapIsRefusedAndOnlyAnAdminChangesIt) {
  SubmitRequest request;
  request.spec_yaml = OneRunSweep("greedy", 11);
  request.file_name = "greedy.yaml";
  request.who = "user:test";
  EXPECT_THAT(
      scheduler_->SubmitSweep(request),
      StatusIs(absl::StatusCode::kPermissionDenied,
               HasSubstr("greedy.yaml: priority: 11 is above the highest a user may set (10)")));
  request.who = "admin:root";
  CART_ASSERT_OK(scheduler_->SubmitSweep(request).status());
  SubmitResult low = Submit(OneRunSweep("low", 0));
  EXPECT_THAT(scheduler_->SetSweepPriority("low", 50, "user:test"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("needs an admin token")));
  auto changed = scheduler_->SetSweepPriority("low", 50, "admin:root");
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, 1);
  Register("w", 24 * kGiB);
  std::optional<Job> job = AcquireNow("w");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->run.id, low.runs[0].id);  // now above the admin's 11
}

// A worker registered before cartd restarted acquires without registering again, and placement
// gives it work: its speed is guessed from what the store remembers of its device (before, it
// had none, and placement left it waiting for ever).
TEST_F(SchedulerTest, AWorkerKnownFromBeforeARestartIsPlaced) {
  Register("w", 24 * kGiB);
  SubmitResult sweep = Submit(kLongAndShort);
  scheduler_ = MakeScheduler(absl::ZeroDuration());
  std::optional<Job> job = AcquireNow("w");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->run.id, sweep.runs[0].id);  // the longer
  for (const WorkerStatus& w : scheduler_->ListWorkers()) EXPECT_GT(w.speed, 0) << w.info.id;
}

// Fair share: within a priority level the owner with fewer recent GPU-hours is served first,
// even with the shorter run; with fair share off the longest run goes first.
TEST_F(SchedulerTest, TheOwnerWithFewerRecentGpuHoursIsServedFirst) {
  Register("w", 24 * kGiB);
  auto submit_as = [&](const std::string& who, const std::string& name, int64_t steps) {
    SubmitRequest request;
    request.spec_yaml = StrCat("name: ", name,
                               "\nbase: {d: 64, vocab: 100, P: 1, R: 2, seq_len: 64, batch: 2, "
                               "steps: ",
                               steps, "}\n");
    request.file_name = name + ".yaml";
    request.who = who;
    auto result = scheduler_->SubmitSweep(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->runs.at(0).id : 0;
  };
  // Alice has used the worker for two hours.
  submit_as("user:alice", "used", 1000);
  Job used = Start("w");
  clock_.Advance(absl::Hours(2));
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(used.run.id, used.attempt, store::AttemptOutcome::kSucceeded, "")
          .status());
  const int64_t alice_long = submit_as("user:alice", "a-long", 100000);
  const int64_t bob_short = submit_as("user:bob", "b-short", 1000);
  std::optional<Job> job = AcquireNow("w");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->run.id, bob_short);
  CART_ASSERT_OK(scheduler_->CancelRun(job->run.id, "admin:root", "").status());

  SchedulerOptions off;
  off.lease_ttl = kTtl;
  off.expiry_interval = absl::ZeroDuration();
  off.fair_share_half_life = absl::ZeroDuration();
  scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, off);
  job = AcquireNow("w");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->run.id, alice_long);
}

TEST_F(SchedulerTest, HigherPriorityFirstThenOlder) {
  SubmitResult low_a = Submit(OneRunSweep("low-a", 1));
  clock_.Advance(absl::Seconds(1));
  SubmitResult low_b = Submit(OneRunSweep("low-b", 1));
  clock_.Advance(absl::Seconds(1));
  SubmitResult high = Submit(OneRunSweep("high", 5));
  Register("w", kHuge);
  EXPECT_EQ(AcquireNow("w")->run.id, high.runs[0].id);
  EXPECT_EQ(AcquireNow("w")->run.id, low_a.runs[0].id);
  EXPECT_EQ(AcquireNow("w")->run.id, low_b.runs[0].id);
  EXPECT_FALSE(AcquireNow("w").has_value());
}

TEST_F(SchedulerTest, ExpiredLeaseRequeuesWithNextAttemptFromLatestCheckpoint) {
  SubmitResult sweep = Submit(OneRunSweep("s"));
  Register("w", kHuge);
  Job job = Start("w");
  ASSERT_EQ(job.attempt, 1);
  EXPECT_FALSE(job.resume_from.has_value());
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(job.run.id, 1, Checkpoint(4)).status());
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(job.run.id, 1, Checkpoint(8)).status());

  // Not yet lapsed: nothing expires.
  clock_.Advance(kTtl - absl::Seconds(1));
  CART_ASSERT_OK_AND_ASSIGN(auto none, scheduler_->ExpireLeases());
  EXPECT_TRUE(none.empty());

  clock_.Advance(absl::Seconds(2));
  CART_ASSERT_OK_AND_ASSIGN(auto expired, scheduler_->ExpireLeases());
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].run_id, job.run.id);
  EXPECT_EQ(StateOf(job.run.id), RunState::kQueued);

  std::optional<Job> again = AcquireNow("w");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->attempt, 2);
  ASSERT_TRUE(again->resume_from.has_value());
  EXPECT_EQ(again->resume_from->step, 8);
}

TEST_F(SchedulerTest, HeartbeatsKeepTheLease) {
  Submit(OneRunSweep("s"));
  Register("w", kHuge);
  Job job = Start("w");
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(kTtl / 2);
    CART_ASSERT_OK(scheduler_->Heartbeat(job.run.id, job.attempt, i).status());
    CART_ASSERT_OK_AND_ASSIGN(auto expired, scheduler_->ExpireLeases());
    EXPECT_TRUE(expired.empty());
  }
  EXPECT_EQ(StateOf(job.run.id), RunState::kRunning);
}

TEST_F(SchedulerTest, LostLeasesPastMaxAttemptsFailTheRun) {
  SubmitResult sweep = Submit(OneRunSweep("s", 0, /*max_attempts=*/2));
  Register("w", kHuge);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    Job job = Start("w");
    ASSERT_EQ(job.attempt, attempt);
    clock_.Advance(kTtl + absl::Seconds(1));
    CART_ASSERT_OK(scheduler_->ExpireLeases().status());
  }
  EXPECT_EQ(StateOf(sweep.runs[0].id), RunState::kFailed);
  EXPECT_FALSE(AcquireNow("w").has_value());
}

TEST_F(SchedulerTest, FencingRejectsReportsOfAStaleAttempt) {
  SubmitResult sweep = Submit(OneRunSweep("s"));
  Register("w", kHuge);
  Job first = Start("w");
  clock_.Advance(kTtl + absl::Seconds(1));
  CART_ASSERT_OK(scheduler_->ExpireLeases().status());
  Job second = Start("w");
  ASSERT_EQ(second.attempt, first.attempt + 1);

  const int64_t run = first.run.id;
  EXPECT_THAT(scheduler_->Heartbeat(run, first.attempt, 3),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
  EXPECT_THAT(scheduler_->AppendMetrics(run, first.attempt, {{3, "loss", 1.0, 0}}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
  EXPECT_THAT(scheduler_->ReportOutcome(run, first.attempt, store::AttemptOutcome::kSucceeded, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
  EXPECT_THAT(scheduler_->AttachStream(run, first.attempt, std::make_shared<RecordingStream>()),
              StatusIs(absl::StatusCode::kFailedPrecondition, _));
  // The current attempt is unaffected.
  CART_EXPECT_OK(scheduler_->AppendMetrics(run, second.attempt, {{3, "loss", 1.0, 0}}));
}

TEST_F(SchedulerTest, FailedOutcomeRetriesUntilMaxAttemptsThenFails) {
  SubmitResult sweep = Submit(OneRunSweep("s", 0, /*max_attempts=*/2));
  Register("w", kHuge);
  Job first = Start("w");
  CART_ASSERT_OK_AND_ASSIGN(
      store::RunRecord after_first,
      scheduler_->ReportOutcome(first.run.id, first.attempt, store::AttemptOutcome::kFailed,
                                "CUDA error"));
  EXPECT_EQ(after_first.state, RunState::kQueued);
  Job second = Start("w");
  EXPECT_EQ(second.attempt, 2);
  CART_ASSERT_OK_AND_ASSIGN(
      store::RunRecord after_second,
      scheduler_->ReportOutcome(second.run.id, second.attempt, store::AttemptOutcome::kFailed,
                                "CUDA error"));
  EXPECT_EQ(after_second.state, RunState::kFailed);
}

TEST_F(SchedulerTest, LongTextIsBoundedRefusedFromUsersAndCutFromWorkers) {
  SubmitResult sweep = Submit(OneRunSweep("s", 0, /*max_attempts=*/2));
  Register("w", kHuge);
  Job first = Start("w");
  const std::string essay(5000, 'x');
  EXPECT_THAT(scheduler_->CancelRun(first.run.id, "user:test", essay),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reason: 5000 bytes")));
  EXPECT_THAT(scheduler_->CancelSweep("s", "user:test", essay),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reason")));
  // A NUL byte, another control character, bytes that are not UTF-8: refused, naming the byte.
  EXPECT_THAT(scheduler_->CancelRun(first.run.id, "user:test", std::string("stop\0here", 9)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("reason: byte 4 is a control character (0)")));
  EXPECT_THAT(scheduler_->CancelRun(first.run.id, "user:test", "bell\a"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("byte 4")));
  EXPECT_THAT(scheduler_->CancelRun(first.run.id, "user:test", "caf\xe9"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("byte 3 is not UTF-8")));
  EXPECT_EQ(StateOf(first.run.id), RunState::kRunning) << "a refused cancel went through";
  // A worker's long error is stored cut, and the attempt still ends.
  CART_ASSERT_OK_AND_ASSIGN(
      store::RunRecord after,
      scheduler_->ReportOutcome(first.run.id, first.attempt, store::AttemptOutcome::kFailed,
                                std::string(1 << 20, 'e')));
  EXPECT_EQ(after.state, RunState::kQueued);
  CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(first.run.id));
  ASSERT_FALSE(details.events.empty());
  EXPECT_LT(details.events.back().why.size(), 4200u);
  EXPECT_THAT(details.events.back().why, HasSubstr("eee…"));
}

TEST_F(SchedulerTest, OnlyTheOwnerOrAnAdminChangesASweepAndOnlyAnAdminDrains) {
  SubmitResult sweep = Submit(OneRunSweep("mine", 0));  // submitted by user:test
  const int64_t run = sweep.runs.at(0).id;
  EXPECT_THAT(scheduler_->CancelSweep("mine", "user:mallory", ""),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("user:mallory may not cancel sweep 'mine'"),
                             HasSubstr("submitted by user:test"))));
  EXPECT_THAT(scheduler_->CancelRun(run, "user:mallory", ""),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("may not cancel run")));
  EXPECT_THAT(scheduler_->ResumeSweep("mine", "user:mallory"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("user:mallory may not")));
  EXPECT_THAT(scheduler_->ExtendRun(run, 99, ExtendSchedule::kStretch, "user:mallory"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("user:mallory may not")));
  CART_ASSERT_OK_AND_ASSIGN(RunDetails still, scheduler_->GetRun(run));
  EXPECT_EQ(still.info.run.state, RunState::kQueued);
  CART_ASSERT_OK_AND_ASSIGN(store::RunRecord by_admin,
                            scheduler_->CancelRun(run, "admin:root", ""));
  EXPECT_EQ(by_admin.state, RunState::kCancelled);
  CART_ASSERT_OK(scheduler_->ResumeRun(run, "user:test").status());
  Register("w", kHuge);
  EXPECT_THAT(scheduler_->DrainWorker("w", "user:test"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("needs an admin token")));
}

TEST_F(SchedulerTest, DrainedAttemptIsRequeuedWithoutCounting) {
  SubmitResult sweep = Submit(OneRunSweep("s", 0, /*max_attempts=*/1));
  Register("w", kHuge);
  Job first = Start("w");
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(first.run.id, first.attempt, Checkpoint(5)).status());
  CART_ASSERT_OK_AND_ASSIGN(
      store::RunRecord run,
      scheduler_->ReportOutcome(first.run.id, first.attempt, store::AttemptOutcome::kDrained,
                                "worker stopping"));
  // With max_attempts 1 a counted attempt would have failed the run.
  EXPECT_EQ(run.state, RunState::kQueued);
  Job second = Start("w");
  EXPECT_EQ(second.attempt, 2);
  ASSERT_TRUE(second.resume_from.has_value());
  EXPECT_EQ(second.resume_from->step, 5);
}

// A plan a worker could never finish (a reported speed of 1e-9 × a 3090 on a billion steps) has no
// expected finish: hours × 3.6e9 overflowed and the run and its sweep were shown finishing "now".
TEST_F(SchedulerTest, AnImpossiblePlanHasNoExpectedFinishInsteadOfNow) {
  RegisterAtSpeed("slow", 1e-9);
  SubmitResult sweep = Submit(R"(name: never
base: {d: 1024, vocab: 100, P: 1, R: 2, seq_len: 64, batch: 2, steps: 1000000000}
)");
  ASSERT_EQ(sweep.runs.size(), 1u);
  ASSERT_GT(sweep.runs[0].work_hours / 1e-9, 24.0 * 365 * 100);
  CART_ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Forecast> f, scheduler_->ExpectedFinish());
  EXPECT_EQ(f->run_finish_us.count(sweep.runs[0].id), 0u);
  EXPECT_EQ(f->sweep_finish_us.count(sweep.sweep.id), 0u);
  Job job = Start("slow");  // running: its pace is the estimate until it reports steps
  clock_.Advance(absl::Seconds(20));
  CART_ASSERT_OK_AND_ASSIGN(f, scheduler_->ExpectedFinish());
  EXPECT_EQ(f->run_finish_us.count(job.run.id), 0u);
  CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(job.run.id));
  EXPECT_EQ(details.info.expected_finish_us, 0);
}

// Expected finish: a running run's from its work at its worker's speed until it reports steps,
// then from its pace; a queued run's after what the plan puts before it on the same worker; the
// sweep's the latest; finished runs have none.
TEST_F(SchedulerTest, ExpectedFinishFollowsThePlanAndThePace) {
  RegisterAtSpeed("w", 0.5);  // reported: twice an RTX 3090's hours
  SubmitResult sweep = Submit(R"(name: eta
base: {d: 64, vocab: 100, P: 1, R: 2, seq_len: 64, batch: 2}
grid: {steps: [1000, 500]}
)");
  ASSERT_EQ(sweep.runs.size(), 2u);
  const int64_t t0 = absl::ToUnixMicros(clock_.Now());
  Job first = Start("w");  // the longer run goes first
  ASSERT_EQ(first.run.steps, 1000);
  const store::RunRecord& second = sweep.runs[0].steps == 500 ? sweep.runs[0] : sweep.runs[1];
  ASSERT_GT(first.run.work_hours, 0);
  const double first_h = first.run.work_hours / 0.5, second_h = second.work_hours / 0.5;
  CART_ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Forecast> f, scheduler_->ExpectedFinish());
  ASSERT_EQ(f->run_finish_us.count(first.run.id), 1u);
  ASSERT_EQ(f->run_finish_us.count(second.id), 1u);
  EXPECT_NEAR(f->run_finish_us.at(first.run.id), t0 + first_h * 3.6e9, 2);
  EXPECT_NEAR(f->run_finish_us.at(second.id), t0 + (first_h + second_h) * 3.6e9, 2);
  EXPECT_EQ(f->sweep_finish_us.at(sweep.sweep.id), f->run_finish_us.at(second.id));
  EXPECT_EQ(f->sweep_estimated_runs.at(sweep.sweep.id), 2);
  CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(second.id));
  EXPECT_EQ(details.info.expected_finish_us, f->run_finish_us.at(second.id));

  // Half the steps in an hour: an hour more for the first, whatever its estimate said.
  clock_.Advance(absl::Hours(1));
  CART_ASSERT_OK(scheduler_->Heartbeat(first.run.id, first.attempt, 500).status());
  const int64_t t1 = absl::ToUnixMicros(clock_.Now());
  CART_ASSERT_OK_AND_ASSIGN(f, scheduler_->ExpectedFinish());
  EXPECT_NEAR(f->run_finish_us.at(first.run.id), t1 + 3.6e9, 2);
  EXPECT_NEAR(f->run_finish_us.at(second.id), t1 + (1 + second_h) * 3.6e9, 2);

  // Finished, it has no estimate; the sweep's is its last run's.
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(first.run.id, first.attempt, store::AttemptOutcome::kSucceeded, "")
          .status());
  clock_.Advance(absl::Seconds(11));  // past the forecast's cache
  // Seen again (a worker asks for its next job at once; one silent for a lease TTL and a long
  // poll is lost, and nothing is planned onto it).
  RegisterAtSpeed("w", 0.5);
  CART_ASSERT_OK_AND_ASSIGN(f, scheduler_->ExpectedFinish());
  EXPECT_EQ(f->run_finish_us.count(first.run.id), 0u);
  EXPECT_EQ(f->sweep_estimated_runs.at(sweep.sweep.id), 1);
  CART_ASSERT_OK_AND_ASSIGN(details, scheduler_->GetRun(first.run.id));
  EXPECT_EQ(details.info.expected_finish_us, 0);
}

// Runs not yet submitted, forecast behind the queue (what `cart plan` prices its seeds with): the
// plan puts them after the queued runs longer than them, on the live worker at its speed, and
// adds nothing to the store; with no live worker there is no forecast.
TEST_F(SchedulerTest, ForecastRunsPlacesRunsNotYetSubmittedBehindTheQueue) {
  CART_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> none,
                            scheduler_->ForecastRuns({store::PlaceableRun{}}));
  EXPECT_EQ(none, std::vector<int64_t>{0});
  RegisterAtSpeed("w", 0.5);
  SubmitResult sweep = Submit(R"(name: queued
base: {d: 64, vocab: 100, P: 1, R: 2, seq_len: 64, batch: 2, steps: 1000}
)");
  ASSERT_EQ(sweep.runs.size(), 1u);
  const double queued_h = sweep.runs[0].work_hours / 0.5;
  ASSERT_GT(queued_h, 0);
  const int64_t t0 = absl::ToUnixMicros(clock_.Now());
  // One run far longer than the queued one (planned first) and one far shorter (after it).
  store::PlaceableRun longer, shorter;
  longer.work_hours = 100 * sweep.runs[0].work_hours;
  shorter.work_hours = sweep.runs[0].work_hours / 100;
  CART_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> at, scheduler_->ForecastRuns({longer, shorter}));
  ASSERT_EQ(at.size(), 2u);
  const double longer_h = longer.work_hours / 0.5, shorter_h = shorter.work_hours / 0.5;
  EXPECT_NEAR(at[0], t0 + longer_h * 3.6e9, 2);
  EXPECT_NEAR(at[1], t0 + (longer_h + queued_h + shorter_h) * 3.6e9, 2);
  CART_ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Forecast> f, scheduler_->ExpectedFinish());
  EXPECT_NEAR(f->run_finish_us.at(sweep.runs[0].id), t0 + queued_h * 3.6e9, 2)
      << "the forecast changed the queue's own plan";
}

// ---- Preemption at a checkpoint

class PreemptionTest : public SchedulerTest {
 protected:
  void SetUp() override {
    SchedulerTest::SetUp();
    scheduler_ = Preempting(absl::Hours(1));
  }
  std::unique_ptr<Scheduler> Preempting(absl::Duration interval) {
    SchedulerOptions options;
    options.lease_ttl = kTtl;
    options.expiry_interval = absl::ZeroDuration();
    options.startup_grace = absl::ZeroDuration();
    options.preemption = true;
    options.preempt_interval = interval;
    return std::make_unique<Scheduler>(store_.get(), &clock_, options);
  }
  int64_t SubmitAs(const std::string& who, const std::string& name, int priority = 0) {
    SubmitRequest request;
    request.spec_yaml = OneRunSweep(name, priority);
    request.file_name = name + ".yaml";
    request.who = who;
    auto result = scheduler_->SubmitSweep(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->runs.at(0).id : 0;
  }
  std::vector<int64_t> PreemptNow() {
    auto asked = scheduler_->Preempt();
    EXPECT_TRUE(asked.ok()) << asked.status();
    return asked.ok() ? *asked : std::vector<int64_t>{};
  }
  // Alice's run at priority 1 trains on worker "w" and has a checkpoint; Bob's at priority 5
  // waits, so Alice's is asked to stop and hands "w" back DRAINED. Returns {Alice's, Bob's}.
  std::pair<int64_t, int64_t> PreemptLowForHigh() {
    Register("w", kHuge);
    const int64_t low = SubmitAs("user:alice", "low", 1);
    Job job = Start("w");
    EXPECT_TRUE(scheduler_->RecordCheckpoint(low, job.attempt, Checkpoint(4)).ok());
    const int64_t high = SubmitAs("user:bob", "high", 5);
    EXPECT_EQ(PreemptNow(), std::vector<int64_t>{low});
    EXPECT_TRUE(
        scheduler_->ReportOutcome(low, job.attempt, store::AttemptOutcome::kDrained, "").ok());
    return {low, high};
  }
  static int Preempts(RecordingStream& stream) {
    int n = 0;
    for (const Control& c : stream.controls()) n += c.kind == Control::Kind::kPreempt;
    return n;
  }
};

// A higher-priority run waits and the only worker trains a lower one: that run is asked to stop
// at a checkpoint, but never before it has one, and only once; handed back DRAINED it is
// requeued uncounted, the waiting run takes the worker, and the preempted run resumes from its
// checkpoint later.
TEST_F(PreemptionTest, ALowerPriorityRunStopsAtACheckpointForWaitingWork) {
  Register("w", kHuge);
  const int64_t low = SubmitAs("user:alice", "low", 1);
  auto stream = std::make_shared<RecordingStream>();
  Job job = Start("w", stream);
  ASSERT_EQ(job.run.id, low);
  EXPECT_TRUE(PreemptNow().empty()) << "nothing waits";
  const int64_t high = SubmitAs("user:bob", "high", 5);
  EXPECT_TRUE(PreemptNow().empty()) << "preempted before its first checkpoint";
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(low, job.attempt, Checkpoint(4)).status());
  EXPECT_EQ(PreemptNow(), std::vector<int64_t>{low});
  ASSERT_EQ(Preempts(*stream), 1);
  EXPECT_THAT(stream->controls().back().reason, HasSubstr("priority 5 > 1"));
  EXPECT_TRUE(PreemptNow().empty()) << "asked again while it hands back";
  EXPECT_EQ(Preempts(*stream), 1);
  auto log = scheduler_->RunLog(low, 0, 0);
  ASSERT_TRUE(log.ok());
  ASSERT_FALSE(log->empty());
  EXPECT_THAT(log->back().text, HasSubstr("preempted at a checkpoint"));

  CART_ASSERT_OK_AND_ASSIGN(
      store::RunRecord back,
      scheduler_->ReportOutcome(low, job.attempt, store::AttemptOutcome::kDrained, ""));
  EXPECT_EQ(back.state, RunState::kQueued);
  EXPECT_EQ(back.attempts_counted, 0);
  CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(low));
  EXPECT_THAT(details.events.back().why, HasSubstr("preempted: run "));
  Job next = Start("w");
  EXPECT_EQ(next.run.id, high);
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(high, next.attempt, store::AttemptOutcome::kSucceeded, "")
          .status());
  Job resumed = Start("w");
  EXPECT_EQ(resumed.run.id, low);
  ASSERT_TRUE(resumed.resume_from.has_value());
  EXPECT_EQ(resumed.resume_from->step, 4);
  EXPECT_EQ(scheduler_->counters().Read().preemptions, 1);
}

// Off by default (a single user's box), and never while a live worker that fits is free: that
// worker is placement's to give.
TEST_F(PreemptionTest, OffByDefaultAndNotWhileAWorkerIsFree) {
  scheduler_ = MakeScheduler(absl::ZeroDuration());  // the defaults
  Register("w", kHuge);
  const int64_t low = SubmitAs("user:alice", "low", 1);
  Job job = Start("w");
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(low, job.attempt, Checkpoint(4)).status());
  const int64_t high = SubmitAs("user:bob", "high", 5);
  EXPECT_TRUE(PreemptNow().empty()) << "preemption is off by default";
  CART_ASSERT_OK(scheduler_->CancelRun(high, "admin:root", "").status());
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(low, job.attempt, store::AttemptOutcome::kCancelled, "").status());

  clock_.Advance(absl::Seconds(1));
  scheduler_ = Preempting(absl::Hours(1));
  Register("w", kHuge);
  const int64_t low2 = SubmitAs("user:alice", "low-2", 1);
  Job job2 = Start("w");
  ASSERT_EQ(job2.run.id, low2);
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(low2, job2.attempt, Checkpoint(4)).status());
  Register("spare", kHuge);  // registered just now: live, and free
  const int64_t high2 = SubmitAs("user:bob", "high-2", 5);
  EXPECT_TRUE(PreemptNow().empty()) << "preempted while a worker was free";
  EXPECT_EQ(Start("spare").run.id, high2);
}

TEST_F(PreemptionTest, ARunIsPreemptedAtMostOncePerInterval) {
  const auto [low, high] = PreemptLowForHigh();
  ASSERT_EQ(Start("w").run.id, high);
  Register("w2", kHuge);
  Job resumed = Start("w2");  // the preempted run, from its checkpoint
  ASSERT_EQ(resumed.run.id, low);
  SubmitAs("user:bob", "high-2", 5);
  clock_.Advance(absl::Minutes(59));
  EXPECT_TRUE(PreemptNow().empty()) << "preempted twice within the interval";
  clock_.Advance(absl::Minutes(2));
  EXPECT_EQ(PreemptNow(), std::vector<int64_t>{low});
}

// A restarted cartd knows from the store which workers still train: a worker whose run started
// before the restart is busy, not free, so waiting work of a higher priority preempts that run
// (the worker's reconnecting stream gets the ask) instead of waiting for a worker that is not free.
TEST_F(PreemptionTest, ARestartedSchedulerSeesTheWorkersStillTraining) {
  Register("w", kHuge);
  const int64_t low = SubmitAs("user:alice", "low", 1);
  Job job = Start("w");
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(low, job.attempt, Checkpoint(4)).status());

  clock_.Advance(absl::Seconds(1));
  scheduler_ = Preempting(absl::Hours(1));  // cartd restarts; the worker trains on
  SubmitAs("user:bob", "high", 5);
  EXPECT_EQ(PreemptNow(), std::vector<int64_t>{low});
  auto stream = std::make_shared<RecordingStream>();
  CART_ASSERT_OK(scheduler_->AttachStream(low, job.attempt, stream));
  EXPECT_EQ(Preempts(*stream), 1);
}

// When a run was last preempted is kept in the store: a restarted cartd does not ask it to stop
// again within the interval.
TEST_F(PreemptionTest, ARestartedSchedulerRemembersWhomItPreempted) {
  const auto [low, high] = PreemptLowForHigh();

  clock_.Advance(absl::Seconds(1));
  scheduler_ = Preempting(absl::Hours(1));  // cartd restarts
  ASSERT_EQ(Start("w").run.id, high);
  Register("w2", kHuge);
  Job resumed = Start("w2");
  ASSERT_EQ(resumed.run.id, low);
  ASSERT_TRUE(resumed.resume_from.has_value());
  SubmitAs("user:bob", "high-2", 5);
  clock_.Advance(absl::Minutes(59));
  EXPECT_TRUE(PreemptNow().empty()) << "preempted again within the interval after a restart";
  clock_.Advance(absl::Minutes(2));
  EXPECT_EQ(PreemptNow(), std::vector<int64_t>{low});
}

// The same priority: the owner holding two or more workers more than a waiting owner with less
// usage gives one up; once they are level, nothing more is preempted.
TEST_F(PreemptionTest, FairShareTakesAWorkerFromTheOwnerHoldingMore) {
  Register("w1", kHuge);
  Register("w2", kHuge);
  const int64_t a1 = SubmitAs("user:alice", "a1");
  const int64_t a2 = SubmitAs("user:alice", "a2");
  Job j1 = Start("w1");
  Job j2 = Start("w2");
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(j1.run.id, j1.attempt, Checkpoint(4)).status());
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(j2.run.id, j2.attempt, Checkpoint(4)).status());
  clock_.Advance(absl::Hours(2));
  const int64_t b1 = SubmitAs("user:bob", "b1");
  SubmitAs("user:bob", "b2");
  std::vector<int64_t> asked = PreemptNow();
  ASSERT_EQ(asked.size(), 1u) << "alice 2 workers, bob 0: one moves, not both";
  EXPECT_TRUE(asked[0] == a1 || asked[0] == a2);
  auto log = scheduler_->RunLog(asked[0], 0, 0);
  ASSERT_TRUE(log.ok() && !log->empty());
  EXPECT_THAT(log->back().text, HasSubstr("fair share: run"));
  EXPECT_THAT(log->back().text, HasSubstr("user:alice holds 2"));
  const Job& victim = asked[0] == j1.run.id ? j1 : j2;
  const std::string freed = asked[0] == j1.run.id ? "w1" : "w2";
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(victim.run.id, victim.attempt, store::AttemptOutcome::kDrained, "")
          .status());
  std::optional<Job> next = AcquireNow(freed);
  ASSERT_TRUE(next.has_value());
  EXPECT_TRUE(next->run.id == b1 || next->run.sweep_name == "b2")
      << "the freed worker went to " << next->run.sweep_name;
  clock_.Advance(absl::Hours(2));
  EXPECT_TRUE(PreemptNow().empty()) << "one worker each: level";
}

// A device reading stamped ahead of cartd's clock (a worker's clock set wrong) is dropped: one
// stamped ten minutes ahead used to hide every real reading for those ten minutes.
TEST_F(SchedulerTest, DeviceReadingsStampedAheadOfTheClockAreDropped) {
  Register("w", 24 * kGiB);
  const int64_t now = absl::ToUnixMicros(clock_.Now());
  DeviceSample ahead;
  ahead.at_us = now + 600'000'000;
  ahead.utilization = 0.99;
  DeviceSample real;
  real.at_us = now;
  real.utilization = 0.25;
  CART_ASSERT_OK_AND_ASSIGN(int added,
                            scheduler_->RecordDeviceSamples("w", DeviceIdentity{}, {ahead}));
  EXPECT_EQ(added, 0);
  CART_ASSERT_OK_AND_ASSIGN(added, scheduler_->RecordDeviceSamples("w", DeviceIdentity{}, {real}));
  EXPECT_EQ(added, 1);
  const std::vector<WorkerStatus> workers = scheduler_->ListWorkers();
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(workers[0].device.size(), 1u);
  EXPECT_EQ(workers[0].device[0].utilization, 0.25);
}

// At micro-batch 1 there is nothing left to lower: the run waits for a device with more memory.
TEST_F(SchedulerTest, OutOfMemoryAtMicroBatchOneIsNeverPlacedOnThatMemorySizeAgain) {
  SubmitResult sweep = Submit(
      "name: s\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10, batch: 1}\n"
      "max_attempts: 1\n");
  Register("small-a", 8 * kGiB);
  Job job = Start("small-a");
  CART_ASSERT_OK_AND_ASSIGN(
      store::RunRecord run,
      scheduler_->ReportOutcome(job.run.id, job.attempt, store::AttemptOutcome::kOutOfMemory,
                                "CUDA OOM"));
  EXPECT_EQ(run.state, RunState::kQueued);  // not counted, despite max_attempts 1
  EXPECT_EQ(run.oom_memory_bytes, 8 * kGiB);
  CART_ASSERT_OK_AND_ASSIGN(auto attempts, store_->ListAttempts(job.run.id));
  ASSERT_EQ(attempts.size(), 1u);  // recorded as what it was, not as a failure
  EXPECT_EQ(attempts[0].outcome,
            std::optional<store::AttemptOutcome>(store::AttemptOutcome::kOutOfMemory));
  EXPECT_THAT(scheduler_->ReportOutcome(job.run.id, job.attempt, store::AttemptOutcome::kLost, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lease expiry")));

  // Another worker with the same memory does not get it either.
  Register("small-b", 8 * kGiB);
  EXPECT_FALSE(AcquireNow("small-a").has_value());
  EXPECT_FALSE(AcquireNow("small-b").has_value());
  CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(job.run.id));
  EXPECT_THAT(details.info.waiting_reason, HasSubstr("ran out of memory on a 8.0 GiB device"));

  Register("big", 24 * kGiB);
  std::optional<Job> retry = AcquireNow("big");
  ASSERT_TRUE(retry.has_value());
  EXPECT_EQ(retry->run.id, job.run.id);
}

// An out-of-memory used to strand a run for ever on a lab whose cards are all one size: cartd
// set the worker's memory as the run's floor and waited for a bigger card. Now it lowers the
// micro-batch (the global batch kept by accumulation) and retries on the same size, down to 1;
// only then does it wait for more memory. The stored config stays as submitted.
TEST_F(SchedulerTest, AnOutOfMemoryLowersTheMicroBatchBeforeWaitingForMoreMemory) {
  Submit(
      "name: s\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10, batch: 8, accum: 1}\n"
      "max_attempts: 1\n");
  Register("w", 24 * kGiB);
  struct Step {
    int64_t micro;  // what the attempt trains at
    int64_t cap;    // the run's cap after it runs out of memory
  };
  for (const Step& step : {Step{8, 4}, Step{4, 2}, Step{2, 1}}) {
    Job job = Start("w");
    CART_ASSERT_OK_AND_ASSIGN(config::RunConfig sent,
                              config::ParseRunConfigYaml(job.run.config_yaml, "job"));
    EXPECT_EQ(sent.train.batch, step.micro);
    EXPECT_EQ(sent.train.batch * sent.train.accum, 8) << "the global batch changed";
    CART_ASSERT_OK_AND_ASSIGN(
        store::RunRecord run,
        scheduler_->ReportOutcome(job.run.id, job.attempt, store::AttemptOutcome::kOutOfMemory,
                                  "CUDA out of memory"));
    EXPECT_EQ(run.state, RunState::kQueued);  // not counted, despite max_attempts 1
    EXPECT_EQ(run.micro_batch_cap, step.cap);
    EXPECT_EQ(run.oom_memory_bytes, 0) << "a floor was set while a smaller micro-batch was left";
    CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(job.run.id));
    EXPECT_THAT(
        details.events.back().why,
        HasSubstr(StrCat("micro-batch ", step.micro, "): retried at micro-batch ", step.cap)));
    EXPECT_THAT(details.info.run.config_yaml, HasSubstr("batch: 8"));  // as submitted
    auto log = scheduler_->RunLog(job.run.id, 0, 0);
    ASSERT_TRUE(log.ok() && !log->empty());
    EXPECT_THAT(log->back().text,
                HasSubstr(StrCat("the next attempt trains at micro-batch ", step.cap)));
  }
  // The fourth attempt trains at micro-batch 1 (its log says why); out of memory there, the run
  // waits for a device with more memory than this one.
  Job last = Start("w");
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig sent,
                            config::ParseRunConfigYaml(last.run.config_yaml, "job"));
  EXPECT_EQ(sent.train.batch, 1);
  EXPECT_EQ(sent.train.accum, 8);
  auto log = scheduler_->RunLog(last.run.id, 0, 0);
  ASSERT_TRUE(log.ok() && !log->empty());
  EXPECT_THAT(log->back().text, HasSubstr("as the run ran out of memory at a larger one (cap 1)"));
  CART_ASSERT_OK_AND_ASSIGN(
      store::RunRecord run,
      scheduler_->ReportOutcome(last.run.id, last.attempt, store::AttemptOutcome::kOutOfMemory,
                                "CUDA out of memory"));
  EXPECT_EQ(run.oom_memory_bytes, 24 * kGiB);
  CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(last.run.id));
  EXPECT_THAT(details.events.back().why, HasSubstr("already at micro-batch 1"));
  EXPECT_FALSE(AcquireNow("w").has_value());
  Register("big", 48 * kGiB);
  std::optional<Job> bigger = AcquireNow("big");
  ASSERT_TRUE(bigger.has_value());
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig on_big,
                            config::ParseRunConfigYaml(bigger->run.config_yaml, "job"));
  EXPECT_EQ(on_big.train.batch, 1) << "the cap holds on a bigger card too";
}

TEST_F(SchedulerTest, DerivedJobIsBlockedUntilItsParentHasTheFinalCheckpoint) {
  SubmitResult sweep = Submit(kWithDerived);
  ASSERT_EQ(sweep.runs.size(), 2u);
  const int64_t parent = sweep.runs[0].id;
  const int64_t child = sweep.runs[1].id;
  EXPECT_EQ(sweep.runs[1].state, RunState::kBlocked);
  CART_ASSERT_OK_AND_ASSIGN(RunDetails blocked, scheduler_->GetRun(child));
  EXPECT_THAT(blocked.info.waiting_reason,
              HasSubstr(StrCat("waiting for parent run ", parent, " (QUEUED)")));

  Register("w", kHuge);
  Job job = Start("w");
  ASSERT_EQ(job.run.id, parent);
  EXPECT_FALSE(AcquireNow("w").has_value());  // the child is still blocked
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(parent, job.attempt, Checkpoint(10)).status());
  EXPECT_EQ(StateOf(child), RunState::kBlocked);  // "final" needs the parent to succeed
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(parent, job.attempt, store::AttemptOutcome::kSucceeded, "")
          .status());
  EXPECT_EQ(StateOf(child), RunState::kQueued);

  std::optional<Job> derived = AcquireNow("w");
  ASSERT_TRUE(derived.has_value());
  EXPECT_EQ(derived->run.id, child);
  EXPECT_EQ(derived->kind, JobKind::kEval);
  EXPECT_EQ(derived->eval_loops, (std::vector<int>{1, 2, 4}));
  ASSERT_TRUE(derived->init_from.has_value());
  EXPECT_EQ(derived->init_from->run_id, parent);
  EXPECT_EQ(derived->init_from->step, 10);
}

// variable_r.yaml's shape: a sweep of derived jobs only, whose parents are runs of a sweep
// already in the store; each child waits for its own parent's final checkpoint.
TEST_F(SchedulerTest, DerivedJobsOfALaterSweepStartFromAnotherSweepsRuns) {
  constexpr char kLater[] = R"(name: later
derived:
  - name: evalR
    kind: eval
    from: {sweep: first, match: {R: 4}, checkpoint: final}
    eval_loops: [1, 4, 8]
    set:
      tasks: {lambada: lambada=l.jsonl}
)";
  SubmitRequest early;
  early.spec_yaml = kLater;
  early.file_name = "later.yaml";
  EXPECT_THAT(scheduler_->SubmitSweep(early),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("sweep 'first'")));

  SubmitResult first = Submit(R"(name: first
base: {d: 64, vocab: 100, P: 1, steps: 10}
grid: {R: [2, 4]}
seeds: [1, 2]
)");
  ASSERT_EQ(first.runs.size(), 4u);  // R=2 s1, R=2 s2, R=4 s1, R=4 s2
  SubmitResult later = Submit(kLater);
  ASSERT_EQ(later.runs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const store::RunRecord& child = later.runs[i];
    EXPECT_EQ(child.state, RunState::kBlocked);
    ASSERT_TRUE(child.parent_run_id.has_value());
    EXPECT_EQ(*child.parent_run_id, first.runs[2 + i].id);
    CART_ASSERT_OK_AND_ASSIGN(config::RunConfig config,
                              config::ParseRunConfigYaml(child.config_yaml, "child"));
    EXPECT_EQ(config.model.R, 4);
    EXPECT_EQ(config.train.seed, static_cast<int64_t>(i + 1));
    EXPECT_EQ(config.data.tasks.at("lambada"), "lambada=l.jsonl");
  }
}

// A derived run naming a step its parent has passed without a checkpoint there (never saved, or
// removed by retention) would wait for ever: it is refused at submit, naming the steps there are.
TEST_F(SchedulerTest, ADerivedRunNamingAStepItsParentPassedIsRefusedAtSubmit) {
  SubmitResult first = Submit("name: first\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 100}\n");
  ASSERT_EQ(first.runs.size(), 1u);
  const int64_t parent = first.runs[0].id;
  Register("w", kHuge);
  Job job = Start("w");
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(parent, job.attempt, Checkpoint(10, 'a')).status());
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(parent, job.attempt, Checkpoint(30, 'b')).status());
  auto later = [](const std::string& name, const std::string& step) {
    return StrCat("name: ", name,
                  "\nderived:\n  - name: ft\n    from: {sweep: first, match: {R: 2}, checkpoint: ",
                  step, "}\n    set: {lr: 1e-4}\n");
  };
  SubmitRequest refused;
  refused.spec_yaml = later("from20", "20");
  EXPECT_THAT(scheduler_->SubmitSweep(refused),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("checkpoint at step 20"), HasSubstr("has steps 10, 30"))));
  refused.dry_run = true;
  EXPECT_THAT(scheduler_->SubmitSweep(refused).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("step 20")));
  // A kept step, and a step the parent has not reached yet, are accepted.
  EXPECT_EQ(Submit(later("from30", "30")).runs.size(), 1u);
  EXPECT_EQ(Submit(later("from50", "50")).runs.size(), 1u);
}

TEST_F(SchedulerTest, CancelResumeAndExtendFollowTheRunLifecycle) {
  SubmitResult sweep = Submit(OneRunSweep("s"));
  const int64_t run = sweep.runs[0].id;
  CART_ASSERT_OK_AND_ASSIGN(store::RunRecord cancelled,
                            scheduler_->CancelRun(run, "user:test", ""));
  EXPECT_EQ(cancelled.state, RunState::kCancelled);
  // Idempotent.
  CART_ASSERT_OK_AND_ASSIGN(store::RunRecord again, scheduler_->CancelRun(run, "user:test", ""));
  EXPECT_EQ(again.state, RunState::kCancelled);
  EXPECT_THAT(scheduler_->ExtendRun(run, 20, ExtendSchedule::kStretch, "user:test"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("CANCELLED")));

  CART_ASSERT_OK_AND_ASSIGN(store::RunRecord resumed, scheduler_->ResumeRun(run, "user:test"));
  EXPECT_EQ(resumed.state, RunState::kQueued);
  EXPECT_THAT(scheduler_->ResumeRun(run, "user:test"),
              StatusIs(absl::StatusCode::kFailedPrecondition, _));

  Register("w", kHuge);
  Job job = Start("w");
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(run, job.attempt, Checkpoint(10)).status());
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(run, job.attempt, store::AttemptOutcome::kSucceeded, "").status());
  EXPECT_THAT(scheduler_->CancelRun(run, "user:test", ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, _));
  EXPECT_THAT(scheduler_->ExtendRun(run, 10, ExtendSchedule::kStretch, "user:test"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("would add none")));

  CART_ASSERT_OK_AND_ASSIGN(ExtendOutcome out,
                            scheduler_->ExtendRun(run, 25, ExtendSchedule::kStretch, "user:test"));
  const store::RunRecord& extended = out.run;
  EXPECT_EQ(extended.state, RunState::kQueued);
  EXPECT_EQ(extended.steps, 25);
  EXPECT_THAT(extended.config_yaml, HasSubstr("steps: 25"));
  std::optional<Job> more = AcquireNow("w");
  ASSERT_TRUE(more.has_value());
  EXPECT_EQ(more->run.steps, 25);
  ASSERT_TRUE(more->resume_from.has_value());
  EXPECT_EQ(more->resume_from->step, 10);
}

// Extending a finished run: its learning rate at the extension point is a choice the user makes
// when it would jump (more than 2x), shown in the answer and recorded in the run's events.
TEST_F(SchedulerTest, ExtendAsksBeforeAWarmRestartAndRecordsTheScheduleItApplied) {
  SubmitResult sweep =
      Submit("name: s\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 100, warmup: 10}\n");
  const int64_t run = sweep.runs[0].id;
  Register("w", kHuge);
  Job job = Start("w");
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(run, job.attempt, Checkpoint(10)).status());
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(run, job.attempt, store::AttemptOutcome::kSucceeded, "").status());
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig before,
                            config::ParseRunConfigYaml(job.run.config_yaml, "run"));
  const int64_t steps = before.train.steps;
  const double last = config::ScheduledLr(before.train, steps - 1);
  ASSERT_EQ(last, before.train.lr_min);
  // Ten times the steps, stretched, would start the extension far above the final rate.
  const int64_t total = steps * 10;
  config::RunConfig stretched = before;
  stretched.train.steps = total;
  const double restart = config::ScheduledLr(stretched.train, steps);
  ASSERT_GT(restart, 2 * last);
  EXPECT_THAT(scheduler_->ExtendRun(run, total, ExtendSchedule::kAsk, "user:test"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(StrCat("from ", Sci(last), " at step ", steps, " to ",
                                              Sci(restart), " at step ", steps + 1)),
                             HasSubstr("--schedule stretch"), HasSubstr("--schedule hold"))));
  CART_ASSERT_OK_AND_ASSIGN(RunDetails unchanged, scheduler_->GetRun(run));
  EXPECT_EQ(unchanged.info.run.state, RunState::kSucceeded) << "a refused extend changes nothing";

  CART_ASSERT_OK_AND_ASSIGN(ExtendOutcome held,
                            scheduler_->ExtendRun(run, total, ExtendSchedule::kHold, "user:test"));
  EXPECT_EQ(held.schedule, ExtendSchedule::kHold);
  EXPECT_EQ(held.from_step, steps);
  EXPECT_EQ(held.lr_before, last);
  EXPECT_EQ(held.lr_after, last);
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig after,
                            config::ParseRunConfigYaml(held.run.config_yaml, "run"));
  EXPECT_EQ(after.train.steps, total);
  EXPECT_EQ(after.train.lr_decay_steps, steps);
  // The run's params follow its config (they were patched for `steps` alone, so filters and
  // tables read the old schedule).
  EXPECT_EQ(held.run.params.at("steps"), StrCat(total));
  EXPECT_EQ(held.run.params.at("lr_decay_steps"), StrCat(steps));
  // The first steps' rates are those the run trained with; every later one is the final rate.
  for (int64_t s : {int64_t{0}, steps / 2, steps - 1}) {
    EXPECT_EQ(config::ScheduledLr(after.train, s), config::ScheduledLr(before.train, s)) << s;
  }
  EXPECT_EQ(config::ScheduledLr(after.train, total - 1), last);
  CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(run));
  EXPECT_THAT(details.events.back().why,
              HasSubstr(StrCat("schedule hold: learning rate ", Sci(last), " at step ", steps,
                               " -> ", Sci(last), " at step ", steps + 1)));
}

// A run whose loss became non-finite fails at once: resume is exact, so a retry would replay the
// same steps to the same loss. It resumes only with a change of a key that alters its course.
TEST_F(SchedulerTest, ADivergedRunFailsWithoutRetriesAndResumesOnlyWithAChange) {
  SubmitResult sweep = Submit(OneRunSweep("s", 0, /*max_attempts=*/3));
  const int64_t run = sweep.runs[0].id;
  Register("w", kHuge);
  Job job = Start("w");
  CART_ASSERT_OK(scheduler_->RecordCheckpoint(run, job.attempt, Checkpoint(4)).status());
  CART_ASSERT_OK_AND_ASSIGN(
      store::RunRecord failed,
      scheduler_->ReportOutcome(run, job.attempt, store::AttemptOutcome::kFailed,
                                "loss became nan at step 7 (diverged; lower lr or check the data)",
                                store::Divergence{7, std::nan("")}));
  EXPECT_EQ(failed.state, RunState::kFailed) << "one attempt of three spent, yet not retried";
  EXPECT_EQ(failed.attempt, 1);
  ASSERT_TRUE(failed.diverged.has_value());
  EXPECT_EQ(failed.diverged->step, 7);
  EXPECT_TRUE(std::isnan(failed.diverged->loss));
  CART_ASSERT_OK_AND_ASSIGN(RunDetails details, scheduler_->GetRun(run));
  EXPECT_THAT(details.events.back().why,
              AllOf(HasSubstr("loss became nan at step 7"),
                    HasSubstr("not retried: resuming it unchanged would diverge at step 7 again")));
  EXPECT_FALSE(AcquireNow("w").has_value());

  EXPECT_THAT(scheduler_->ResumeRun(run, "user:test"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("diverged (loss nan at step 7)"),
                             HasSubstr(StrCat("cart runs resume ", run, " --set lr=")))));
  EXPECT_THAT(scheduler_->ResumeRun(run, "user:test", {"d=128"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("may change only lr, lr_min, warmup, clip, dtype")));
  const std::string lr =
      config::GetKey(*config::ParseRunConfigYaml(job.run.config_yaml, "run"), "lr").value();
  EXPECT_THAT(scheduler_->ResumeRun(run, "user:test", {"lr=" + lr}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no value differs")));
  EXPECT_THAT(scheduler_->ResumeRun(run, "user:test", {"lr=99"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr")));
  // A sweep-wide resume leaves it alone.
  CART_ASSERT_OK_AND_ASSIGN(int64_t resumed_in_sweep, scheduler_->ResumeSweep("s", "user:test"));
  EXPECT_EQ(resumed_in_sweep, 0);

  CART_ASSERT_OK_AND_ASSIGN(store::RunRecord resumed,
                            scheduler_->ResumeRun(run, "user:test", {"lr=1e-4", "clip=0.5"}));
  EXPECT_EQ(resumed.state, RunState::kQueued);
  EXPECT_FALSE(resumed.diverged.has_value());
  EXPECT_EQ(resumed.params.at("lr"), "0.0001");
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig changed,
                            config::ParseRunConfigYaml(resumed.config_yaml, "run"));
  EXPECT_EQ(changed.train.lr, 1e-4);
  EXPECT_EQ(changed.train.clip, 0.5);
  CART_ASSERT_OK_AND_ASSIGN(RunDetails after, scheduler_->GetRun(run));
  EXPECT_THAT(after.events.back().why, HasSubstr(StrCat("resumed with lr ", lr, " -> 0.0001")));
  std::optional<Job> again = AcquireNow("w");
  ASSERT_TRUE(again.has_value());
  ASSERT_TRUE(again->resume_from.has_value());
  EXPECT_EQ(again->resume_from->step, 4);
  EXPECT_THAT(again->run.config_yaml, HasSubstr("lr: 0.0001"));
}

TEST_F(SchedulerTest, CancelOfARunningRunIsPushedToItsStream) {
  SubmitResult sweep = Submit(OneRunSweep("s"));
  Register("w", kHuge);
  auto stream = std::make_shared<RecordingStream>();
  Job job = Start("w", stream);
  CART_ASSERT_OK_AND_ASSIGN(store::RunRecord run,
                            scheduler_->CancelRun(job.run.id, "user:test", "wrong lr"));
  EXPECT_EQ(run.state, RunState::kRunning);
  EXPECT_TRUE(run.cancel_requested);
  auto controls = stream->controls();
  ASSERT_EQ(controls.size(), 1u);
  EXPECT_EQ(controls[0].kind, Control::Kind::kCancel);
  EXPECT_EQ(controls[0].reason, "wrong lr");
  // The heartbeat reports it too, and the worker's CANCELLED outcome ends the run.
  CART_ASSERT_OK_AND_ASSIGN(bool cancel, scheduler_->Heartbeat(job.run.id, job.attempt, 1));
  EXPECT_TRUE(cancel);
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(job.run.id, job.attempt, store::AttemptOutcome::kCancelled, "")
          .status());
  EXPECT_EQ(StateOf(job.run.id), RunState::kCancelled);
}

TEST_F(SchedulerTest, SubmitIsIdempotentOnRequestId) {
  SubmitResult first = Submit(OneRunSweep("s"), "req-1");
  EXPECT_FALSE(first.existing);
  SubmitResult second = Submit(OneRunSweep("s"), "req-1");
  EXPECT_TRUE(second.existing);
  EXPECT_EQ(second.sweep.id, first.sweep.id);
  ASSERT_EQ(second.runs.size(), 1u);
  EXPECT_EQ(second.runs[0].id, first.runs[0].id);
  CART_ASSERT_OK_AND_ASSIGN(auto all, store_->ListRuns(store::RunFilter{}));
  EXPECT_EQ(all.size(), 1u);

  SubmitRequest other;
  other.spec_yaml = OneRunSweep("s", 3);
  other.request_id = "req-2";
  other.who = "user:test";
  EXPECT_THAT(scheduler_->SubmitSweep(other), StatusIs(absl::StatusCode::kAlreadyExists, _));
}

TEST_F(SchedulerTest, GridPastTheLimitIsRefusedWithTheCount) {
  scheduler_ = MakeScheduler(absl::ZeroDuration(), /*max_runs=*/10);
  SubmitRequest request;
  request.spec_yaml = R"(name: big
base: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}
grid: {R: [1, 2, 3, 4], P: [1, 2, 3, 4]}
)";
  request.file_name = "big.yaml";
  EXPECT_THAT(scheduler_->SubmitSweep(request),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("16 runs")));
  CART_ASSERT_OK_AND_ASSIGN(auto all, store_->ListRuns(store::RunFilter{}));
  EXPECT_TRUE(all.empty());
}

// A small file may expand to a huge store: 100,000 runs, each naming a 4,096-byte path, once
// became 2.76 GB of database. The expansion stops at the run that passes max_sweep_bytes, the
// refusal names the bound and what one run takes, and nothing is stored.
TEST_F(SchedulerTest, ASweepPastItsByteBoundIsRefusedAtTheRunThatPassesIt) {
  SchedulerOptions options;
  options.lease_ttl = kTtl;
  options.expiry_interval = absl::ZeroDuration();
  options.max_sweep_bytes = 1 << 20;
  scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, options);
  SubmitRequest request;
  const std::string path = "/data/" + std::string(4000, 'p') + ".bin";
  request.spec_yaml = StrCat(
      "name: wide\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10, ", "train_data: ", path,
      "}\ngrid: {lr: [1e-3, 2e-3, 3e-3, 4e-3, 5e-3, ", "6e-3, 7e-3, 8e-3, 9e-3, 1e-2]}\nseeds: [",
      [] {
        std::string seeds;
        for (int i = 0; i < 100; ++i) seeds += StrCat(i ? ", " : "", i);
        return seeds;
      }(),
      "]\n");
  request.file_name = "wide.yaml";
  request.who = "user:test";
  const absl::Status refused = scheduler_->SubmitSweep(request).status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted,
                                HasSubstr("more than 1048576 bytes of configs by run")));
  EXPECT_THAT(refused.message(), HasSubstr("of 1000"));
  EXPECT_THAT(refused.message(), HasSubstr("max_sweep_bytes"));
  CART_ASSERT_OK_AND_ASSIGN(auto all, store_->ListRuns(store::RunFilter{}));
  EXPECT_TRUE(all.empty());
  // Under the bound the same grid goes through.
  request.spec_yaml =
      "name: narrow\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\n"
      "grid: {lr: [1e-3, 2e-3]}\nseeds: [1, 2]\n";
  EXPECT_TRUE(scheduler_->SubmitSweep(request).ok());
}

TEST_F(SchedulerTest, InvalidSweepNamesFileAndLine) {
  SubmitRequest request;
  request.spec_yaml = "name: bad\nbase: {d: 100}\n";
  request.file_name = "bad.yaml";
  EXPECT_THAT(scheduler_->SubmitSweep(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad.yaml")));
}

TEST_F(SchedulerTest, DryRunExpandsWithoutStoring) {
  SubmitRequest request;
  request.spec_yaml = kWithDerived;
  request.dry_run = true;
  CART_ASSERT_OK_AND_ASSIGN(SubmitResult result, scheduler_->SubmitSweep(request));
  ASSERT_EQ(result.runs.size(), 2u);
  EXPECT_EQ(result.runs[0].id, 0);
  EXPECT_EQ(result.runs[1].state, RunState::kBlocked);
  EXPECT_GT(result.runs[0].memory_estimate_bytes, 0);
  CART_ASSERT_OK_AND_ASSIGN(auto all, store_->ListRuns(store::RunFilter{}));
  EXPECT_TRUE(all.empty());
}

TEST_F(SchedulerTest, LongPollWakesWhenARunIsSubmitted) {
  Register("w", kHuge);
  std::atomic<int64_t> got{-1};
  const absl::Time start = absl::Now();
  std::thread poller([&] {
    auto job = scheduler_->Acquire("w", absl::Seconds(20));
    got = job.ok() && job->has_value() ? (*job)->run.id : 0;
  });
  // Submitted while the poll waits, not before it starts: then only a wake-up can deliver it.
  ASSERT_TRUE(::cart::testing::WaitUntil([&] { return scheduler_->waiting_acquires() == 1; }));
  SubmitResult sweep = Submit(OneRunSweep("s"));
  poller.join();
  EXPECT_EQ(got.load(), sweep.runs[0].id);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(SchedulerTest, LongPollReturnsNothingAfterItsWait) {
  Register("w", kHuge);
  const absl::Time start = absl::Now();
  CART_ASSERT_OK_AND_ASSIGN(auto job, scheduler_->Acquire("w", absl::Milliseconds(200)));
  EXPECT_FALSE(job.has_value());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
}

TEST_F(SchedulerTest, ShutdownEndsLongPollsAndClosesStreams) {
  Submit(OneRunSweep("s"));
  Register("w", kHuge);
  auto stream = std::make_shared<RecordingStream>();
  Start("w", stream);
  std::thread poller([&] {
    auto job = scheduler_->Acquire("w", absl::Seconds(20));
    EXPECT_TRUE(!job.ok() || !job->has_value());
  });
  ASSERT_TRUE(::cart::testing::WaitUntil([&] { return scheduler_->waiting_acquires() == 1; }));
  const absl::Time start = absl::Now();
  scheduler_->Shutdown();
  poller.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(stream->closed());
}

TEST_F(SchedulerTest, DrainingWorkerGetsADrainAndNoNewJob) {
  Submit(OneRunSweep("a"));
  Submit(OneRunSweep("b"));
  Register("w", kHuge);
  auto stream = std::make_shared<RecordingStream>();
  Start("w", stream);
  CART_ASSERT_OK(scheduler_->DrainWorker("w", "admin:a"));
  auto controls = stream->controls();
  ASSERT_EQ(controls.size(), 1u);
  EXPECT_EQ(controls[0].kind, Control::Kind::kDrain);
  const absl::StatusOr<std::optional<Job>> acquired =
      scheduler_->Acquire("w", absl::ZeroDuration());
  EXPECT_THAT(acquired, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("draining")));
  EXPECT_TRUE(IsDraining(acquired.status()));
  // Unregistered, also a FailedPrecondition, is not a drain.
  EXPECT_FALSE(IsDraining(scheduler_->Acquire("nobody", absl::ZeroDuration()).status()));
  EXPECT_THAT(scheduler_->DrainWorker("nobody", "admin:a"),
              StatusIs(absl::StatusCode::kNotFound, _));
  std::vector<WorkerStatus> workers = scheduler_->ListWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].state, "draining");
}

// 32 careless parallel submits of a big grid took cartd to 3 GB: expansions are taken a few at a
// time (max_concurrent_submits), and the others are told to retry.
TEST_F(SchedulerTest, ConcurrentSubmissionsPastTheLimitAreToldToRetry) {
  SchedulerOptions options;
  options.lease_ttl = kTtl;
  options.expiry_interval = absl::ZeroDuration();
  options.startup_grace = absl::ZeroDuration();
  options.max_concurrent_submits = 1;
  scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, options);
  // A 20,000-run grid: expanding and storing it takes a while.
  std::string big = "name: big\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\ngrid:\n  lr: [";
  for (int i = 0; i < 200; ++i) big += StrCat(i == 0 ? "" : ", ", 0.0001 * (i + 1));
  big += "]\nseeds: [";
  for (int i = 0; i < 100; ++i) big += StrCat(i == 0 ? "" : ", ", i);
  big += "]\nmax_runs: 20000\n";
  SubmitRequest first;
  first.spec_yaml = big;
  first.who = "user:a";
  std::thread in_flight([&] {
    absl::StatusOr<SubmitResult> r = scheduler_->SubmitSweep(first);
    EXPECT_TRUE(r.ok()) << r.status();
  });
  SubmitRequest second;
  second.spec_yaml = OneRunSweep("small");
  second.who = "user:b";
  if (::cart::testing::WaitUntil([&] { return scheduler_->submits_in_flight() == 1; })) {
    EXPECT_THAT(scheduler_->SubmitSweep(second),
                StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("retry in a moment")));
  } else {
    ADD_FAILURE() << "the first submission was never seen in flight";
  }
  in_flight.join();
  EXPECT_EQ(scheduler_->submits_in_flight(), 0);
  EXPECT_TRUE(scheduler_->SubmitSweep(second).ok());  // the slot is free again
}

TEST_F(SchedulerTest, UnregisteredWorkerCannotAcquire) {
  EXPECT_THAT(scheduler_->Acquire("ghost", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not registered")));
}

TEST_F(SchedulerTest, RestartedSchedulerGivesLeasesOneTtlOfGrace) {
  Submit(OneRunSweep("s"));
  Register("w", kHuge);
  Job job = Start("w");
  // cartd was down for longer than the TTL: the lease lapsed meanwhile.
  clock_.Advance(kTtl * 3);
  scheduler_ = MakeScheduler(/*grace=*/absl::Seconds(-1));
  CART_ASSERT_OK_AND_ASSIGN(auto during_grace, scheduler_->ExpireLeases());
  EXPECT_TRUE(during_grace.empty());
  // The worker heartbeats within the grace and keeps its run; the restarted scheduler knows it
  // from the store without a new registration.
  clock_.Advance(kTtl / 2);
  CART_ASSERT_OK(scheduler_->Heartbeat(job.run.id, job.attempt, 7).status());
  clock_.Advance(kTtl / 2 + absl::Seconds(1));
  CART_ASSERT_OK_AND_ASSIGN(auto after_grace, scheduler_->ExpireLeases());
  EXPECT_TRUE(after_grace.empty());
  EXPECT_EQ(StateOf(job.run.id), RunState::kRunning);
  EXPECT_THAT(scheduler_->Acquire("w", absl::ZeroDuration()), ::cart::testing::IsOk());

  // Without heartbeats it is taken back once the grace is over.
  clock_.Advance(kTtl + absl::Seconds(1));
  CART_ASSERT_OK_AND_ASSIGN(auto expired, scheduler_->ExpireLeases());
  EXPECT_EQ(expired.size(), 1u);
}

// ---- What is new since a cursor (server/run_cursor.h): the one reader behind StreamMetrics,
// StreamRunLog and the dashboard's live events.

TEST_F(SchedulerTest, AMetricCursorReadsEachPointOnceAndFollowsMetricsLoggedLater) {
  Submit(OneRunSweep("cur"));
  Register("w", 8 * kGiB);
  const Job job = Start("w");
  MetricCursor all(*scheduler_, job.run.id, /*from_step=*/2);
  MetricCursor named(*scheduler_, job.run.id, 0, {"val_loss", "loss"});
  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::Series> none, all.Next());
  EXPECT_TRUE(none.empty());
  // A named metric not logged yet is no error.
  CART_ASSERT_OK_AND_ASSIGN(none, named.Next());
  EXPECT_TRUE(none.empty());

  CART_ASSERT_OK(
      scheduler_
          ->AppendMetrics(job.run.id, job.attempt,
                          {{1, "loss", 4.0, 0}, {2, "loss", 3.0, 0}, {3, "loss", 2.5, 0}})
          .status());
  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::Series> read, all.Next());
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].metric, "loss");
  ASSERT_EQ(read[0].points.size(), 2u);  // from step 2
  EXPECT_EQ(read[0].points[0].step, 2);
  EXPECT_EQ(read[0].points[1].value, 2.5);
  EXPECT_EQ(all.latest_step(), 3);

  // rho first appears at step 4: the cursor over every name reads it from its from_step.
  CART_ASSERT_OK(scheduler_
                     ->AppendMetrics(job.run.id, job.attempt,
                                     {{2, "rho", 0.5, 0},
                                      {4, "loss", 2.0, 0},
                                      {4, "rho", 0.7, 0},
                                      {4, "val_loss", 2.2, 0}})
                     .status());
  CART_ASSERT_OK_AND_ASSIGN(read, all.Next());
  ASSERT_EQ(read.size(), 3u);  // by name
  EXPECT_EQ(read[0].metric, "loss");
  ASSERT_EQ(read[0].points.size(), 1u);
  EXPECT_EQ(read[0].points[0].step, 4);
  EXPECT_EQ(read[1].metric, "rho");
  EXPECT_EQ(read[1].points.size(), 2u);
  EXPECT_EQ(read[2].metric, "val_loss");
  CART_ASSERT_OK_AND_ASSIGN(none, all.Next());
  EXPECT_TRUE(none.empty()) << "points read twice";
  EXPECT_EQ(all.latest_step(), 4);

  // The named cursor reads its two names only, from step 0.
  CART_ASSERT_OK_AND_ASSIGN(read, named.Next());
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].metric, "loss");
  EXPECT_EQ(read[0].points.size(), 4u);
  EXPECT_EQ(read[1].metric, "val_loss");

  // Capped, a long stretch comes downsampled and the cursor passes all of it.
  MetricCursor capped(*scheduler_, job.run.id, 0, {"loss"});
  CART_ASSERT_OK_AND_ASSIGN(read, capped.Next(/*max_points=*/2));
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].points.size(), 2u);
  EXPECT_EQ(read[0].total_points, 4);
  CART_ASSERT_OK_AND_ASSIGN(none, capped.Next(2));
  EXPECT_TRUE(none.empty());
}

// An error of the store is returned, not skipped, and the cursor stays: the next read after the
// store recovers has every point. (The dashboard's live view used to skip such a metric and move
// on, leaving a hole in the curve with no sign of it.)
TEST_F(SchedulerTest, AMetricCursorReturnsTheStoresErrorsAndKeepsItsPlace) {
  Submit(OneRunSweep("err"));
  Register("w", 8 * kGiB);
  const Job job = Start("w");
  MetricCursor cursor(*scheduler_, job.run.id, 0);
  LogCursor logs(*scheduler_, job.run.id, 0);
  CART_ASSERT_OK(
      scheduler_->AppendMetrics(job.run.id, job.attempt, {{1, "loss", 4.0, 0}, {2, "loss", 3.0, 0}})
          .status());
  store::LogLine line;
  line.seq = 1;
  line.text = "step 1";
  CART_ASSERT_OK(scheduler_->AppendLog(job.run.id, job.attempt, {line}));

  store::testing::ExecOnDatabaseFile(dir_.File("cart.db"),
                                     "ALTER TABLE metrics RENAME TO metrics_away;"
                                     "ALTER TABLE run_logs RENAME TO run_logs_away;");
  const absl::Status metrics_gone = cursor.Next().status();
  EXPECT_FALSE(metrics_gone.ok());
  EXPECT_THAT(metrics_gone.message(), HasSubstr("metrics"));
  const absl::Status logs_gone = logs.Next().status();
  EXPECT_FALSE(logs_gone.ok());
  EXPECT_THAT(logs_gone.message(), HasSubstr("run_logs"));
  EXPECT_EQ(logs.after_id(), 0);
  store::testing::ExecOnDatabaseFile(dir_.File("cart.db"),
                                     "ALTER TABLE metrics_away RENAME TO metrics;"
                                     "ALTER TABLE run_logs_away RENAME TO run_logs;");

  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::Series> read, cursor.Next());
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].points.size(), 2u);
  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::LogLine> lines, logs.Next());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, "step 1");
  EXPECT_EQ(logs.after_id(), lines[0].id);
}

TEST_F(SchedulerTest, ALogCursorPagesThroughTheLinesOnce) {
  Submit(OneRunSweep("log"));
  Register("w", 8 * kGiB);
  const Job job = Start("w");
  std::vector<store::LogLine> lines(3);
  for (int i = 0; i < 3; ++i) {
    lines[i].seq = i + 1;
    lines[i].text = StrCat("line ", i + 1);
  }
  CART_ASSERT_OK(scheduler_->AppendLog(job.run.id, job.attempt, lines));
  LogCursor cursor(*scheduler_, job.run.id, 0);
  CART_ASSERT_OK_AND_ASSIGN(std::vector<store::LogLine> page, cursor.Next(/*limit=*/2));
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[1].text, "line 2");
  CART_ASSERT_OK_AND_ASSIGN(page, cursor.Next(2));
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].text, "line 3");
  CART_ASSERT_OK_AND_ASSIGN(page, cursor.Next(2));
  EXPECT_TRUE(page.empty());
}

// Device-hour budgets (server/budgets.h): a run whose work would overrun its sweep's budget waits
// and says why; only an admin raises a budget, never below what is spent, and the run then starts.
TEST_F(SchedulerTest, ARunThatWouldOverrunItsSweepsBudgetWaitsUntilAnAdminRaisesIt) {
  RegisterAtSpeed("w1", 1.0);
  RegisterAtSpeed("w2", 1.0);
  // Two runs of equal work W; a budget of 1.5 W holds one, not the second while the first runs.
  constexpr char kBase[] =
      "base: {d: 256, vocab: 1000, P: 1, R: 2, seq_len: 256, batch: 8, steps: 100000}\n";
  const SubmitResult probe = Submit(StrCat("name: probe\n", kBase));
  const double work = probe.runs[0].work_hours;
  ASSERT_GT(work * 3.6e9, 1e6);  // over a second: the figures below are far above rounding
  const SubmitResult capped = Submit(StrCat("name: capped\n", kBase, "seeds: [1, 2]\n",
                                            "budget_device_hours: ", 1.5 * work, "\n"));
  ASSERT_EQ(capped.runs.size(), 2u);
  CART_ASSERT_OK(scheduler_->CancelSweep("probe", "user:test", "").status());

  const Job first = Start("w1");
  EXPECT_EQ(first.run.sweep_id, capped.sweep.id);
  EXPECT_FALSE(AcquireNow("w2").has_value());  // the first holds W of the 1.5 W
  const int64_t second = first.run.id == capped.runs[0].id ? capped.runs[1].id : capped.runs[0].id;
  auto waiting = [&] {
    absl::StatusOr<RunDetails> run = scheduler_->GetRun(second);
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? run->info.waiting_reason : "";
  };
  EXPECT_THAT(waiting(), AllOf(HasSubstr("waits for budget: sweep 'capped'"),
                               HasSubstr("held by running runs"), HasSubstr("on worker w2"),
                               HasSubstr("cart budget set --sweep capped")));

  // What the views show: spent grows with the clock, held is the first run's rest.
  clock_.Advance(absl::Seconds(work * 3600 * 0.5));
  absl::StatusOr<std::vector<BudgetLine>> lines = scheduler_->Budgets("user:test");
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_EQ((*lines)[0].scope, "sweep");
  EXPECT_NEAR((*lines)[0].account.spent, 0.5 * work, 1e-3 * work);
  EXPECT_NEAR((*lines)[0].account.held, 0.5 * work, 1e-3 * work);
  EXPECT_NEAR((*lines)[0].account.Left(), 0.5 * work, 1e-3 * work);

  EXPECT_THAT(scheduler_->SetBudget("sweep", "capped", 10 * work, "user:test"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("needs an admin token")));
  EXPECT_THAT(scheduler_->SetBudget("sweep", "capped", 0.25 * work, "admin:root"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("sweep 'capped' has already spent"),
                             HasSubstr("would be below it"))));
  EXPECT_THAT(scheduler_->SetBudget("sweep", "capped", -1, "admin:root"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("> 0")));
  absl::StatusOr<BudgetLine> raised =
      scheduler_->SetBudget("sweep", "capped", 10 * work, "admin:root");
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_NEAR(raised->account.limit, 10 * work, 1e-9);
  std::optional<Job> next = AcquireNow("w2");
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->run.id, second);
}

// A user's budget from cartd's config holds every one of their sweeps; an admin's setting
// overrides it.
TEST_F(SchedulerTest, AUsersBudgetFromTheConfigHoldsTheirRunsUntilAnAdminRaisesIt) {
  const SubmitResult probe = Submit(OneRunSweep("probe"));
  const double work = probe.runs[0].work_hours;
  CART_ASSERT_OK(scheduler_->CancelSweep("probe", "user:test", "").status());
  SchedulerOptions options;
  options.lease_ttl = kTtl;
  options.expiry_interval = absl::ZeroDuration();
  options.raise_micro_batch = false;
  options.user_budgets["test"] = 0.5 * work;
  scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, options);
  clock_.Advance(absl::Seconds(1));  // the new scheduler's request ids start over: not the same
  RegisterAtSpeed("w1", 1.0);
  const SubmitResult sweep = Submit(OneRunSweep("mine"));
  ASSERT_EQ(sweep.runs.size(), 1u);
  EXPECT_FALSE(AcquireNow("w1").has_value());
  absl::StatusOr<RunDetails> run = scheduler_->GetRun(sweep.runs[0].id);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_THAT(run->info.waiting_reason,
              AllOf(HasSubstr("user 'test'"), HasSubstr("cart budget set --user test")));
  absl::StatusOr<std::vector<BudgetLine>> lines = scheduler_->Budgets("user:test");
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_EQ((*lines)[0].account.source, "cartd config");
  absl::StatusOr<std::vector<BudgetLine>> others = scheduler_->Budgets("user:other");
  ASSERT_TRUE(others.ok()) << others.status();
  EXPECT_TRUE(others->empty());  // not theirs to see
  absl::StatusOr<BudgetLine> raised = scheduler_->SetBudget("user", "test", 2 * work, "admin:root");
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->account.source, "admin root");
  EXPECT_TRUE(AcquireNow("w1").has_value());
}

}  // namespace
}  // namespace cart::server
