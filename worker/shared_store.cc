#include "worker/shared_store.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "common/file.h"
#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"

namespace cart::worker {
namespace {

namespace fs = std::filesystem;

// The store's layout (server/artifacts.h, which this module does not link).
constexpr char kStoreIdFile[] = ".cart-store";
constexpr char kIncomingDir[] = "incoming";
constexpr size_t kChunkBytes = size_t{4} << 20;

std::string BlobPath(const std::string& dir, const std::string& sha256) {
  return StrCat(dir, "/", sha256.substr(0, 2), "/", sha256);
}

// Streams the file at `path` to `sink` in chunks, hashing it; the hash. NotFound when it does not
// exist, Internal naming it on a read error or when `sink` fails.
absl::StatusOr<std::string> Stream(const std::string& path,
                                   const std::function<absl::Status(const char*, size_t)>& sink) {
  std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return absl::NotFoundError(StrCat(path, " does not exist"));
    return absl::InternalError(StrCat("cannot open ", path));
  }
  std::vector<char> buffer(kChunkBytes);
  Sha256 hash;
  while (true) {
    const size_t n = std::fread(buffer.data(), 1, buffer.size(), in.get());
    if (n > 0) {
      hash.Update(buffer.data(), n);
      CART_RETURN_IF_ERROR(sink(buffer.data(), n));
    }
    if (n < buffer.size()) {
      if (std::ferror(in.get())) return absl::InternalError(StrCat("cannot read ", path));
      break;
    }
  }
  return hash.HexDigest();
}

}  // namespace

absl::StatusOr<std::string> SharedStoreDir(const cart::v1::SharedArtifactStore& store,
                                           const std::string& mount) {
  const std::string dir = mount.empty() ? store.path() : mount;
  const std::string id_path = StrCat(dir, "/", kStoreIdFile);
  absl::StatusOr<std::string> id = ReadWholeFile(id_path);
  if (!id.ok()) {
    return absl::FailedPreconditionError(StrCat("the shared artifact store is not visible at ", dir,
                                                " (", Message(id.status()), ")"));
  }
  if (Trim(*id) != store.store_id()) {
    return absl::FailedPreconditionError(StrCat(
        "the shared artifact store is not visible at ", dir, " (", id_path, " holds store ",
        Trim(*id).substr(0, 40), ", cartd's is ", store.store_id(), ": another store or a copy)"));
  }
  return dir;
}

absl::StatusOr<std::string> WriteToSharedStore(const std::string& dir, const std::string& file) {
  std::error_code ec;
  const fs::path incoming = fs::path(dir) / kIncomingDir;
  fs::create_directories(incoming, ec);
  if (ec)
    return absl::InternalError(StrCat("cannot create ", incoming.string(), ": ", ec.message()));
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  // A name no other writer uses; AtomicFileWriter adds its own suffix for the partial file.
  const std::string partial = (incoming / StrCat(host, "-", RandomHex(8))).string();
  CART_ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Open(partial));
  CART_ASSIGN_OR_RETURN(std::string sha256, Stream(file, [&](const char* data, size_t n) {
                          return writer.Write(data, n);
                        }));
  const std::string target = BlobPath(dir, sha256);
  const uintmax_t size = fs::file_size(file, ec);
  if (uintmax_t there = fs::file_size(target, ec); !ec && there == size) {
    return sha256;  // stored already (the writer's partial file goes with it)
  }
  fs::create_directories(fs::path(target).parent_path(), ec);
  if (ec)
    return absl::InternalError(
        StrCat("cannot create the directory of ", target, ": ", ec.message()));
  CART_RETURN_IF_ERROR(writer.CommitAs(target));
  return sha256;
}

absl::Status CopyFromSharedStore(const std::string& dir, const std::string& sha256,
                                 const std::string& path) {
  const std::string blob = BlobPath(dir, sha256);
  std::error_code ec;
  if (!fs::exists(blob, ec)) {
    return absl::NotFoundError(StrCat("artifact ", sha256, " is not in the shared store at ", dir));
  }
  fs::create_directories(fs::path(path).parent_path(), ec);
  CART_ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::Open(path));
  CART_ASSIGN_OR_RETURN(std::string actual, Stream(blob, [&](const char* data, size_t n) {
                          return writer.Write(data, n);
                        }));
  if (actual != sha256) {
    return absl::DataLossError(
        StrCat(blob, " is corrupt: its bytes hash to ", actual, "; nothing copied"));
  }
  return writer.Commit();
}

}  // namespace cart::worker
