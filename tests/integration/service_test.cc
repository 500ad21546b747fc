// End to end on real processes: cartd and cart-worker binaries on loopback, tiny CPU models.

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/strings.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "tests/integration/cluster.h"
#include "train/trainer.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ServiceTest, SweepOfTwoByTwoByTwoSeedsCompletesOnTwoWorkersAndShowsTheRhoTable) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string file =
      c.WriteFile("grid.yaml", StrCat("name: grid\nbase:\n", RunBase(data, 20, 0),
                                      "grid:\n  d: [64, 128]\n  R: [1, 2]\nseeds: [1, 2]\n"));
  EXPECT_THAT(c.Cart({"sweep", "submit", file}), HasSubstr("submitted sweep grid with 8 runs"));
  c.StartWorker("a");
  c.StartWorker("b");
  const bool done = c.WaitFor(
      [&] {
        int ok = 0;
        for (const auto& r : c.Runs("grid")) ok += r.state() == cart::v1::RUN_STATE_SUCCEEDED;
        return ok == 8;
      },
      std::chrono::seconds(300));
  ASSERT_TRUE(done) << c.Cart({"sweep", "show", "grid"}) << c.Log("worker-a.log");
  // Both workers trained.
  std::set<std::string> workers;
  for (const auto& r : c.Runs("grid")) workers.insert(r.worker_id());
  EXPECT_EQ(workers.size(), 2u);
  const std::string table = c.Cart({"results", "pivot", "--metric", "rho_max", "--rows", "d",
                                    "--cols", "R", "--sweep", "grid", "--format", "csv"});
  // Header plus one row per d, each cell a mean over the two seeds.
  EXPECT_THAT(table, HasSubstr("64"));
  EXPECT_THAT(table, HasSubstr("128"));
  std::vector<std::string> lines = Split(table, '\n');
  ASSERT_GE(lines.size(), 3u) << table;
  for (int i = 1; i <= 2; ++i) {
    std::vector<std::string> cells = Split(lines[i], ',');
    ASSERT_EQ(cells.size(), 3u) << lines[i];
    for (int j = 1; j <= 2; ++j) {
      std::optional<double> rho = ParseDouble(cells[j]);
      ASSERT_TRUE(rho.has_value()) << lines[i];
      EXPECT_GT(*rho, 0.5);  // σ(a) started at 0.9 and moved only a little in 20 steps
      EXPECT_LT(*rho, 1.0);
    }
  }
  // Deleting the finished sweep: asked first (and refused without a terminal or --yes), then its
  // runs, metrics and checkpoint files are gone from cartd.
  int code = 0;
  const std::string asked = c.Cart({"sweep", "delete", "grid"}, /*allow_failure=*/true, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(asked, HasSubstr("not deleting without --yes (delete sweep grid with its 8 runs"));
  auto blobs = [&] {
    int n = 0;
    for (const auto& e :
         std::filesystem::recursive_directory_iterator(c.dir() + "/cartd/artifacts")) {
      n += e.is_regular_file() ? 1 : 0;
    }
    return n;
  };
  const int before = blobs();
  EXPECT_GT(before, 0);
  EXPECT_THAT(c.Cart({"sweep", "delete", "grid", "--yes"}),
              HasSubstr(StrCat("deleted sweep grid: 8 runs")));
  EXPECT_EQ(blobs(), 0);
  EXPECT_THAT(c.Cart({"sweep", "show", "grid"}, /*allow_failure=*/true), HasSubstr("grid"));
  EXPECT_TRUE(c.Runs("grid").empty());
}

