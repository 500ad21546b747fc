// Checkpoints on real processes (docs/design.md "Storage"): a cartd whose artifact disk is at its
// floor ends the attempt with its reason after a bounded wait, instead of holding a finishing
// worker for ever; periodic checkpoints it refuses are skipped while training goes on; the same
// with a shared-filesystem store, and a worker that cannot see that store uploads instead.

#include <filesystem>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// With each artifact store: cartd's own, and a shared filesystem the worker writes to itself.
class FloorTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Stores, FloorTest, ::testing::Values("cartd", "shared_fs"),
                         [](const auto& info) { return info.param; });

TEST_P(FloorTest, AStoreAtItsDiskFloorFailsTheAttemptWithItsReasonAfterABoundedWait) {
  Cluster c;
  const bool shared = GetParam() == "shared_fs";
  const std::string share = c.dir() + "/lab-share";
  // A floor no disk reaches: every checkpoint is refused for space.
  c.StartCartd(
      StrCat("min_free_artifact_bytes: 1000000000000000\n",
             shared ? StrCat("artifact_store: {kind: shared_fs, path: ", share, "}\n") : ""));
  const std::string data = c.SynthData();
  const std::string file = c.WriteFile(
      "f.yaml", StrCat("name: f\nbase:\n", RunBase(data, 20, 10), "seeds: [1]\nmax_attempts: 1\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "f", 0);
  c.StartWorker("a", 0, {"--space-wait-s", "2"});
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "FAILED"; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log") << c.Log("cartd.log");
  const std::string shown = c.Cart({"runs", "show", StrCat(run)});
  EXPECT_THAT(shown, HasSubstr("the final checkpoint at step 20 was not stored: cartd refused it "
                               "for space"));
  EXPECT_THAT(shown, HasSubstr("below the floor of 1000000000000000 bytes"));
  const std::string log = c.Cart({"runs", "logs", StrCat(run)});
  EXPECT_THAT(log, HasSubstr("checkpoint at step 10 not uploaded (cartd has no room for it)"));
  EXPECT_THAT(log, HasSubstr("waiting up to 2s for room before the attempt fails"));
  // Training went on past the refused checkpoint: every step was logged.
  EXPECT_EQ(c.Series(run, "loss").size(), 20u);
  EXPECT_TRUE(c.GetRun(run).checkpoints().empty());
  if (!shared) return;
  EXPECT_THAT(log, HasSubstr("written to and read from the shared store at " + share));
  EXPECT_THAT(log, Not(HasSubstr("uploading it to cartd")));  // no room is no room either way
  // Asked first, cartd refused before a byte was written: the shared store holds no blob.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(share)) {
    EXPECT_TRUE(!entry.is_regular_file() || entry.path().filename() == ".cart-store")
        << entry.path();
  }
}

// A box that mounts the shared filesystem elsewhere (cart-worker --shared-artifacts): at a path
// where the store is not ("empty"), or where a copy of its id is but not its files ("copy": the
// worker writes there, and cartd, not finding the blob, has it uploaded instead).
class ElsewhereTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Mounts, ElsewhereTest, ::testing::Values("empty", "copy"),
                         [](const auto& info) { return info.param; });

TEST_P(ElsewhereTest, AWorkerThatCannotSeeTheSharedStoreUploadsSayingSo) {
  Cluster c;
  const std::string share = c.dir() + "/lab-share";
  const std::string elsewhere = c.dir() + "/elsewhere";
  c.StartCartd(StrCat("artifact_store: {kind: shared_fs, path: ", share, "}\n"));
  const std::string data = c.SynthData();
  const std::string file =
      c.WriteFile("u.yaml", StrCat("name: u\nbase:\n", RunBase(data, 20, 10), "seeds: [1]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "u", 0);
  std::filesystem::create_directories(elsewhere);
  if (GetParam() == "copy") {
    std::filesystem::copy_file(share + "/.cart-store", elsewhere + "/.cart-store");
  }
  c.StartWorker("a", 0, {"--shared-artifacts", elsewhere, "--max-jobs", "1"});
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log") << c.Log("cartd.log");
  const std::string log = c.Cart({"runs", "logs", StrCat(run)});
  if (GetParam() == "empty") {
    EXPECT_THAT(log, HasSubstr("checkpoints go through cartd: the shared artifact store is not "
                               "visible at " +
                               elsewhere));
    EXPECT_TRUE(std::filesystem::is_empty(elsewhere));
  } else {
    EXPECT_THAT(log, HasSubstr("written to and read from the shared store at " + elsewhere));
    EXPECT_THAT(log, HasSubstr("not recorded from the shared store"));
    EXPECT_THAT(log, HasSubstr("is not in the shared store"));
    EXPECT_THAT(log, HasSubstr("uploading it to cartd, and this attempt's later checkpoints too"));
    // Once: the checkpoints after the first go straight to cartd.
    EXPECT_EQ(log.find("not recorded from the shared store"),
              log.rfind("not recorded from the shared store"));
  }
  // cartd stored the uploads in the shared store itself.
  const cart::v1::GetRunResponse resp = c.GetRun(run);
  ASSERT_FALSE(resp.checkpoints().empty());
  for (const auto& ckpt : resp.checkpoints()) {
    EXPECT_TRUE(std::filesystem::exists(
        StrCat(share, "/", ckpt.sha256().substr(0, 2), "/", ckpt.sha256())));
  }
}

}  // namespace
}  // namespace cart::testing
