#pragma once

// The identity of a data file, for data lineage (docs/architecture.md "Runs are bound to their data
// by content"): what a run trained on, recorded when its sweep is submitted (by the client that can
// see the files) or by the first worker that opens them, and checked by every later attempt before
// it trains.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data/file_identity.h"

namespace cart::data {

// Remembers each path's sha256 with the file's (device, inode, size, modification and change
// times), so that a worker hashes a 2 GB training file once, not before every attempt: a file
// written again gets new times and is hashed again, replacing the path's entry. Thread-safe.
class FileHashCache {
 public:
  // The sha256 of the file's bytes and its size; NotFound naming `path` when it is missing, a
  // filesystem error naming it when it cannot be read.
  absl::StatusOr<std::pair<std::string, int64_t>> Sha256(const std::string& path);

 private:
  using Stamp = std::tuple<dev_t, ino_t, int64_t, int64_t, int64_t>;
  absl::Mutex mu_;
  std::map<std::string, std::pair<Stamp, std::string>> hashes_ ABSL_GUARDED_BY(mu_);  // by path
};

// The identity of a token file (NAME.bin with NAME.json; data/token_file.h). DataLoss naming the
// file when its bytes do not hash to what its metadata says (it changed after `cart data
// prepare` wrote it); the metadata's errors otherwise. `cache` may be null.
absl::StatusOr<FileIdentity> IdentifyTokenFile(const std::string& path, FileHashCache* cache);
// The identity of any other file (a task set): its sha256 and size.
absl::StatusOr<FileIdentity> IdentifyPlainFile(const std::string& path, FileHashCache* cache);

// The sha256 of a tokenizer's definition, from its spec (data/tokenizer.h): the bytes of a
// SentencePiece .model, of GPT-2's encoder.json and vocab.bpe, or the spec itself for "bytes" and
// "synth:N". Empty when a file it names cannot be read here.
std::string TokenizerSha256(const std::string& spec);

// nullopt when `actual` is the file `recorded` describes: the same bytes (sha256 and size) and,
// when both sides could read it, the same tokenizer. Otherwise what differs, both values named
// ("sha256 9f86… here, 1c2d… recorded; 2048 bytes here, 4096 recorded").
std::optional<std::string> IdentityMismatch(const FileIdentity& recorded,
                                            const FileIdentity& actual);

}  // namespace cart::data