// Placement with real processes: of two workers told their speeds (cart-worker --speed-factor),
// the faster one gets the longer run and the slower one the shorter, whichever asks first (first
// fit would give the older, shorter run to whoever asked first).
TEST(ServiceTest, TheFasterWorkerGetsTheLongerRun) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  c.StartWorker("fast", 0, {"--speed-factor", "1"});
  c.StartWorker("slow", 0, {"--speed-factor", "0.5"});
  ASSERT_TRUE(c.WaitFor(
      [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        ctx.AddMetadata("authorization", "Bearer " + c.user_token());
        cart::v1::ListWorkersResponse workers;
        c.stub().ListWorkers(&ctx, {}, &workers);
        return workers.workers_size() == 2;
      },
      std::chrono::seconds(60)));
  // Index 0 is the shorter run: the older one.
  const std::string file =
      c.WriteFile("speeds.yaml", StrCat("name: speeds\nbase:\n", RunBase(data, 20, 0),
                                        "grid:\n  steps: [20, 40]\nseeds: [1]\n"));
  c.Cart({"sweep", "submit", file});
  ASSERT_TRUE(c.WaitFor(
      [&] {
        int done = 0;
        for (const auto& r : c.Runs("speeds")) done += r.state() == cart::v1::RUN_STATE_SUCCEEDED;
        return done == 2;
      },
      std::chrono::seconds(180)))
      << c.Cart({"sweep", "show", "speeds"});
  for (const auto& r : c.Runs("speeds")) {
    EXPECT_EQ(r.worker_id(), Cluster::WorkerId(r.total_steps() == 40 ? "fast" : "slow"))
        << r.name() << " (" << r.total_steps() << " steps)";
  }
  EXPECT_THAT(c.Cart({"workers", "ls"}), HasSubstr("1.00x (reported)"));
}

// Preemption with real processes (cartd's lab setting): one worker trains a low-priority run; a
// higher-priority sweep arrives; the run stops at a checkpoint (DRAINED, no attempt counted), the
// same worker trains the new run, then resumes the preempted one, whose losses match the run
// trained straight through bit for bit.
TEST(ServiceTest, PreemptedRunStopsAtACheckpointAndResumesWithIdenticalLosses) {
  Cluster c;
  c.StartCartd("preemption: true\npreempt_interval: 1\n");
  const std::string data = c.SynthData();
  const std::string low_file = c.WriteFile(
      "low.yaml",
      StrCat("name: low\nbase:\n", RunBase(data, 400, 10), "seeds: [5]\npriority: 1\n"));
  c.Cart({"sweep", "submit", low_file});
  const int64_t low = RunId(c, "low", 0);
  c.StartWorker("a");
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(low).run().step() >= 12; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log");
  // While it trains, the sweep and the run show when they should finish (from the run's pace).
  const std::string shown = c.Cart({"sweep", "show", "low"});
  EXPECT_THAT(shown, HasSubstr("expected finish: "));
  EXPECT_THAT(shown, HasSubstr("(1 of 1 unfinished runs estimated)"));
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(low)}), HasSubstr("expected finish: "));
  const std::string high_file = c.WriteFile(
      "high.yaml",
      StrCat("name: high\nbase:\n", RunBase(data, 20, 10), "seeds: [6]\npriority: 5\n"));
  c.Cart({"sweep", "submit", high_file});
  const int64_t high = RunId(c, "high", 0);
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, high) == "SUCCEEDED"; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log") << c.Log("cartd.log");
  EXPECT_NE(StateOf(c, low), "SUCCEEDED") << "the low run finished before the high one";
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, low) == "SUCCEEDED"; }, std::chrono::seconds(180)))
      << c.Log("worker-a.log");
  cart::v1::GetRunResponse resp = c.GetRun(low);
  EXPECT_EQ(resp.run().attempt(), 2);
  EXPECT_THAT(c.Log("worker-a.log"), HasSubstr("DRAINED (preempted at a checkpoint"));
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(low)}), HasSubstr("preempted: run "));
  EXPECT_THAT(c.Cart({"runs", "logs", StrCat(low)}), HasSubstr("attempt 2  resuming from step"));
  // The CPU worker measured its fp32 matmul peak at start; each run logs its MFU against it.
  EXPECT_THAT(c.Log("worker-a.log"), HasSubstr("CPU fp32 matmul peak"));
  // By both counts (docs/gpu.md "Two MFUs"), the table saying what each counts.
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(low)}), HasSubstr(" mfu="));
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(low)}), HasSubstr(" mfu_6n="));
  const std::string sweep_table = c.Cart({"sweep", "show", "low"});
  EXPECT_THAT(sweep_table, HasSubstr("mfu 6N"));
  EXPECT_THAT(sweep_table, HasSubstr("mfu 6N: 6 x effective parameters per token"));
  const std::map<int64_t, double> want =
      StraightLosses(resp.run().config_yaml(), c.dir() + "/straight");
  std::map<int64_t, double> got = c.Series(low, "loss");
  ASSERT_EQ(got.size(), 400u);
  ASSERT_EQ(want.size(), 400u);
  for (const auto& [step, loss] : want) EXPECT_EQ(got[step], loss) << "step " << step;
}

