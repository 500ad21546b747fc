#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace cart {
namespace {

absl::Status ErrnoError(std::string_view what, const std::string& path) {
  const int err = errno;
  std::string msg = StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  // What the caller named wrongly is the caller's to fix, not an internal error.
  if (err == ENAMETOOLONG) {
    return absl::InvalidArgumentError(StrCat(msg, " (a path is at most ", PATH_MAX,
                                             " bytes and each of its names at most ", NAME_MAX,
                                             ")"));
  }
  if (err == ENOTDIR || err == EISDIR || err == ELOOP) return absl::InvalidArgumentError(msg);
  if (err == ENOSPC || err == EDQUOT) return NoSpaceError(std::move(msg));
  return absl::InternalError(msg);
}

}  // namespace

absl::Status NoSpaceError(std::string message) {
  absl::Status status = absl::ResourceExhaustedError(std::move(message));
  status.SetPayload(kNoSpacePayload, absl::Cord("1"));
  return status;
}

bool IsNoSpace(const absl::Status& status) {
  return absl::IsResourceExhausted(status) && status.GetPayload(kNoSpacePayload).has_value();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path, mode_t mode) {
  static std::atomic<int> counter{0};
  std::string tmp = StrCat(path, ".tmp-", getpid(), "-", counter++);
  // Created with its final permissions (a secret is never readable by others, even briefly).
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    ::close(fd);
    std::remove(tmp.c_str());
    return ErrnoError("cannot open", tmp);
  }
  return AtomicFileWriter(path, tmp, f);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)), tmp_(std::move(other.tmp_)), file_(other.file_) {
  other.file_ = nullptr;
  other.tmp_.clear();
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

absl::Status AtomicFileWriter::Write(const void* data, size_t size) {
  if (file_ == nullptr) return absl::FailedPreconditionError("write after commit: " + path_);
  if (size > 0 && std::fwrite(data, 1, size, file_) != size)
    return ErrnoError("cannot write", tmp_);
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() { return Finish(path_, /*sync=*/true); }

absl::Status AtomicFileWriter::CommitAs(const std::string& path) {
  return Finish(path, /*sync=*/true);
}

absl::Status AtomicFileWriter::CommitWithoutSync() { return Finish(path_, /*sync=*/false); }

absl::Status AtomicFileWriter::Finish(const std::string& path, bool sync) {
  if (file_ == nullptr) return absl::FailedPreconditionError("commit twice: " + path_);
  FILE* f = file_;
  file_ = nullptr;
  bool ok = std::fflush(f) == 0 && (!sync || fsync(fileno(f)) == 0);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    absl::Status s = ErrnoError("cannot flush", tmp_);
    std::remove(tmp_.c_str());
    return s;
  }
  if (std::rename(tmp_.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoError("cannot rename onto", path);
    std::remove(tmp_.c_str());
    return s;
  }
  if (!sync) return absl::OkStatus();
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view data, mode_t mode) {
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Open(path, mode);
  if (!w.ok()) return w.status();
  absl::Status s = w->Write(data);
  if (!s.ok()) return s;
  return w->Commit();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  // A directory opens as a stream and reads as nothing: refused by name, as a volume mounted where
  // a file was meant would otherwise read as an empty file.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(StrCat(path, " is a directory, not a file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return ErrnoError("cannot read", path);
  return ss.str();
}

absl::Status CreatePrivateDir(const std::string& path) {
  std::error_code ec;
  const bool fresh = !std::filesystem::exists(path, ec);
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", path, ": ", ec.message()));
  if (fresh && ::chmod(path.c_str(), 0700) != 0) return ErrnoError("cannot chmod", path);
  return absl::OkStatus();
}

RemoveOnExit::~RemoveOnExit() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

}  // namespace cart
