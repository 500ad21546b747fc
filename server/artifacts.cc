#include "server/artifacts.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/status.h"
#include "common/strings.h"

namespace cart::server {

bool IsArtifactName(std::string_view name) {
  if (name.size() != 64) return false;
  for (char c : name) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status ArtifactStore::Upload::Append(std::string_view bytes) {
  if (received_ + static_cast<int64_t>(bytes.size()) > size_) {
    return absl::DataLossError(
        StrCat("artifact ", sha256_, ": more than the declared ", size_, " bytes were sent"));
  }
  CART_RETURN_IF_ERROR(writer_.Write(bytes));
  hash_.Update(bytes);
  received_ += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::Status ArtifactStore::Upload::Commit() {
  if (received_ != size_) {
    return absl::DataLossError(
        StrCat("artifact ", sha256_, ": received ", received_, " bytes, declared ", size_));
  }
  const std::string actual = hash_.HexDigest();
  if (actual != sha256_) {
    return absl::DataLossError(
        StrCat("artifact ", sha256_, ": the bytes received hash to ", actual, "; not stored"));
  }
  CART_RETURN_IF_ERROR(writer_.Commit());
  store_->Count(sha256_, size_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(ArtifactStoreOptions options) {
  if (options.root.empty()) return absl::InvalidArgumentError("artifact store root is empty");
  if (options.max_bytes <= 0) {
    return absl::InvalidArgumentError(
        StrCat("artifact size limit must be positive, got ", options.max_bytes));
  }
  std::error_code ec;
  std::filesystem::create_directories(options.root, ec);
  if (ec) {
    return absl::InternalError(
        StrCat("cannot create artifact directory ", options.root, ": ", ec.message()));
  }
  std::unique_ptr<ArtifactStore> store(new ArtifactStore(std::move(options)));
  // One walk: "<blob>.tmp-<pid>-<n>" files are uploads a crash interrupted (AtomicFileWriter's
  // names) and go; blobs are counted towards stored_bytes.
  std::vector<std::filesystem::path> stale;
  std::unordered_map<std::string, int64_t> counted;
  int64_t bytes = 0;
  // A shared store's incoming/ holds workers' writes in progress, not cartd's (RemoveUnknown).
  const std::filesystem::path incoming = std::filesystem::path(store->options_.root) / kIncomingDir;
  for (auto it = std::filesystem::recursive_directory_iterator(store->options_.root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code entry_ec;  // a file that vanished mid-walk is skipped, not fatal
    if (!it->is_regular_file(entry_ec) || it->path().parent_path() == incoming) continue;
    const std::string name = it->path().filename().string();
    if (name.find(".tmp-") != std::string::npos) {
      stale.push_back(it->path());
    } else if (IsArtifactName(name)) {
      const uintmax_t size = it->file_size(entry_ec);
      if (!entry_ec && counted.emplace(name, static_cast<int64_t>(size)).second) {
        bytes += static_cast<int64_t>(size);
      }
    }
  }
  for (const auto& path : stale) {
    if (std::filesystem::remove(path, ec)) ++store->swept_temp_files_;
  }
  {
    absl::MutexLock lock(&store->mu_);
    store->counted_ = std::move(counted);
  }
  store->stored_bytes_ = bytes;
  if (!store->options_.shared) return store;
  // The store's id: kept for good once written, so that a worker can tell this store from a copy.
  const std::string id_path = StrCat(store->options_.root, "/", kStoreIdFile);
  absl::StatusOr<std::string> id = ReadWholeFile(id_path);
  if (id.ok()) {
    store->store_id_ = std::string(Trim(*id));
  } else if (absl::IsNotFound(id.status())) {
    store->store_id_ = RandomHex(16);
    CART_RETURN_IF_ERROR(WriteFileAtomically(id_path, store->store_id_ + "\n"));
  } else {
    return id.status();
  }
  if (store->store_id_.empty()) {
    return absl::DataLossError(StrCat(id_path, " is empty; remove it to give the store a new id"));
  }
  return store;
}

std::string ArtifactStore::RelativePath(const std::string& sha256) {
  return StrCat(sha256.substr(0, 2), "/", sha256);
}

std::string ArtifactStore::FullPath(const std::string& sha256) const {
  return StrCat(options_.root, "/", RelativePath(sha256));
}

absl::Status ArtifactStore::CheckName(const std::string& sha256) const {
  if (!IsArtifactName(sha256)) {
    return absl::InvalidArgumentError(
        StrCat("artifact name '", sha256.substr(0, 80), "' is not 64 lowercase hex digits"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> ArtifactStore::Size(const std::string& sha256) const {
  CART_RETURN_IF_ERROR(CheckName(sha256));
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(FullPath(sha256), ec);
  if (ec) return std::optional<int64_t>();
  return std::optional<int64_t>(static_cast<int64_t>(size));
}

int64_t ArtifactStore::FreeDiskBytes() const {
  struct statvfs fs {};
  if (statvfs(options_.root.c_str(), &fs) != 0) return -1;
  return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
}

absl::Status ArtifactStore::Remove(const std::string& sha256) {
  CART_RETURN_IF_ERROR(CheckName(sha256));
  const std::string path = FullPath(sha256);
  std::error_code ec;
  std::filesystem::remove(path, ec);  // false without an error: already gone
  if (ec) return absl::InternalError(StrCat("cannot remove ", path, ": ", ec.message()));
  Uncount(sha256);
  return absl::OkStatus();
}

void ArtifactStore::Count(const std::string& sha256, int64_t size) {
  absl::MutexLock lock(&mu_);
  if (counted_.emplace(sha256, size).second) stored_bytes_ += size;
}

void ArtifactStore::Uncount(const std::string& sha256) {
  absl::MutexLock lock(&mu_);
  auto it = counted_.find(sha256);
  if (it == counted_.end()) return;
  stored_bytes_ -= it->second;
  counted_.erase(it);
}

bool ArtifactStore::Counted(const std::string& sha256) const {
  absl::MutexLock lock(&mu_);
  return counted_.count(sha256) > 0;
}

int64_t ArtifactStore::RemoveUnknown(const std::function<bool(const std::string&)>& known,
                                     int64_t min_age_s) {
  const auto cutoff =
      std::filesystem::file_time_type::clock::now() - std::chrono::seconds(min_age_s);
  std::vector<std::string> unknown;
  std::vector<std::filesystem::path> partial;
  std::error_code ec;
  const std::filesystem::path incoming = std::filesystem::path(options_.root) / kIncomingDir;
  for (auto it = std::filesystem::recursive_directory_iterator(options_.root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code entry_ec;
    if (!it->is_regular_file(entry_ec)) continue;
    const std::string name = it->path().filename().string();
    const bool old = it->last_write_time(entry_ec) < cutoff && !entry_ec;
    if (it->path().parent_path() == incoming) {
      if (old) partial.push_back(it->path());
    } else if (IsArtifactName(name) && !known(name) && old) {
      unknown.push_back(name);
    }
  }
  int64_t removed = 0;
  for (const std::string& name : unknown) removed += Remove(name).ok() ? 1 : 0;
  for (const auto& path : partial) removed += std::filesystem::remove(path, ec) ? 1 : 0;
  return removed;
}

absl::StatusOr<std::unique_ptr<ArtifactStore::Upload>> ArtifactStore::BeginUpload(
    const std::string& sha256, int64_t size) {
  CART_RETURN_IF_ERROR(CheckName(sha256));
  if (size < 0) {
    return absl::InvalidArgumentError(StrCat("artifact ", sha256, ": negative size ", size));
  }
  const std::string path = FullPath(sha256);
  std::error_code ec;
  // A blob already stored takes no more room when uploaded again.
  if (!Counted(sha256)) {
    CART_RETURN_IF_ERROR(CheckRoom(StrCat("artifact ", sha256), size, /*extra_free_bytes=*/0));
  }
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec)
    return absl::InternalError(StrCat("cannot create directory for ", path, ": ", ec.message()));
  CART_ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Open(path));
  return std::unique_ptr<Upload>(new Upload(this, sha256, size, std::move(writer)));
}

absl::Status ArtifactStore::CheckRoom(const std::string& what, int64_t size,
                                      int64_t extra_free_bytes) const {
  if (size > options_.max_bytes) {
    return absl::ResourceExhaustedError(
        StrCat(what, " is ", size, " bytes; the limit is ", options_.max_bytes));
  }
  if (options_.min_free_bytes > 0) {
    if (const int64_t free_bytes = FreeDiskBytes(); free_bytes >= 0) {
      const int64_t left = free_bytes + extra_free_bytes - size;
      if (left < options_.min_free_bytes) {
        return absl::ResourceExhaustedError(
            StrCat(what, " (", size, " bytes) would leave ", left, " bytes free on ", options_.root,
                   ", below the floor of ", options_.min_free_bytes,
                   " bytes: free disk space (or lower min_free_artifact_bytes)"));
      }
    }
  }
  if (options_.quota_bytes > 0 && stored_bytes_ + size > options_.quota_bytes) {
    return absl::ResourceExhaustedError(
        StrCat(what, " (", size, " bytes) would bring the artifact store to ", stored_bytes_ + size,
               " bytes, past its quota of ", options_.quota_bytes,
               " bytes: keep fewer checkpoints per run (keep_checkpoints_per_run) or raise "
               "max_artifact_store_bytes"));
  }
  return absl::OkStatus();
}

absl::Status ArtifactStore::Adopt(const std::string& sha256, int64_t size) {
  CART_RETURN_IF_ERROR(CheckName(sha256));
  CART_RETURN_IF_ERROR(CheckShared(size, StrCat("artifact ", sha256)));
  const std::string path = FullPath(sha256);
  std::error_code ec;
  const uintmax_t on_disk = std::filesystem::file_size(path, ec);
  if (ec) {
    return absl::NotFoundError(
        StrCat("artifact ", sha256, " is not in the shared store: ", path, ": ", ec.message()));
  }
  if (Counted(sha256)) {
    if (static_cast<int64_t>(on_disk) == size) return absl::OkStatus();  // recorded before
    return absl::DataLossError(
        StrCat("artifact ", sha256, " is stored with ", on_disk, " bytes, not ", size));
  }
  // Refused: the file goes, as an upload refused would never have been stored.
  auto refuse = [&](absl::Status why) {
    std::filesystem::remove(path, ec);
    return why;
  };
  if (static_cast<int64_t>(on_disk) != size) {
    return refuse(absl::DataLossError(StrCat("artifact ", sha256, ": ", path, " has ", on_disk,
                                             " bytes, declared ", size, "; removed")));
  }
  if (absl::Status room = CheckRoom(StrCat("artifact ", sha256), size, size); !room.ok()) {
    return refuse(room);
  }
  const std::string actual = Sha256File(path);
  if (actual != sha256) {
    return refuse(
        absl::DataLossError(StrCat("artifact ", sha256, ": ", path, " hashes to ",
                                   actual.empty() ? "nothing (unreadable)" : actual, "; removed")));
  }
  Count(sha256, size);
  return absl::OkStatus();
}

absl::Status ArtifactStore::CheckAdopt(int64_t size) const {
  CART_RETURN_IF_ERROR(CheckShared(size, "a checkpoint"));
  return CheckRoom("a checkpoint", size, /*extra_free_bytes=*/0);
}

absl::Status ArtifactStore::CheckShared(int64_t size, const std::string& what) const {
  if (!options_.shared) {
    return absl::FailedPreconditionError(
        StrCat(what, ": cartd's artifact store is not shared; upload it (PutArtifact)"));
  }
  if (size < 0) return absl::InvalidArgumentError(StrCat(what, ": negative size ", size));
  return absl::OkStatus();
}

absl::Status ArtifactStore::Read(const std::string& sha256, size_t chunk_bytes,
                                 const std::function<bool(std::string_view)>& sink) const {
  CART_RETURN_IF_ERROR(CheckName(sha256));
  const std::string path = FullPath(sha256);
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return absl::NotFoundError(StrCat("artifact ", sha256, " is not stored"));
  std::vector<char> buffer(std::max<size_t>(chunk_bytes, 1));
  Sha256 hash;
  while (true) {
    const size_t n = std::fread(buffer.data(), 1, buffer.size(), file.get());
    if (n > 0) {
      const std::string_view chunk(buffer.data(), n);
      hash.Update(chunk);
      if (!sink(chunk)) return absl::OkStatus();
    }
    if (n < buffer.size()) {
      if (std::ferror(file.get())) return absl::InternalError(StrCat("cannot read ", path));
      break;
    }
  }
  const std::string actual = hash.HexDigest();
  if (actual != sha256) {
    return absl::DataLossError(
        StrCat("artifact ", sha256, " is corrupt on disk (its bytes hash to ", actual, ")"));
  }
  return absl::OkStatus();
}

}  // namespace cart::server