// The kill tests run with each artifact store: cartd's own (every checkpoint byte through cartd)
// and a shared filesystem that both workers write to and read from (docs/design.md "Storage").
class KillTest : public ::testing::TestWithParam<std::string> {
 protected:
  bool shared() const { return GetParam() == "shared_fs"; }
  std::string share(const Cluster& c) const { return c.dir() + "/lab-share"; }
  // cartd's config for the store under test.
  std::string StoreConfig(const Cluster& c) const {
    return shared() ? StrCat("artifact_store: {kind: shared_fs, path: ", share(c), "}\n") : "";
  }
  // Every checkpoint cartd recorded for `run` is a blob where the store keeps them; with a shared
  // store the workers wrote them there themselves (nothing went through cartd's own directory)
  // and said so in the run's log.
  void ExpectCheckpointsWhereConfigured(Cluster& c, int64_t run) {
    const cart::v1::GetRunResponse resp = c.GetRun(run);
    ASSERT_FALSE(resp.checkpoints().empty());
    const std::string root = shared() ? share(c) : c.dir() + "/cartd/artifacts";
    for (const auto& ckpt : resp.checkpoints()) {
      const std::string blob = StrCat(root, "/", ckpt.sha256().substr(0, 2), "/", ckpt.sha256());
      EXPECT_TRUE(std::filesystem::exists(blob)) << blob;
      EXPECT_EQ(std::filesystem::file_size(blob), static_cast<uintmax_t>(ckpt.size_bytes()));
    }
    const std::string log = c.Cart({"runs", "logs", StrCat(run)});
    if (shared()) {
      EXPECT_FALSE(std::filesystem::exists(c.dir() + "/cartd/artifacts"));
      EXPECT_THAT(log, HasSubstr("checkpoints are written to and read from the shared store at " +
                                 share(c)));
      EXPECT_THAT(log, Not(HasSubstr("uploading it to cartd")));
      EXPECT_THAT(log, Not(HasSubstr("downloading it from cartd")));
    } else {
      EXPECT_THAT(log, Not(HasSubstr("shared store")));
    }
  }
};

INSTANTIATE_TEST_SUITE_P(Stores, KillTest, ::testing::Values("cartd", "shared_fs"),
                         [](const auto& info) { return info.param; });

