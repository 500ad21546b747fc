// The background checkpoint uploader (worker/checkpoint_uploader.h) against a scripted upload
// function: what it uploads when checkpoints come faster than uploads, what it skips, and how a
// final checkpoint that cartd has no room for ends.

#include "worker/checkpoint_uploader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/strings.h"
#include "tests/support/test_support.h"

namespace cart::worker {
namespace {

namespace fs = std::filesystem;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

class UploaderTest : public ::testing::Test {
 protected:
  // A checkpoint file of the trainer's at `step`.
  CheckpointFile Checkpoint(int64_t step) {
    CheckpointFile m;
    m.step = step;
    m.cursor = step * 10;
    m.path = dir_.File(StrCat("step-", step, ".pt"));
    std::ofstream(m.path) << "weights of step " << step;
    m.bytes = static_cast<int64_t>(fs::file_size(m.path));
    return m;
  }

  UploaderOptions Options(std::function<absl::StatusOr<std::string>(const std::string&)> upload) {
    UploaderOptions o;
    o.upload = std::move(upload);
    o.announce = [this](const cart::v1::CheckpointNotice& n) {
      std::lock_guard<std::mutex> lock(mu_);
      announced_.push_back(n);
    };
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      logs_.push_back(line);
    };
    o.abandoned = [this] { return abandoned_.load(); };
    o.outbox_dir = dir_.File("outbox");
    o.first_backoff_ms = 10;
    o.max_backoff_ms = 40;
    return o;
  }

  std::vector<int64_t> AnnouncedSteps() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int64_t> steps;
    for (const auto& n : announced_) steps.push_back(n.checkpoint().step());
    return steps;
  }
  std::string Logs() {
    std::lock_guard<std::mutex> lock(mu_);
    return StrJoin(logs_, "\n");
  }

  TempDir dir_;
  std::mutex mu_;
  std::vector<cart::v1::CheckpointNotice> announced_;
  std::vector<std::string> logs_;
  std::atomic<bool> abandoned_{false};
};

// The content of the file as uploaded stands for its sha256.
absl::StatusOr<std::string> ReadBack(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) return absl::NotFoundError(StrCat(path, " is gone"));
  return text;
}

TEST_F(UploaderTest, ANewerCheckpointReplacesAWaitingOneButNeverTheFinalAndSubmitNeverWaits) {
  absl::Notification release;
  std::atomic<int> started{0};
  std::vector<std::string> uploaded;
  std::mutex umu;
  CheckpointUploader uploader(Options([&](const std::string& path) -> absl::StatusOr<std::string> {
    if (started++ == 0) release.WaitForNotification();  // the first upload is slow
    absl::StatusOr<std::string> text = ReadBack(path);
    std::lock_guard<std::mutex> lock(umu);
    if (text.ok()) uploaded.push_back(*text);
    return text;
  }));
  CART_ASSERT_OK(uploader.Submit(Checkpoint(10), false));
  ASSERT_TRUE(::cart::testing::WaitUntil([&] { return started.load() == 1; }, absl::Seconds(10)));
  // Three more while the first is in flight: each replaces the one waiting, and the trainer's
  // retention deleting its own files does not matter.
  for (int64_t step : {20, 30, 40}) {
    const CheckpointFile m = Checkpoint(step);
    CART_ASSERT_OK(uploader.Submit(m, false));
    fs::remove(m.path);
  }
  // The final one is submitted, then a stray periodic one: it does not replace the final.
  CART_ASSERT_OK(uploader.Submit(Checkpoint(50), true));
  CART_ASSERT_OK(uploader.Submit(Checkpoint(45), false));
  release.Notify();
  CART_ASSERT_OK(uploader.Drain());
  EXPECT_EQ(AnnouncedSteps(), (std::vector<int64_t>{10, 50}));
  EXPECT_EQ(uploaded, (std::vector<std::string>{"weights of step 10", "weights of step 50"}));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(announced_.back().final());
  EXPECT_EQ(announced_.back().cursor(), 500);
  EXPECT_EQ(announced_.back().checkpoint().sha256(), "weights of step 50");
  EXPECT_EQ(uploader.counts().uploaded, 2);
  EXPECT_EQ(uploader.counts().replaced, 3);
  // Nothing is left in the outbox.
  EXPECT_TRUE(fs::is_empty(dir_.File("outbox")));
}

