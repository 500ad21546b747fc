// A worker's own disk filling up, on real processes (docs/design.md "A worker's disk fills"):
// cart-worker trains with its cache directory on a small tmpfs of its own, the test fills that
// disk mid-run and empties it again. The worker must survive it, hand the run back without
// charging an attempt, take nothing while below its floor (and say so), and carry on by itself
// when there is room again, the run ending as if nothing had happened.

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
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

}  // namespace
}  // namespace cart::testing
