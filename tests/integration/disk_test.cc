// Disks filling up, on real processes (docs/design.md "A worker's disk fills", "cartd's disk
// fills"): cart-worker, or cartd, runs with its directory on a small tmpfs of its own, and the
// test fills that disk mid-run and empties it again. Neither process may die; a worker hands its
// run back without charging an attempt and takes nothing while below its floor; cartd answers
// reads, refuses new changes naming its disk, keeps every result it acknowledged; both say so
// and carry on by themselves when there is room again, the run ending as if nothing happened.

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

// Writes `path` until its filesystem has no room; the bytes written.
int64_t FillDisk(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return -1;
  std::setvbuf(f, nullptr, _IONBF, 0);
  const std::vector<char> block(1 << 16, 'x');
  int64_t written = 0;
  while (true) {
    const size_t n = std::fwrite(block.data(), 1, block.size(), f);
    written += static_cast<int64_t>(n);
    if (n < block.size()) break;
  }
  std::fclose(f);
  return written;
}

bool Alive(pid_t pid) { return waitpid(pid, nullptr, WNOHANG) == 0 && kill(pid, 0) == 0; }

TEST(WorkerDiskTest, AFullDiskHandsTheRunBackUncountedAndTheWorkerCarriesOnWhenThereIsRoom) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  // One attempt only: a failure charged to the run would end it FAILED.
  c.Cart({"sweep", "submit",
          c.WriteFile("d.yaml", StrCat("name: d\nbase:\n", RunBase(data, 1500, 10),
                                       "seeds: [2]\nmax_attempts: 1\n"))});
  const int64_t run = RunId(c, "d", 0);
  std::string why;
  const pid_t worker = c.StartWorkerOnSmallDisk("a", 128, {"--min-free-disk-mib", "4"}, &why);
  if (worker < 0) GTEST_SKIP() << why;

  // Mid-run (a checkpoint stored), the worker's disk fills up.
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(run).checkpoints_size() > 0; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log");
  const std::string filler = StrCat("/proc/", worker, "/root", c.CacheDir("a"), "/filler");
  ASSERT_GT(FillDisk(filler), 0) << filler << ": " << std::strerror(errno);

  // The run is handed back, not charged; the worker lives on and says why it takes nothing.
  ASSERT_TRUE(
      c.WaitFor([&] { return c.Log("worker-a.log").find("disk full: ") != std::string::npos; },
                std::chrono::seconds(60)))
      << c.Log("worker-a.log");
  EXPECT_TRUE(Alive(worker)) << c.Log("worker-a.log");
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "QUEUED"; }, std::chrono::seconds(30)))
      << StateOf(c, run) << c.Log("worker-a.log");
  const std::string shown = c.Cart({"runs", "show", StrCat(run)});
  EXPECT_THAT(shown, HasSubstr("DRAINED"));
  EXPECT_THAT(shown, HasSubstr("this worker's disk is full"));
  EXPECT_THAT(shown, HasSubstr("handed back without counting an attempt"));
  ASSERT_TRUE(c.WaitFor(
      [&] {
        return c.Cart({"workers", "ls"}).find("disk_full") != std::string::npos;
      },
      std::chrono::seconds(30)));
  // Its floor is raised past what it had when the run ran out of room (4 MiB + 64 MiB at least).
  EXPECT_THAT(c.Cart({"workers", "ls"}),
              ::testing::ContainsRegex("testbox-a: disk full, [0-9]+ MiB free in its cache "
                                       "directory, below its floor of [0-9]+ MiB"));
  EXPECT_THAT(c.Log("worker-a.log"), HasSubstr("raised after a run ran out of room"));
  // Below its floor it is handed nothing: the run waits.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(StateOf(c, run), "QUEUED");
  EXPECT_TRUE(Alive(worker));

  // Room again: the worker takes the run back by itself and finishes it, the losses those of a
  // run never interrupted.
  ASSERT_TRUE(std::filesystem::remove(filler));
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(240)))
      << StateOf(c, run) << c.Log("worker-a.log");
  EXPECT_THAT(c.Log("worker-a.log"), HasSubstr("disk has room again"));
  EXPECT_THAT(c.Cart({"workers", "ls"}), ::testing::Not(HasSubstr("disk_full")));
  ExpectStraightLosses(c, run, 1500);
}