TEST_P(KillTest, KilledWorkersRunResumesElsewhereFromItsCheckpointWithIdenticalLosses) {
  Cluster c(/*lease_ttl_s=*/2);
  c.StartCartd(StoreConfig(c));
  const std::string data = c.SynthData();
  const std::string file =
      c.WriteFile("one.yaml", StrCat("name: one\nbase:\n", RunBase(data, 60, 10), "seeds: [7]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "one", 0);
  pid_t a = c.StartWorker("a");
  ASSERT_TRUE(c.WaitForStepAndCheckpoint(run, 25)) << c.Log("worker-a.log");
  c.Signal(a, SIGKILL);
  c.Wait(a);
  c.StartWorker("b");
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(180)))
      << c.Log("worker-b.log") << c.Log("cartd.log");
  cart::v1::GetRunResponse resp = c.GetRun(run);
  EXPECT_EQ(resp.run().attempt(), 2);
  EXPECT_EQ(resp.run().worker_id(), Cluster::WorkerId("b"));
  EXPECT_THAT(c.Log("worker-b.log"), HasSubstr("from step"));
  // The run's log, kept by cartd, says the same: attempt 2 resumed from the checkpoint.
  EXPECT_THAT(c.Cart({"runs", "logs", StrCat(run)}), HasSubstr("attempt 2  resuming from step"));
  EXPECT_THAT(c.Cart({"runs", "logs", StrCat(run), "--tail", "1", "--json"}),
              HasSubstr("\"attempt\":2"));
  EXPECT_THAT(c.Cart({"runs", "logs", StrCat(run), "--metrics"}), HasSubstr("loss="));

  // The same run trained straight through in this process.
  const std::map<int64_t, double> want =
      StraightLosses(resp.run().config_yaml(), c.dir() + "/straight");
  std::map<int64_t, double> got = c.Series(run, "loss");
  ASSERT_EQ(got.size(), 60u);
  ASSERT_EQ(want.size(), 60u);
  for (const auto& [step, loss] : want) EXPECT_EQ(got[step], loss) << "step " << step;
  ExpectCheckpointsWhereConfigured(c, run);
}

TEST(ServiceTest, CancelStopsWithACheckpointAndResumeFinishesTheRun) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string file =
      c.WriteFile("c.yaml", StrCat("name: c\nbase:\n", RunBase(data, 400, 50), "seeds: [1]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "c", 0);
  c.StartWorker("a");
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(run).run().step() >= 5; }, std::chrono::seconds(120)));
  EXPECT_THAT(c.Cart({"runs", "cancel", StrCat(run)}), HasSubstr(StrCat("run ", run)));
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "CANCELLED"; }, std::chrono::seconds(60)))
      << c.Log("worker-a.log");
  cart::v1::GetRunResponse cancelled = c.GetRun(run);
  ASSERT_FALSE(cancelled.checkpoints().empty());
  const int64_t stopped_at = cancelled.checkpoints().rbegin()->step();
  EXPECT_LT(stopped_at, 400);
  EXPECT_GE(stopped_at, 5);
  c.Cart({"runs", "resume", StrCat(run)});
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(240)))
      << c.Log("worker-a.log");
  EXPECT_THAT(c.Log("worker-a.log"), HasSubstr(StrCat("from step ", stopped_at)));
  EXPECT_EQ(c.Series(run, "loss").size(), 400u);
}

// Tags and notes through the CLI: whoever removes a tag or replaces a note, `cart runs show`
// and `cart sweep show` keep who changed what and what it replaced.
TEST(ServiceTest, RunsShowAndSweepShowKeepWhoChangedTagsAndNotes) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  c.Cart({"sweep", "submit",
          c.WriteFile("t.yaml", StrCat("name: t\nbase:\n", RunBase(data, 10), "seeds: [1]\n"))});
  c.Cart({"runs", "tag", "t/0", "leak", "keep"});
  c.Cart({"runs", "note", "t/0", "overlaps the validation set"});
  c.Cart({"runs", "untag", "t/0", "leak"});
  c.Cart({"runs", "note", "t/0", "not a leak after all\nsee the data check"});
  c.Cart({"sweep", "note", "t", "stage one"});
  const std::string shown = c.Cart({"runs", "show", StrCat(RunId(c, "t", 0))});
  EXPECT_THAT(shown, HasSubstr("tags and note, changed:"));
  EXPECT_THAT(shown, HasSubstr("user:tester  tag added: leak"));
  EXPECT_THAT(shown, HasSubstr("user:tester  tag removed: leak (set by user:tester)"));
  EXPECT_THAT(shown,
              HasSubstr(R"(note "not a leak after all…" (was "overlaps the validation set"))"));
  EXPECT_THAT(c.Cart({"sweep", "show", "t"}), HasSubstr(R"(note "stage one" (was (none)))"));
}

