#pragma once

// Room on cartd's own disk (docs/design.md "cartd's disk fills"): the filesystem that holds the
// SQLite database. cartd is "full" while the free space there is below its floor
// (`min_free_store_bytes`), or after a write failed for want of room (SQLite's SQLITE_FULL,
// common/file.h IsNoSpace) until the free space is above the floor (or what it was then) by a
// floor's worth (1 MiB without a floor; so that one freed page does not flap it). A failure noted
// while already full, or with that much room already free, is a late one and changes nothing. While
// full, cartd answers every read, takes no new write a user starts (submit, cancel, tags, resume,
// extend: refused with ResourceExhausted naming the disk; deleting a sweep, which frees room, is
// allowed), hands workers no new job, and leaves lease expiry alone; a running worker's reports
// fail unacknowledged and the worker keeps them and sends them again, so nothing acknowledged is
// lost. The state clears by itself at the first look that finds room.
//
// Thread-safety: every method is thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace cart::server {

class StoreRoom {
 public:
  struct State {
    bool full = false;
    int64_t free_bytes = -1;   // at the last look; -1: unknown
    int64_t needed_bytes = 0;  // free space it needs to leave the state
    int64_t since_us = 0;      // when it became full (Unix µs); 0 when not
    std::string reason;        // why: below the floor, or the write that failed
  };

  // `dir`: a directory on the database's filesystem. `floor_bytes` 0: only failed writes count.
  StoreRoom(std::string dir, int64_t floor_bytes);

  // Reads the free space at `now_us`; the line to log when the state changed.
  std::optional<std::string> Look(int64_t now_us);
  // A write's result: a no-space failure makes cartd full (the line to log when it changed).
  std::optional<std::string> NoteWrite(const absl::Status& status, int64_t now_us);

  State state() const;
  bool full() const;
  int64_t floor_bytes() const { return floor_bytes_; }
  // OK when not full; otherwise ResourceExhausted saying that `what` waits for room and why.
  absl::Status CheckRoom(std::string_view what) const;

 private:
  int64_t FreeBytes() const;  // -1 when it cannot be read
  std::optional<std::string> Change(bool full, int64_t now_us, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const int64_t floor_bytes_;
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cart::server
