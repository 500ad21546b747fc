// Multi-process and multi-thread behaviour of the store: a writer killed with SIGKILL mid-ingest,
// readers running beside the writer, online backup and the integrity check.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "common/strings.h"
#include "store/run_store.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::store {
namespace {

using ::cart::store::testing::By;
using ::cart::store::testing::kGiB;
using ::cart::store::testing::kT0;
using ::cart::store::testing::MakeRun;
using ::cart::store::testing::MakeSweep;
using ::cart::store::testing::OpenStore;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::cart::testing::WaitUntil;
using ::testing::HasSubstr;

const std::vector<std::string> kNames = {"grad_norm", "lr", "tokens_per_s", "train/loss"};
constexpr int64_t kStepsPerBatch = 250;  // x 4 names = 1,000 points per batch

// The value every writer stores for (step, name): checkable after the fact.
double ValueAt(int64_t step, size_t name_index) {
  return static_cast<double>(step) * 0.5 + static_cast<double>(name_index);
}

std::vector<MetricPoint> Batch(int64_t batch) {
  std::vector<MetricPoint> points;
  for (int64_t step = batch * kStepsPerBatch; step < (batch + 1) * kStepsPerBatch; ++step) {
    for (size_t n = 0; n < kNames.size(); ++n) {
      points.push_back({step, kNames[n], ValueAt(step, n), kT0 + step});
    }
  }
  return points;
}

// Creates a sweep with one run, leases it and starts it; returns {run id, attempt}.
std::pair<int64_t, int64_t> StartOneRun(RunStore& store) {
  auto created = store.CreateSweep(MakeSweep("s", {MakeRun("a", {})}), By("user:t", kT0));
  EXPECT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(store.RegisterWorker("w", "cpu", 8 * kGiB, kT0).ok());
  auto claim = store.ClaimNextRun("w", 8 * kGiB, kT0);
  EXPECT_TRUE(claim.ok() && claim->has_value());
  const Claim& c = **claim;
  EXPECT_TRUE(store.MarkRunning(c.run.id, c.attempt, kT0).ok());
  return {c.run.id, c.attempt};
}

// Checks that the run holds exactly batches 0..n-1, each complete with the right values, and
// returns n. Any partial batch, gap, wrong value or summary out of step fails the test.
int64_t VerifyCompleteBatches(RunStore& store, int64_t run_id) {
  int64_t batches = -1;
  for (size_t n = 0; n < kNames.size(); ++n) {
    auto series = store.MetricSeries({run_id, kNames[n], 0, std::nullopt, std::nullopt});
    if (absl::IsNotFound(series.status())) return 0;  // nothing committed yet
    EXPECT_TRUE(series.ok()) << series.status();
    if (!series.ok()) return -1;
    const int64_t count = series->total_points;
    EXPECT_EQ(count % kStepsPerBatch, 0) << kNames[n] << ": a batch was half-committed";
    if (batches == -1) batches = count / kStepsPerBatch;
    EXPECT_EQ(count / kStepsPerBatch, batches) << kNames[n] << " differs from the other names";
    for (int64_t i = 0; i < count; ++i) {
      const SeriesPoint& p = series->points[i];
      if (p.step != i || p.value != ValueAt(i, n)) {
        ADD_FAILURE() << kNames[n] << ": point " << i << " is step " << p.step << " value "
                      << p.value;
        return -1;
      }
    }
    if (count > 0) {
      EXPECT_TRUE(series->summary.has_value());
      if (series->summary) {
        EXPECT_EQ(series->summary->latest_step, count - 1);
      }
    }
  }
  return batches;
}

// The child: ingests batches start, start+1, ... with up to 8 appends in flight, and writes each
// batch number to `ack_fd` once its append has returned OK. Never returns; killed by the parent.
[[noreturn]] void IngestForever(const std::string& path, int64_t run_id, int64_t attempt,
                                int64_t start, int ack_fd) {
  StoreOptions options;
  options.path = path;
  auto store = RunStore::Open(options);
  if (!store.ok()) _exit(3);
  std::deque<std::pair<int64_t, std::future<absl::StatusOr<int64_t>>>> in_flight;
  for (int64_t b = start;; ++b) {
    in_flight.emplace_back(b, (*store)->AppendMetricsAsync(run_id, attempt, Batch(b)));
    while (in_flight.size() > 8 || (in_flight.front().second.wait_for(std::chrono::seconds(0)) ==
                                    std::future_status::ready)) {
      auto [batch, future] = std::move(in_flight.front());
      in_flight.pop_front();
      if (!future.get().ok()) _exit(4);
      if (write(ack_fd, &batch, sizeof(batch)) != sizeof(batch)) _exit(5);
      if (in_flight.empty()) break;
    }
  }
}

// A child process ingesting metric batches is killed with SIGKILL at random moments. After every
// kill the database passes integrity_check, every batch whose append returned is there complete,
// and no batch is there in part.
TEST(StoreCrashTest, SigkillDuringIngestLosesNoAcknowledgedBatchAndLeavesNoPartialOne) {
  TempDir dir;
  const std::string path = dir.File("cart.db");
  int64_t run_id = 0, attempt = 0;
  {
    auto store = OpenStore(path);
    ASSERT_NE(store, nullptr);
    std::tie(run_id, attempt) = StartOneRun(*store);
  }
  std::mt19937 rng(20240501);  // fixed seed: the kill moments are reproducible
  std::uniform_int_distribution<int> delay_ms(20, 400);
  int64_t next_batch = 0;
  int64_t total_acked = 0;
  constexpr int kKills = 12;
  for (int kill_no = 0; kill_no < kKills; ++kill_no) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      IngestForever(path, run_id, attempt, next_batch, fds[1]);
    }
    close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "the child ended on its own (status " << wstatus << ") instead of being killed";
    std::set<int64_t> acked;
    int64_t batch = 0;
    while (read(fds[0], &batch, sizeof(batch)) == sizeof(batch)) acked.insert(batch);
    close(fds[0]);
    total_acked += static_cast<int64_t>(acked.size());