TEST(ServiceTest, ExportWritesARunsCheckpointAsSafetensorsFromCartdOrFromItsDirectory) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  c.Cart({"sweep", "submit",
          c.WriteFile("exp.yaml", StrCat("name: exp\nbase:\n", RunBase(data, 30, 10),
                                         "  keep_checkpoints: 5\nseeds: [4]\n"))});
  const int64_t run = RunId(c, "exp", 0);
  c.StartWorker("a");
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log");

  // From cartd, by id (newest checkpoint) and by name at an earlier step.
  const std::string remote = c.dir() + "/remote.safetensors";
  EXPECT_THAT(c.Cart({"export", StrCat(run), "--out", remote}), HasSubstr("at step 30"));
  const std::string early = c.dir() + "/early.safetensors";
  EXPECT_THAT(c.Cart({"export", "exp/0", "--step", "10", "--out", early}), HasSubstr("at step 10"));
  // From the run directory the worker trained in: the same weights as cartd's copy.
  const std::string local = c.dir() + "/local.safetensors";
  EXPECT_THAT(c.Cart({"export", StrCat(c.dir(), "/worker-a/runs/", run, "-a1"), "--out", local}),
              HasSubstr("at step 30"));

  CART_ASSERT_OK_AND_ASSIGN(model::SafetensorsFile a, model::ReadSafetensors(remote));
  CART_ASSERT_OK_AND_ASSIGN(model::SafetensorsFile b, model::ReadSafetensors(local));
  CART_ASSERT_OK_AND_ASSIGN(model::SafetensorsFile e, model::ReadSafetensors(early));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  ASSERT_TRUE(a.tensors.count("embed.weight") && a.tensors.count("lti.a"));
  bool early_differs = false;
  for (const auto& [name, t] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, b.tensors.at(name))) << name;
    early_differs |= !torch::equal(t, e.tensors.at(name));
  }
  EXPECT_TRUE(early_differs) << "step 10 and step 30 exported the same weights";
  EXPECT_EQ(a.metadata.at("cart_step"), "30");
  EXPECT_EQ(a.metadata.at("cart_run"), "exp/0");
  EXPECT_EQ(a.metadata.at("cart_checkpoint_sha256").size(), 64u);
  EXPECT_EQ(e.metadata.at("cart_step"), "10");
  // The file is what `cart model logits` reads.
  EXPECT_THAT(c.Cart({"model", "logits", remote, "--ids", "1,2,3"}), HasSubstr("logits"));

  // A step without a checkpoint is refused (exit 2) and nothing is written.
  int code = 0;
  c.Cart({"export", StrCat(run), "--step", "7", "--out", c.dir() + "/none.safetensors"},
         /*allow_failure=*/true, &code);
  EXPECT_EQ(code, 2);
  EXPECT_FALSE(std::filesystem::exists(c.dir() + "/none.safetensors"));
  for (const auto& entry : std::filesystem::directory_iterator(c.dir())) {
    EXPECT_EQ(entry.path().filename().string().rfind("none.safetensors", 0), std::string::npos)
        << "left behind: " << entry.path();
  }
}

TEST(ServiceTest, DerivedEvaluationWaitsForItsParentThenRuns) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string file = c.WriteFile(
      "d.yaml", StrCat("name: d\nbase:\n", RunBase(data, 15, 5), "seeds: [1]\n",
                       "derived:\n  - name: varR\n    from: {run: 0, checkpoint: final}\n"
                       "    eval_loops: [1, 2, 4]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t parent = RunId(c, "d", 0);
  const int64_t eval = RunId(c, "d", 1);
  EXPECT_EQ(StateOf(c, eval), "BLOCKED");
  c.StartWorker("a");
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, eval) == "SUCCEEDED"; }, std::chrono::seconds(180)))
      << c.Log("worker-a.log") << c.Log("cartd.log");
  EXPECT_EQ(StateOf(c, parent), "SUCCEEDED");
  std::map<int64_t, double> ppl = c.Series(eval, "val_ppl/synth");
  ASSERT_EQ(ppl.size(), 3u);  // one point per R_infer
  for (const auto& [r, v] : ppl) {
    EXPECT_GT(v, 1.0) << "R_infer " << r;
    EXPECT_LT(v, 32.0) << "R_infer " << r;
  }
}

