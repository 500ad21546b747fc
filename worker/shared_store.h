#pragma once

// A shared-filesystem artifact store seen from a worker (docs/design.md "Storage"). When cartd's
// store is on a filesystem every box mounts (`artifact_store: {kind: shared_fs, path: ...}`),
// the job names it (Job.shared_store); a worker that sees the same store there writes its
// checkpoints into it itself and asks cartd to record them (RecordArtifact), and reads the
// checkpoints it starts from there, so that no checkpoint byte crosses cartd's link. A worker
// that cannot see it uploads and downloads through cartd as before, and says why.
//
// The layout is cartd's (server/artifacts.h): <dir>/<sha256[0:2]>/<sha256>, written by a worker
// into <dir>/incoming/ first and renamed into place once complete and fsync'ed, so no reader ever
// sees a partial blob under a hash's name.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cart/v1/worker.pb.h"

namespace cart::worker {

// The directory where this worker sees `store`: `mount` when given (cart-worker
// --shared-artifacts, for a box that mounts the filesystem elsewhere), else the path cartd
// names. FailedPrecondition naming the directory and what is wrong when its .cart-store file is
// missing, unreadable or holds another store's id: the caller then goes through cartd.
absl::StatusOr<std::string> SharedStoreDir(const cart::v1::SharedArtifactStore& store,
                                           const std::string& mount);

// Copies `file` into the store at `dir` under its SHA-256 (hashed while copying) and returns the
// hash. A blob already there with the same size is left as it is. Internal naming the file on an
// I/O error (nothing is left under the hash's name).
absl::StatusOr<std::string> WriteToSharedStore(const std::string& dir, const std::string& file);

// Copies blob `sha256` from the store at `dir` into `path` atomically, checking its hash.
// NotFound when the store has no such blob; DataLoss when its bytes do not hash to its name
// (nothing is written).
absl::Status CopyFromSharedStore(const std::string& dir, const std::string& sha256,
                                 const std::string& path);

}  // namespace cart::worker
