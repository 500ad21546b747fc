#pragma once

// ArtifactStore: cartd's content-addressed blob store for checkpoints (docs/design.md "Protocols").
// A blob lives at <root>/<sha256[0:2]>/<sha256>; its name is its hash, never a path a client chose.
// An upload is written to a temporary file beside its target and renamed into place only after its
// size and SHA-256 were verified (common/file.h AtomicFileWriter), so a reader never sees a torn or
// unverified blob, even after a crash.
//
// Errors: InvalidArgument for a name that is not 64 lowercase hex digits or a negative size;
// ResourceExhausted past the size limit; DataLoss when the bytes do not match the declared size or
// hash (nothing is stored); NotFound for an unknown blob; Internal / PermissionDenied for I/O
// failures (message names the file).
//
// A shared store (`artifact_store: {kind: shared_fs, path: ...}`; docs/design.md "Storage") has
// the same layout on a filesystem the workers mount too: a worker that sees it writes a blob
// itself (into <root>/incoming/, renamed to its hash once written) and cartd adopts it (Adopt:
// size, hash, size limit, quota and disk floor checked as for an upload). <root>/.cart-store
// holds a random id that tells a worker it is looking at this store and not a stale copy.
//
// Thread-safety: all methods are thread-safe; an Upload belongs to one thread. Concurrent uploads
// of the same blob are safe (each renames identical bytes onto the target).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/file.h"
#include "common/sha256.h"

namespace cart::server {

struct ArtifactStoreOptions {
  // Directory holding the blobs; created when missing.
  std::string root;
  // Largest blob accepted, bytes. Default 64 GiB (a d=1024 checkpoint with AdamW state is ~5 GiB).
  int64_t max_bytes = int64_t{64} << 30;
  // An upload is refused (ResourceExhausted, naming the numbers) when it would leave less than
  // this many bytes free on the store's file system (room for the database to grow). Default
  // 256 MiB; 0: no floor.
  int64_t min_free_bytes = int64_t{256} << 20;
  // The blobs together may hold at most this many bytes; an upload past it is refused
  // (ResourceExhausted, naming the numbers). 0: no quota.
  int64_t quota_bytes = 0;
  // The root is a filesystem the workers mount as well: they may write blobs there themselves.
  bool shared = false;
};

// The file under a store's root that holds its id, and the folder workers write into.
inline constexpr char kStoreIdFile[] = ".cart-store";
inline constexpr char kIncomingDir[] = "incoming";

// Whether `name` is a blob name: 64 lowercase hex digits.
bool IsArtifactName(std::string_view name);

class ArtifactStore {
 public:
  // One upload in progress. Destroying it without a successful Commit leaves nothing behind.
  class Upload {
   public:
    // Appends bytes. ResourceExhausted / DataLoss as soon as they pass the declared size.
    absl::Status Append(std::string_view bytes);
    // Verifies size and hash, then moves the blob into place. DataLoss on a mismatch.
    absl::Status Commit();

   private:
    friend class ArtifactStore;
    Upload(ArtifactStore* store, std::string sha256, int64_t size, AtomicFileWriter writer)
        : store_(store), sha256_(std::move(sha256)), size_(size), writer_(std::move(writer)) {}
    ArtifactStore* store_;
    std::string sha256_;
    int64_t size_;
    int64_t received_ = 0;
    AtomicFileWriter writer_;
    Sha256 hash_;
  };

  // Creates the root when missing and removes the temporary files of uploads that a crash left
  // behind (no upload is in flight when cartd opens its store; a worker's partial files in a
  // shared store's incoming/ are RemoveUnknown's). A shared store gets an id when it has none.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(ArtifactStoreOptions options);
  // Temporary files Open() removed.
  int64_t swept_temp_files() const { return swept_temp_files_; }
  // Bytes of the blobs on disk (counted at Open, kept up to date by uploads, adoptions and
  // removals).
  int64_t stored_bytes() const { return stored_bytes_; }
  // A shared store's id, kept in <root>/.cart-store (32 hex digits); empty for cartd's own.
  const std::string& store_id() const { return store_id_; }
  // Free space of the file system under the root (statvfs), bytes; -1 when it cannot be read.
  int64_t FreeDiskBytes() const;

