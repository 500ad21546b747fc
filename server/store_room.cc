#include "server/store_room.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <utility>

#include "common/file.h"
#include "common/strings.h"

namespace cart::server {
namespace {

std::string Mib(int64_t bytes) { return StrCat(std::max<int64_t>(bytes, 0) >> 20, " MiB"); }

}  // namespace

StoreRoom::StoreRoom(std::string dir, int64_t floor_bytes)
    : dir_(std::move(dir)), floor_bytes_(std::max<int64_t>(floor_bytes, 0)) {
  state_.needed_bytes = floor_bytes_;
}

int64_t StoreRoom::FreeBytes() const {
  struct statvfs fs {};
  if (statvfs(dir_.c_str(), &fs) != 0) return -1;
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

std::optional<std::string> StoreRoom::Change(bool full, int64_t now_us, std::string reason) {
  if (full == state_.full) return std::nullopt;
  state_.full = full;
  state_.since_us = full ? now_us : 0;
  state_.reason = full ? std::move(reason) : "";
  if (!full) {
    state_.needed_bytes = floor_bytes_;
    return StrCat("disk has room again: ", Mib(state_.free_bytes), " free in ", dir_,
                  "; submits, changes and new leases go on");
  }
  return StrCat("disk full: ", state_.reason,
                "; cartd answers reads, refuses new changes and "
                "hands out no job until ",
                Mib(state_.needed_bytes),
                " are free (workers keep what is not acknowledged and send it again)");
}

std::optional<std::string> StoreRoom::Look(int64_t now_us) {
  const int64_t free_bytes = FreeBytes();
  absl::MutexLock lock(&mu_);
  state_.free_bytes = free_bytes;
  if (free_bytes < 0) return std::nullopt;  // unreadable: the write results decide
  if (state_.full) {
    if (free_bytes >= state_.needed_bytes) return Change(false, now_us, "");
    return std::nullopt;
  }
  if (free_bytes < floor_bytes_) {
    state_.needed_bytes = floor_bytes_;
    return Change(true, now_us,
                  StrCat(Mib(free_bytes), " free in ", dir_, ", below the floor of ",
                         Mib(floor_bytes_), " (min_free_store_bytes)"));
  }
  return std::nullopt;
}

std::optional<std::string> StoreRoom::NoteWrite(const absl::Status& status, int64_t now_us) {
  if (!IsNoSpace(status)) return std::nullopt;
  const int64_t free_bytes = FreeBytes();
  const int64_t margin = std::max<int64_t>(floor_bytes_, int64_t{1} << 20);
  absl::MutexLock lock(&mu_);
  // Once full, the bar stays where the first failure set it: later failures are writes that
  // were on their way then, and reading the free space after room came back would raise the bar
  // past it. A failure with room enough now is such a late one too.
  if (state_.full) return std::nullopt;
  if (free_bytes >= 0 && free_bytes >= floor_bytes_ + 2 * margin) return std::nullopt;
  state_.free_bytes = free_bytes;
  // Room beyond what there was when the write failed, a floor's worth (1 MiB without one): the
  // write needed more than was left. (The database's writes are small; checkpoints have their
  // own floor, min_free_artifact_bytes.)
  state_.needed_bytes = std::max(floor_bytes_, std::max<int64_t>(free_bytes, 0)) + margin;
  return Change(true, now_us, StrCat("a write failed: ", status.message()));
}

StoreRoom::State StoreRoom::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

bool StoreRoom::full() const {
  absl::MutexLock lock(&mu_);
  return state_.full;
}

absl::Status StoreRoom::CheckRoom(std::string_view what) const {
  absl::MutexLock lock(&mu_);
  if (!state_.full) return absl::OkStatus();
  return absl::ResourceExhaustedError(StrCat(what, " waits: cartd's disk is full (", state_.reason,
                                             "); it takes changes again once ",
                                             Mib(state_.needed_bytes), " are free in ", dir_));
}

}  // namespace cart::server