TEST(ServiceTest, RunTooBigForEveryWorkerStaysQueuedAndSaysWhy) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  // The grid overrides the base's width, length and batch (a key given twice is refused).
  const std::string file =
      c.WriteFile("big.yaml", StrCat("name: big\nbase:\n", RunBase(data, 5, 0),
                                     "grid: {d: [1024], seq_len: [2048], batch: [64]}\n"
                                     "seeds: [1]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "big", 0);
  c.StartWorker("small", /*memory_mib=*/512);
  // The claim is about a registered worker that is too small, so wait for it to register.
  ASSERT_TRUE(c.WaitFor(
      [&] {
        return c.Cart({"workers", "ls"}).find("small") != std::string::npos;
      },
      std::chrono::seconds(30)));
  cart::v1::GetRunResponse r = c.GetRun(run);
  EXPECT_EQ(StateOf(c, run), "QUEUED");
  EXPECT_THAT(r.run().waiting_reason(), HasSubstr("memory"));
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(run)}), HasSubstr("waiting:"));
}

TEST(ServiceTest, WorkerPausedPastItsLeaseIsFencedOut) {
  Cluster c(/*lease_ttl_s=*/2);
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string file =
      c.WriteFile("f.yaml", StrCat("name: f\nbase:\n", RunBase(data, 300, 20), "seeds: [1]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "f", 0);
  pid_t a = c.StartWorker("a");
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(run).run().step() >= 3; }, std::chrono::seconds(120)));
  c.Signal(a, SIGSTOP);
  // The lease lapses; the run is requeued with attempt 2 and taken by b.
  c.StartWorker("b");
  ASSERT_TRUE(c.WaitFor(
      [&] {
        return c.GetRun(run).run().attempt() >= 2 &&
               c.GetRun(run).run().worker_id() == Cluster::WorkerId("b");
      },
      std::chrono::seconds(60)))
      << c.Log("cartd.log");
  c.Signal(a, SIGCONT);
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(240)))
      << c.Log("worker-b.log");
  EXPECT_THAT(c.Log("worker-a.log"), HasSubstr("FENCED"));
  EXPECT_EQ(c.Series(run, "loss").size(), 300u);
}

TEST_P(KillTest, CartdKilledWhileWorkersStreamRestartsAndLosesNothing) {
  Cluster c(/*lease_ttl_s=*/5);
  c.StartCartd(StoreConfig(c));
  const std::string data = c.SynthData();
  const std::string file = c.WriteFile("k.yaml", StrCat("name: k\nbase:\n", RunBase(data, 150, 25),
                                                        "grid:\n  R: [1, 2]\nseeds: [1]\n"));
  c.Cart({"sweep", "submit", file});
  c.StartWorker("a");
  c.StartWorker("b");
  ASSERT_TRUE(c.WaitFor(
      [&] {
        for (const auto& r : c.Runs("k")) {
          if (r.step() < 20) return false;
        }
        return true;
      },
      std::chrono::seconds(120)));
  c.KillCartd(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  c.StartCartd(StoreConfig(c));
  ASSERT_TRUE(c.WaitFor(
      [&] {
        for (const auto& r : c.Runs("k")) {
          if (r.state() != cart::v1::RUN_STATE_SUCCEEDED) return false;
        }
        return true;
      },
      std::chrono::seconds(300)))
      << c.Log("cartd.log") << c.Log("worker-a.log") << c.Log("worker-b.log")
      << c.Cart({"runs", "show", "k/0"}, true) << c.Cart({"runs", "show", "k/1"}, true)
      << c.Cart({"workers", "ls"}, true);
  for (const auto& r : c.Runs("k")) {
    std::map<int64_t, double> loss = c.Series(r.run_id(), "loss");  // duplicates fail inside
    EXPECT_EQ(loss.size(), 150u) << r.name();
    ExpectCheckpointsWhereConfigured(c, r.run_id());
  }
}

}  // namespace
}  // namespace cart::testing