    auto store = OpenStore(path);
    ASSERT_NE(store, nullptr);
    CART_ASSERT_OK_AND_ASSIGN(IntegrityReport report, store->IntegrityCheck());
    ASSERT_TRUE(report.ok) << StrJoin(report.problems, "; ");
    const int64_t present = VerifyCompleteBatches(*store, run_id);
    ASSERT_GE(present, next_batch) << "batches committed before this kill disappeared";
    if (!acked.empty()) {
      EXPECT_LT(*acked.rbegin(), present)
          << "batch " << *acked.rbegin() << " was acknowledged but is not in the database";
    }
    next_batch = present;
  }
  EXPECT_GT(total_acked, kKills) << "the children hardly wrote anything: the test proved little";
  std::cout << "[          ] " << kKills << " kills, " << total_acked << " batches acknowledged, "
            << next_batch << " batches (" << next_batch * kStepsPerBatch * 4 << " points) stored\n";
}

// Readers on their own connections see whole batches only, with summaries that match the points,
// while the writer keeps committing.
TEST(StoreConcurrencyTest, ReaderSeesConsistentSnapshotsWhileTheWriterRuns) {
  TempDir dir;
  auto store = OpenStore(dir.File("cart.db"));
  ASSERT_NE(store, nullptr);
  auto [run_id, attempt] = StartOneRun(*store);
  std::atomic<bool> done{false};
  std::atomic<int64_t> written{0};
  std::thread writer([&, run_id = run_id, attempt = attempt] {
    for (int64_t b = 0; b < 200; ++b) {
      if (!store->AppendMetrics(run_id, attempt, Batch(b)).ok()) break;
      written = b + 1;
    }
    done = true;
  });
  int64_t reads = 0;
  std::set<int64_t> sizes_seen;
  while (!done || reads == 0) {
    auto series = store->MetricSeries({run_id, "lr", 0, std::nullopt, std::nullopt});
    if (absl::IsNotFound(series.status())) continue;  // no metric name committed yet
    ASSERT_TRUE(series.ok()) << series.status();
    const int64_t n = series->total_points;
    ASSERT_EQ(n % kStepsPerBatch, 0) << "reader saw part of a batch";
    ASSERT_EQ(static_cast<int64_t>(series->points.size()), n);
    for (int64_t i = 0; i < n; i += 97) ASSERT_EQ(series->points[i].value, ValueAt(i, 1));
    if (n > 0) {
      ASSERT_TRUE(series->summary.has_value());
      ASSERT_EQ(series->summary->latest_step, n - 1) << "summary out of step with the points";
    }
    CART_ASSERT_OK_AND_ASSIGN(auto summaries, store->RunSummaries(run_id));
    for (const MetricSummary& s : summaries) {
      ASSERT_EQ(s.latest_step, summaries[0].latest_step) << s.name << " lags within a batch";
    }
    sizes_seen.insert(n);
    ++reads;
  }
  writer.join();
  EXPECT_EQ(written.load(), 200);
  EXPECT_GE(sizes_seen.size(), 3u) << "the reader never overlapped the writer";
  EXPECT_EQ(VerifyCompleteBatches(*store, run_id), 200);
}