  // Deletes a blob (checkpoint retention released it). OK when it is already gone.
  absl::Status Remove(const std::string& sha256);
  // Deletes the blobs older than `min_age_s` seconds for which `known` is false: blobs whose
  // checkpoint a crash kept from being recorded, or whose removal a crash interrupted. Younger
  // ones may be uploads whose checkpoint notice is still on its way. Also deletes the partial
  // files in incoming/ older than that (a worker died writing them). Returns how many went.
  int64_t RemoveUnknown(const std::function<bool(const std::string& sha256)>& known,
                        int64_t min_age_s);

  // "<sha256[0:2]>/<sha256>", relative to the root (what the store's artifacts table records).
  static std::string RelativePath(const std::string& sha256);
  std::string FullPath(const std::string& sha256) const;

  // The size of a stored blob, bytes; nullopt when it is not stored.
  absl::StatusOr<std::optional<int64_t>> Size(const std::string& sha256) const;

  // Starts an upload of `size` bytes hashing to `sha256`.
  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(const std::string& sha256, int64_t size);

  // Takes into the store a blob a worker wrote under its name in a shared store (RecordArtifact):
  // OK once it is there with `size` bytes hashing to its name, within the size limit, the quota
  // and the disk floor (the same checks and messages as BeginUpload), and counted. OK at once for
  // a blob already counted. FailedPrecondition when the store is not shared; NotFound when the
  // file is not there; DataLoss (size or hash) and ResourceExhausted remove the file.
  absl::Status Adopt(const std::string& sha256, int64_t size);
  // Whether a blob of `size` bytes would have room, asked before a worker writes it (its hash is
  // known only once written): OK, or the ResourceExhausted Adopt would give.
  absl::Status CheckAdopt(int64_t size) const;

  // Streams a stored blob to `sink` in chunks of at most chunk_bytes, hashing as it goes; `sink`
  // returns false to stop early (the result is then OK). DataLoss when the bytes on disk no longer
  // match the name (found after the last chunk was handed out).
  absl::Status Read(const std::string& sha256, size_t chunk_bytes,
                    const std::function<bool(std::string_view)>& sink) const;

  const ArtifactStoreOptions& options() const { return options_; }

 private:
  explicit ArtifactStore(ArtifactStoreOptions options) : options_(std::move(options)) {}
  absl::Status CheckName(const std::string& sha256) const;
  // The refusal for `what` ("artifact <sha256>"), `size` bytes not yet stored, when the size
  // limit, the disk floor (`extra_free_bytes`: bytes of it already on the disk) or the quota
  // forbid it; OK otherwise.
  absl::Status CheckRoom(const std::string& what, int64_t size, int64_t extra_free_bytes) const;
  // FailedPrecondition unless the store is shared; InvalidArgument for a negative size.
  absl::Status CheckShared(int64_t size, const std::string& what) const;
  // Counts a blob of `size` bytes as stored, once however often it arrives; Uncount the reverse.
  void Count(const std::string& sha256, int64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  void Uncount(const std::string& sha256) ABSL_LOCKS_EXCLUDED(mu_);
  bool Counted(const std::string& sha256) const ABSL_LOCKS_EXCLUDED(mu_);

  const ArtifactStoreOptions options_;
  int64_t swept_temp_files_ = 0;
  std::string store_id_;
  std::atomic<int64_t> stored_bytes_{0};
  mutable absl::Mutex mu_;
  // The blobs stored_bytes_ counts, with their sizes, so that a blob is counted once however it
  // arrives and uncounted once however it goes.
  std::unordered_map<std::string, int64_t> counted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cart::server
