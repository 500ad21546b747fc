#pragma once

// Checkpoint uploads off the training thread (docs/design.md "Storage"). The trainer writes each
// checkpoint to local disk (synchronously, atomically) and hands it here; a thread of this class
// uploads it to cartd and announces it on the attempt's stream while training goes on. At most
// one upload is in flight and one waits: a newer checkpoint replaces a waiting one (the newest is
// what a resume wants), never a waiting final one. Each queued file is hard-linked into an outbox
// first, so the trainer's local retention may delete its own copy meanwhile.
//
// Failures: a periodic checkpoint that cannot be uploaded after a few tries, or that cartd
// refuses for space or quota (RESOURCE_EXHAUSTED), is skipped with a log line (the next one will
// be uploaded). The final checkpoint is retried until it is stored or the attempt is abandoned
// (fenced, or the shutdown grace ran out), except that a refusal for space is retried only for
// `space_wait_ms`: then Drain() returns cartd's reason, and the attempt ends FAILED with it
// instead of holding a finishing GPU for ever.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cart/v1/worker.pb.h"

namespace cart::worker {

// A checkpoint the trainer wrote (the fields of train::CheckpointManifest the upload needs; this
// header stays free of LibTorch).
struct CheckpointFile {
  int64_t step = 0;    // optimizer steps completed in it
  int64_t cursor = 0;  // the data cursor stored in it
  int64_t bytes = 0;   // size of the file
  std::string path;
};

struct UploaderOptions {
  // Uploads the file; its sha256. (worker/job.h UploadArtifact over the attempt's stub.)
  std::function<absl::StatusOr<std::string>(const std::string& path)> upload;
  // Announces a stored checkpoint (AttemptChannel::PostCheckpoint); called from the upload thread.
  std::function<void(const cart::v1::CheckpointNotice&)> announce;
  std::function<void(const std::string&)> log;  // a line for the run's log; thread-safe
  // True once nothing more can be delivered (fenced, or the shutdown grace ran out).
  std::function<bool()> abandoned;
  std::string outbox_dir;  // created when missing; on the checkpoints' file system
  int64_t space_wait_ms = 600'000;
  int64_t first_backoff_ms = 200;  // between tries; doubles up to max_backoff_ms
  int64_t max_backoff_ms = 5000;
  int periodic_tries = 4;  // a periodic checkpoint is skipped after this many failed tries
  // The upload thread's niceness (0: the process's). Below the training threads, a CPU-bound
  // worker's upload (copying, hashing, sending) takes what training leaves instead of a core from
  // it; on a GPU the training thread mostly waits for the device, and the upload loses nothing.
  int niceness = 10;
};

class CheckpointUploader {
 public:
  explicit CheckpointUploader(UploaderOptions options);
  // Stops the thread; whatever is still queued is abandoned (its outbox links removed).
  ~CheckpointUploader();
  CheckpointUploader(const CheckpointUploader&) = delete;
  CheckpointUploader& operator=(const CheckpointUploader&) = delete;

  // Queues checkpoint `m` (`final`: the attempt's last) and returns at once. A filesystem error
  // linking it into the outbox falls back to a copy; if that fails too, the error is returned and
  // nothing is queued.
  absl::Status Submit(const CheckpointFile& m, bool final);

  // Deletes `path` (an old checkpoint the trainer's retention dropped) on the upload thread, so
  // the kernel's freeing of its blocks does not stall the training loop. Whatever is still
  // queued when the uploader stops is deleted by the destructor.
  void Discard(const std::string& path);

  // Waits until every queued checkpoint is stored and announced, skipped, or abandoned, and every
  // discarded file deleted. OK;
  // FailedPrecondition with cartd's reason when the final checkpoint was refused for space past
  // space_wait_ms; Cancelled when it was abandoned.
  absl::Status Drain();

  struct Counts {
    int64_t uploaded = 0;
    int64_t replaced = 0;  // waiting checkpoints a newer one replaced before their upload
    int64_t skipped = 0;   // periodic checkpoints given up on
  };
  Counts counts() const;

 private:
  struct Item {
    CheckpointFile manifest;  // path: the outbox link
    std::string source;       // the trainer's own file
    bool final = false;
  };
  void Loop();
  // Uploads one item; OK, or why it was given up on.
  absl::Status UploadOne(const Item& item);
  bool WaitBackoff(int64_t ms);  // false when stopping

  const UploaderOptions options_;
  mutable absl::Mutex mu_;
  std::optional<Item> waiting_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> discards_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace cart::worker