TEST(StoreAdminTest, OnlineBackupIsAConsistentCopyTakenWhileWriting) {
  TempDir dir;
  auto store = OpenStore(dir.File("cart.db"));
  ASSERT_NE(store, nullptr);
  auto [run_id, attempt] = StartOneRun(*store);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> written{0};
  std::thread writer([&, run_id = run_id, attempt = attempt] {
    for (int64_t b = 0; !stop && b < 2000; ++b) {
      if (!store->AppendMetrics(run_id, attempt, Batch(b)).ok()) break;
      written = b + 1;
    }
  });
  // The backup starts while batches are being written, not before the first one.
  ASSERT_TRUE(WaitUntil([&] { return written.load() >= 10; }));
  const std::string copy = dir.File("backup.db");
  CART_ASSERT_OK(store->Backup(copy));
  stop = true;
  writer.join();
  EXPECT_THAT(store->Backup(copy),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("backup.db")));

  CART_ASSERT_OK_AND_ASSIGN(IntegrityReport report, CheckDatabase(copy));
  EXPECT_TRUE(report.ok) << StrJoin(report.problems, "; ");
  auto restored = OpenStore(copy);
  ASSERT_NE(restored, nullptr);
  const int64_t in_copy = VerifyCompleteBatches(*restored, run_id);
  EXPECT_GT(in_copy, 0);
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, restored->GetRun(run_id));
  EXPECT_EQ(run.state, RunState::kRunning);

  // The file-level backup of a closed database (what `cart admin backup` runs).
  store.reset();
  CART_ASSERT_OK(BackupDatabase(dir.File("cart.db"), dir.File("offline.db")));
  CART_ASSERT_OK_AND_ASSIGN(report, CheckDatabase(dir.File("offline.db")));
  EXPECT_TRUE(report.ok);
  EXPECT_THAT(BackupDatabase(dir.File("absent.db"), dir.File("x.db")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("absent.db")));
}

TEST(StoreAdminTest, IntegrityCheckReportsACorruptedFile) {
  TempDir dir;
  const std::string path = dir.File("cart.db");
  {
    auto store = OpenStore(path);
    ASSERT_NE(store, nullptr);
    auto [run_id, attempt] = StartOneRun(*store);
    for (int64_t b = 0; b < 20; ++b)
      CART_ASSERT_OK(store->AppendMetrics(run_id, attempt, Batch(b)));
    CART_ASSERT_OK_AND_ASSIGN(IntegrityReport clean, store->IntegrityCheck());
    EXPECT_TRUE(clean.ok) << StrJoin(clean.problems, "; ");
  }  // closing the last connection folds the WAL into the file
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 40u * 4096);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    std::mt19937 rng(7);
    for (uint64_t offset = 10 * 4096; offset < 30 * 4096; ++offset) {
      file.seekp(static_cast<std::streamoff>(offset));
      file.put(static_cast<char>(rng()));
    }
  }
  absl::StatusOr<IntegrityReport> report = CheckDatabase(path);
  if (report.ok()) {
    EXPECT_FALSE(report->ok) << "20 pages of garbage went unnoticed";
    EXPECT_FALSE(report->problems.empty());
  } else {
    EXPECT_EQ(report.status().code(), absl::StatusCode::kDataLoss) << report.status();
  }
}

}  // namespace
}  // namespace cart::store