TEST(CartdDiskTest, AFullDiskRefusesChangesLosesNothingAcknowledgedAndRecoversByItself) {
  Cluster c;
  std::string why;
  // The database and the artifacts on a 64 MiB disk of cartd's own; a floor of 4 MiB.
  if (!c.StartCartdOnSmallDisk(64, "min_free_store_bytes: 4194304\nmin_free_artifact_bytes: 0\n",
                               &why)) {
    GTEST_SKIP() << why;
  }
  const std::string data = c.SynthData();
  c.Cart({"sweep", "submit",
          c.WriteFile("f.yaml", StrCat("name: f\nbase:\n", RunBase(data, 3000, 50),
                                       "seeds: [3]\nmax_attempts: 1\n"))});
  const int64_t run = RunId(c, "f", 0);
  c.StartWorker("a");
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(run).checkpoints_size() > 0; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log") << c.Log("cartd.log");
  EXPECT_THAT(c.Http("/healthz"), HasSubstr(R"("full":false)"));

  // Mid-run, cartd's disk fills up.
  const std::string filler = StrCat("/proc/", c.cartd_pid(), "/root", c.dir(), "/cartd/filler");
  ASSERT_GT(FillDisk(filler), 0) << filler << ": " << std::strerror(errno);
  ASSERT_TRUE(
      c.WaitFor([&] { return c.Http("/healthz").find(R"("full":true)") != std::string::npos; },
                std::chrono::seconds(30)))
      << c.Log("cartd.log");
  EXPECT_THAT(c.Http("/metrics"), HasSubstr("cart_store_disk_full 1"));
  // Reads are answered; a new change is refused naming the disk.
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(run)}), HasSubstr("f/0"));
  int code = 0;
  const std::string refused = c.Cart(
      {"sweep", "submit",
       c.WriteFile("g.yaml", StrCat("name: g\nbase:\n", RunBase(data, 5, 5), "seeds: [1]\n"))},
      /*allow_failure=*/true, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(refused, HasSubstr("submitting a sweep waits: cartd's disk is full"));
  // Longer than a lease TTL (3 s): said once per change of state, not once a second (SQLite
  // may free a little room as it trims its log, which is a change), and no lease is taken back.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const std::string log = c.Log("cartd.log");
  auto count = [&](const std::string& line) {
    size_t n = 0;
    for (size_t at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++n;
    return n;
  };
  const size_t full = count("cartd: disk full: ");
  EXPECT_GE(full, 1u);
  EXPECT_LE(full, 3u) << log;
  EXPECT_EQ(count("cartd: disk has room again"), full - 1) << log;
  EXPECT_THAT(log, ::testing::Not(HasSubstr("lease expiry failed")));

  // Room again: cartd carries on by itself; the run ends with every step's loss, those of a run
  // never interrupted, on its first attempt.
  ASSERT_TRUE(std::filesystem::remove(filler));
  ASSERT_TRUE(
      c.WaitFor([&] { return c.Http("/healthz").find(R"("full":false)") != std::string::npos; },
                std::chrono::seconds(30)))
      << c.Log("cartd.log");
  EXPECT_THAT(c.Log("cartd.log"), HasSubstr("cartd: disk has room again"));
  EXPECT_THAT(c.Http("/metrics"), HasSubstr("cart_store_disk_full 0"));
  c.Cart({"sweep", "submit",
          c.WriteFile("g.yaml", StrCat("name: g\nbase:\n", RunBase(data, 5, 5), "seeds: [1]\n"))});
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(300)))
      << StateOf(c, run) << c.Log("worker-a.log") << c.Log("cartd.log");
  EXPECT_EQ(c.GetRun(run).run().attempt(), 1);
  ExpectStraightLosses(c, run, 3000);
}

}  // namespace
}  // namespace cart::testing