// Old checkpoints the trainer drops are deleted on the upload thread (queued behind an upload in
// flight, or waking an idle thread), and Drain waits for them.
TEST_F(UploaderTest, DiscardedFilesAreDeletedOnTheUploadThreadAndDrainWaitsForThem) {
  absl::Notification release;
  const std::string old_file = Checkpoint(1).path;
  auto uploader = std::make_unique<CheckpointUploader>(
      Options([&](const std::string& path) -> absl::StatusOr<std::string> {
        release.WaitForNotification();
        return ReadBack(path);
      }));
  CART_ASSERT_OK(uploader->Submit(Checkpoint(10), false));
  uploader->Discard(old_file);
  release.Notify();
  CART_ASSERT_OK(uploader->Drain());
  EXPECT_FALSE(fs::exists(old_file));
  EXPECT_EQ(AnnouncedSteps(), (std::vector<int64_t>{10}));
  // Discarding with nothing to upload wakes the thread too.
  const std::string another = Checkpoint(2).path;
  uploader->Discard(another);
  CART_ASSERT_OK(uploader->Drain());
  EXPECT_FALSE(fs::exists(another));
}

TEST_F(UploaderTest, APeriodicCheckpointCartdHasNoRoomForIsSkippedAtOnce) {
  std::atomic<int> calls{0};
  CheckpointUploader uploader(Options([&](const std::string&) -> absl::StatusOr<std::string> {
    ++calls;
    return absl::ResourceExhaustedError("leaves 1 bytes free, below the floor");
  }));
  CART_ASSERT_OK(uploader.Submit(Checkpoint(10), false));
  CART_ASSERT_OK(uploader.Drain());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(uploader.counts().skipped, 1);
  EXPECT_TRUE(AnnouncedSteps().empty());
  EXPECT_THAT(Logs(), HasSubstr("checkpoint at step 10 not uploaded (cartd has no room for it)"));
}

TEST_F(UploaderTest, AFinalCheckpointWithoutRoomWaitsABoundedTimeThenSaysWhy) {
  std::atomic<int> calls{0};
  UploaderOptions o = Options([&](const std::string&) -> absl::StatusOr<std::string> {
    ++calls;
    return absl::ResourceExhaustedError("leaves 1 bytes free, below the floor of 2 bytes");
  });
  o.space_wait_ms = 300;
  CheckpointUploader uploader(std::move(o));
  const auto start = std::chrono::steady_clock::now();
  CART_ASSERT_OK(uploader.Submit(Checkpoint(20), true));
  EXPECT_THAT(uploader.Drain(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("final checkpoint at step 20 was not stored"),
                             HasSubstr("below the floor of 2 bytes"))));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_GT(calls.load(), 2) << "retried while it waited";
  EXPECT_THAT(Logs(), HasSubstr("waiting up to 300ms for room"));
}

TEST_F(UploaderTest, AFinalCheckpointIsRetriedThroughTransientErrorsAndAnAbandonedOneStops) {
  std::atomic<int> calls{0};
  CheckpointUploader uploader(Options([&](const std::string& path) -> absl::StatusOr<std::string> {
    if (++calls < 4) return absl::UnavailableError("cartd restarting");
    return ReadBack(path);
  }));
  CART_ASSERT_OK(uploader.Submit(Checkpoint(30), true));
  CART_ASSERT_OK(uploader.Drain());
  EXPECT_EQ(AnnouncedSteps(), (std::vector<int64_t>{30}));
  EXPECT_EQ(calls.load(), 4);

  // Fenced: the next final one is dropped, and Drain says so.
  CheckpointUploader fenced(Options([&](const std::string&) -> absl::StatusOr<std::string> {
    abandoned_ = true;
    return absl::UnavailableError("down");
  }));
  CART_ASSERT_OK(fenced.Submit(Checkpoint(40), true));
  EXPECT_THAT(fenced.Drain(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("abandoned")));
}

}  // namespace
}  // namespace cart::worker
