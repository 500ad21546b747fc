#include "data/identity.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"
#include "data/token_file.h"

namespace cart::data {
namespace {

int64_t Nanos(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// The first 12 hex digits: enough to tell two files apart in a message.
std::string Short(const std::string& sha256) {
  return sha256.size() > 12 ? sha256.substr(0, 12) + "…" : sha256;
}

}  // namespace

absl::StatusOr<std::pair<std::string, int64_t>> FileHashCache::Sha256(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(StrCat(path, ": no such file"));
    return absl::FailedPreconditionError(StrCat(path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(path, ": not a regular file"));
  }
  const int64_t size = static_cast<int64_t>(st.st_size);
  const Stamp stamp{st.st_dev, st.st_ino, size, Nanos(st.st_mtim), Nanos(st.st_ctim)};
  {
    absl::MutexLock lock(&mu_);
    if (auto it = hashes_.find(path); it != hashes_.end() && it->second.first == stamp) {
      return std::make_pair(it->second.second, size);
    }
  }
  std::string sha = Sha256File(path);
  if (sha.empty()) return absl::FailedPreconditionError(StrCat(path, ": cannot be read"));
  absl::MutexLock lock(&mu_);
  hashes_[path] = {stamp, sha};
  return std::make_pair(std::move(sha), size);
}

absl::StatusOr<FileIdentity> IdentifyPlainFile(const std::string& path, FileHashCache* cache) {
  FileHashCache local;
  CART_ASSIGN_OR_RETURN(auto hashed, (cache != nullptr ? cache : &local)->Sha256(path));
  FileIdentity id;
  id.sha256 = std::move(hashed.first);
  id.size_bytes = hashed.second;
  return id;
}

absl::StatusOr<FileIdentity> IdentifyTokenFile(const std::string& path, FileHashCache* cache) {
  CART_ASSIGN_OR_RETURN(TokenFileInfo info, ReadTokenFileInfo(MetadataPath(path)));
  CART_ASSIGN_OR_RETURN(FileIdentity id, IdentifyPlainFile(path, cache));
  if (id.sha256 != info.sha256) {
    return absl::DataLossError(StrCat(path, ": its bytes hash to ", id.sha256, " but ",
                                      MetadataPath(path), " says ", info.sha256,
                                      ": the file changed after `cart data prepare` wrote it; "
                                      "prepare it again"));
  }
  id.tokens = info.tokens;
  id.tokenizer = info.tokenizer;
  id.tokenizer_sha256 = TokenizerSha256(info.tokenizer);
  return id;
}

std::string TokenizerSha256(const std::string& spec) {
  std::vector<std::string> files;
  if (spec.rfind("gpt2:", 0) == 0) {
    const std::filesystem::path dir = spec.substr(5);
    files = {(dir / "encoder.json").string(), (dir / "vocab.bpe").string()};
  } else if (spec.size() > 6 && spec.compare(spec.size() - 6, 6, ".model") == 0) {
    files = {spec};
  }
  ::cart::Sha256 sha;
  if (files.empty()) {
    sha.Update(spec);  // "bytes", "synth:N": the spec is the whole definition
    return sha.HexDigest();
  }
  // The kind, then each file's own digest: the same files under another directory hash alike.
  sha.Update(spec.rfind("gpt2:", 0) == 0 ? "gpt2" : "sentencepiece");
  for (const std::string& file : files) {
    const std::string digest = Sha256File(file);
    if (digest.empty()) return "";
    sha.Update(digest);
  }
  return sha.HexDigest();
}

std::optional<std::string> IdentityMismatch(const FileIdentity& recorded,
                                            const FileIdentity& actual) {
  std::vector<std::string> parts;
  if (actual.sha256 != recorded.sha256) {
    parts.push_back(StrCat("sha256 ", actual.sha256, " here, ", recorded.sha256, " recorded"));
  }
  if (actual.size_bytes != recorded.size_bytes) {
    parts.push_back(StrCat(actual.size_bytes, " bytes here, ", recorded.size_bytes, " recorded"));
  }
  if (!actual.tokenizer_sha256.empty() && !recorded.tokenizer_sha256.empty() &&
      actual.tokenizer_sha256 != recorded.tokenizer_sha256) {
    parts.push_back(StrCat("tokenizer ", actual.tokenizer, " (", Short(actual.tokenizer_sha256),
                           ") here, ", recorded.tokenizer, " (", Short(recorded.tokenizer_sha256),
                           ") recorded"));
  }
  if (parts.empty()) return std::nullopt;
  return StrJoin(parts, "; ");
}

}  // namespace cart::data
