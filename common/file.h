#pragma once

// Crash-safe file writing: data goes to a temporary file beside the target, is fsync'ed, then
// renamed over the target and the directory is fsync'ed. A reader sees either the old file or the
// complete new one, never a torn write, even if the process is killed or the machine loses power.

#include <sys/types.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart {

class AtomicFileWriter {
 public:
  // Creates "<path>.tmp-<pid>-<n>" for writing, with permissions `mode` (less the umask) from
  // the start: 0600 for secrets. Internal/PermissionDenied with the path on error.
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path, mode_t mode = 0644);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  // Removes the temporary file unless Commit() succeeded.
  ~AtomicFileWriter();

  absl::Status Write(const void* data, size_t size);
  absl::Status Write(std::string_view data) { return Write(data.data(), data.size()); }
  // fsync, rename onto the target, fsync the directory. The writer is done afterwards.
  absl::Status Commit();
  // The same onto `path` instead, on the same filesystem: for a file named after its contents,
  // known only once written (a content-addressed blob).
  absl::Status CommitAs(const std::string& path);
  // The rename without the fsyncs: still atomic to readers and against a killed process (they see
  // the old file or the whole new one), not against a power cut. For a file whose durable copy is
  // kept elsewhere: a worker's checkpoint, which cartd's store holds durably once uploaded.
  absl::Status CommitWithoutSync();

 private:
  absl::Status Finish(const std::string& path, bool sync);
  AtomicFileWriter(std::string path, std::string tmp, FILE* file)
      : path_(std::move(path)), tmp_(std::move(tmp)), file_(file) {}
  std::string path_;
  std::string tmp_;
  FILE* file_ = nullptr;
};

// A write that failed for want of room on its filesystem (ENOSPC, EDQUOT): ResourceExhausted,
// with the payload kNoSpacePayload, which tells it from a device out of memory (also
// ResourceExhausted, train/torch_error.h). The message names the file and the operation.
inline constexpr char kNoSpacePayload[] = "cart.dev/no-space";
absl::Status NoSpaceError(std::string message);
// Whether `status` is such a failure (the payload survives cart::WithContext, common/status.h).
bool IsNoSpace(const absl::Status& status);

// Writes the whole of `data` to `path` atomically.
absl::Status WriteFileAtomically(const std::string& path, std::string_view data,
                                 mode_t mode = 0644);
// Creates `path` (and missing parents); a directory it creates is its owner's only (0700), one
// that exists keeps its permissions. Internal naming the path on error.
absl::Status CreatePrivateDir(const std::string& path);
// Reads a whole file. NotFound when it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Removes a path (a file or a directory tree) when it goes out of scope, however the scope
// ends, unless Release() was called: the scratch files of a step that either finishes or leaves
// nothing behind. Errors while removing are ignored.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::string path) : path_(std::move(path)) {}
  ~RemoveOnExit();
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace cart
