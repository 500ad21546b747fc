#include "worker/checkpoint_uploader.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "common/status.h"
#include "common/strings.h"

namespace cart::worker {

namespace fs = std::filesystem;

CheckpointUploader::CheckpointUploader(UploaderOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

CheckpointUploader::~CheckpointUploader() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  std::error_code ec;
  if (waiting_) fs::remove(waiting_->manifest.path, ec);
  for (const std::string& path : discards_) fs::remove(path, ec);
}

void CheckpointUploader::Discard(const std::string& path) {
  absl::MutexLock lock(&mu_);
  discards_.push_back(path);
}

absl::Status CheckpointUploader::Submit(const CheckpointFile& m, bool final) {
  std::error_code ec;
  fs::create_directories(options_.outbox_dir, ec);
  Item item;
  item.manifest = m;
  item.final = final;
  item.source = m.path;
  item.manifest.path = (fs::path(options_.outbox_dir) / fs::path(m.path).filename()).string();
  fs::remove(item.manifest.path, ec);
  // A hard link costs nothing and survives the trainer's retention deleting its own name; a copy
  // where links are not possible.
  fs::create_hard_link(m.path, item.manifest.path, ec);
  if (ec) {
    ec.clear();
    fs::copy_file(m.path, item.manifest.path, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(StrCat("checkpoint at step ", m.step, ": cannot put ", m.path,
                                        " into ", options_.outbox_dir, ": ", ec.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  if (waiting_) {
    if (waiting_->final && !final) {
      // Never replace the final checkpoint (nothing comes after it in a well-behaved attempt).
      fs::remove(item.manifest.path, ec);
      return absl::OkStatus();
    }
    fs::remove(waiting_->manifest.path, ec);
    ++counts_.replaced;
  }
  waiting_ = std::move(item);
  return absl::OkStatus();
}

absl::Status CheckpointUploader::Drain() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](CheckpointUploader* u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(u->mu_) {
        return u->stopping_ || (!u->waiting_ && !u->busy_ && u->discards_.empty());
      },
      this));
  return final_status_;
}

CheckpointUploader::Counts CheckpointUploader::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

bool CheckpointUploader::WaitBackoff(int64_t ms) {
  absl::MutexLock lock(&mu_);
  const bool* stopping = &stopping_;
  mu_.AwaitWithTimeout(absl::Condition(stopping), absl::Milliseconds(ms));
  return !stopping_;
}

void CheckpointUploader::Loop() {
  if (options_.niceness > 0) LowerThisThreadsPriority(options_.niceness);
  for (;;) {
    std::optional<Item> next;
    std::vector<std::string> discards;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CheckpointUploader* u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(u->mu_) {
            return u->stopping_ || u->waiting_.has_value() || !u->discards_.empty();
          },
          this));
      if (stopping_) return;
      discards.swap(discards_);
      next = std::move(waiting_);
      waiting_.reset();
      busy_ = true;
    }
    std::error_code ec;
    for (const std::string& path : discards) fs::remove(path, ec);
    if (!next) {
      absl::MutexLock lock(&mu_);
      busy_ = false;
      continue;
    }
    const Item& item = *next;
    absl::Status done = UploadOne(item);
    fs::remove(item.manifest.path, ec);
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (done.ok()) {
      ++counts_.uploaded;
    } else if (item.final) {
      final_status_ = done;
    } else {
      ++counts_.skipped;
    }
  }
}

absl::Status CheckpointUploader::UploadOne(const Item& item) {
  const CheckpointFile& m = item.manifest;
  int64_t backoff_ms = options_.first_backoff_ms;
  std::optional<absl::Time> space_since;
  for (int tries = 1;; ++tries) {
    if (options_.abandoned()) {
      return absl::CancelledError(StrCat("checkpoint at step ", m.step, ": attempt abandoned"));
    }
    absl::StatusOr<std::string> sha = options_.upload(m.path);
    if (sha.ok()) {
      cart::v1::CheckpointNotice notice;
      notice.mutable_checkpoint()->set_step(m.step);
      notice.mutable_checkpoint()->set_sha256(*sha);
      notice.mutable_checkpoint()->set_size_bytes(m.bytes);
      notice.set_cursor(m.cursor);
      notice.set_final(item.final);
      options_.announce(notice);
      return absl::OkStatus();
    }
    const bool no_space = absl::IsResourceExhausted(sha.status());
    if (!item.final) {
      bool newer = false;
      {
        absl::MutexLock lock(&mu_);
        newer = waiting_.has_value();
      }
      if (no_space || newer || tries >= options_.periodic_tries) {
        options_.log(StrCat("checkpoint at step ", m.step, " not uploaded",
                            no_space ? " (cartd has no room for it)" : "", ": ",
                            Message(sha.status()),
                            newer ? "; a newer checkpoint is waiting" : "; training goes on"));
        return sha.status();
      }
    } else if (no_space) {
      const absl::Time now = absl::Now();
      if (!space_since) {
        space_since = now;
        options_.log(StrCat("final checkpoint at step ", m.step, " refused by cartd for space: ",
                            Message(sha.status()), "; waiting up to ",
                            absl::FormatDuration(absl::Milliseconds(options_.space_wait_ms)),
                            " for room before the attempt fails"));
      } else if (now - *space_since >= absl::Milliseconds(options_.space_wait_ms)) {
        // Not ResourceExhausted: that means a device out of memory (train/torch_error.h).
        return absl::FailedPreconditionError(
            StrCat("the final checkpoint at step ", m.step,
                   " was not stored: cartd refused it for space (", Message(sha.status()), ") for ",
                   absl::FormatDuration(absl::Trunc(now - *space_since, absl::Milliseconds(1))),
                   "; the trainer's copy is ", item.source, " on this worker"));
      }
    }
    if (!WaitBackoff(backoff_ms)) {
      return absl::CancelledError(StrCat("checkpoint at step ", m.step, ": uploader stopped"));
    }
    backoff_ms = std::min(backoff_ms * 2, options_.max_backoff_ms);
  }
}

}  // namespace cart::worker
