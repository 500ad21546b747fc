#pragma once

// Flat token files: NAME.bin holds the token ids of a corpus back to back (little-endian uint16
// or uint32, no header); NAME.json beside it holds the metadata (TokenFileInfo). Documents are
// stored as BOS + ids + EOS when the tokenizer has those ids (docs/model.md §6).
//
// Example NAME.json:
//   {"format": "cart-tokens/1", "tokenizer": "bytes", "vocab": 258, "tokens": 1234,
//    "dtype": "uint16", "sha256": "9f86…", "sources": ["corpus.txt (tinystories)"],
//    "bos_id": 256, "eos_id": 257}
// Synthetic sources add "entropy_rate_nats".

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart::data {

struct TokenFileInfo {
  // How to load the tokenizer again (Tokenizer::Load): "bytes", a SentencePiece .model path,
  // "gpt2:<dir>" (dir holding encoder.json + vocab.bpe) or "synth:<vocab>" (synthetic ids).
  std::string tokenizer;
  int64_t vocab = 0;                 // ids are 0..vocab-1
  int64_t tokens = 0;                // token count in the .bin
  std::string dtype;                 // "uint16" or "uint32"
  std::string sha256;                // of the .bin bytes, lowercase hex
  std::vector<std::string> sources;  // human-readable provenance, one entry per input
  int64_t bos_id = -1, eos_id = -1;  // -1 when the tokenizer has none
  // Synthetic sources only: the exact entropy rate of the generating process, nats/token.
  std::optional<double> entropy_rate_nats;
};

// "uint16" when vocab <= 65536, else "uint32".
std::string DtypeForVocab(int64_t vocab);
// Bytes per token of a dtype name; 0 for an unknown name.
int BytesPerToken(const std::string& dtype);

// The metadata path of a token file: "x/NAME.bin" -> "x/NAME.json" (any other name: + ".json").
std::string MetadataPath(const std::string& bin_path);

// Reads NAME.json. NotFound when missing; InvalidArgument naming the path and the field for bad
// JSON, a missing or mistyped field, or an unknown dtype.
absl::StatusOr<TokenFileInfo> ReadTokenFileInfo(const std::string& json_path);
// The same for the text of a NAME.json; errors name `json_path`.
absl::StatusOr<TokenFileInfo> ParseTokenFileInfo(std::string_view text,
                                                 const std::string& json_path);
// The JSON text of `info` (what TokenFileWriter writes).
std::string TokenFileInfoToJson(const TokenFileInfo& info);

// A token file, memory-mapped read-only. Read is thread-safe; the object is movable, not
// copyable, and unmaps on destruction.
class TokenFile {
 public:
  // NotFound when NAME.bin or NAME.json is missing; InvalidArgument when the .bin size is not
  // tokens × bytes-per-token or the metadata is bad. Messages name the path.
  static absl::StatusOr<TokenFile> Open(const std::string& bin_path);

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const TokenFileInfo& info() const { return info_; }
  const std::string& path() const { return path_; }
  int64_t size() const { return info_.tokens; }  // tokens

  // Copies tokens [start, start + n) into out (widened to int64). OutOfRange when start < 0,
  // n < 0 or start + n > size().
  absl::Status Read(int64_t start, int64_t n, int64_t* out) const;

  // Recomputes the sha256 of the .bin; DataLoss naming the path when it differs from the
  // metadata.
  absl::Status Verify() const;

 private:
  TokenFile() = default;
  void Unmap();

  std::string path_;
  TokenFileInfo info_;
  const uint8_t* data_ = nullptr;  // mapping of the whole .bin; null when empty
  size_t mapped_bytes_ = 0;
  int bytes_per_token_ = 2;
};

// Writes a token file and its metadata atomically: tokens go to a temporary file beside the
// target, the sha256 is computed as they are written, and Finish() fsyncs, then renames the .bin
// and then the .json into place. A writer destroyed before Finish() removes its temporary files
// and leaves any existing NAME.bin untouched. Not thread-safe; movable, not copyable.
class TokenFileWriter {
 public:
  // `meta` supplies tokenizer, vocab (required, > 0), sources, bos_id, eos_id and
  // entropy_rate_nats; tokens, dtype and sha256 are filled in by the writer. InvalidArgument for
  // vocab <= 0 or a path not ending in ".bin"; a filesystem error (with the path) when the
  // temporary file cannot be created. Missing parent directories are created.
  static absl::StatusOr<TokenFileWriter> Create(const std::string& bin_path, TokenFileInfo meta);

  TokenFileWriter(TokenFileWriter&& other) noexcept;
  TokenFileWriter& operator=(TokenFileWriter&& other) noexcept;
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  ~TokenFileWriter();

  // Appends ids; InvalidArgument (nothing written) when an id is outside [0, vocab).
  absl::Status Append(const int64_t* ids, int64_t n);
  absl::Status Append(const std::vector<int64_t>& ids) {
    return Append(ids.data(), static_cast<int64_t>(ids.size()));
  }
  int64_t tokens() const;
  const std::string& path() const;

  // Flushes, fsyncs and renames into place; returns the metadata as written. The writer is
  // spent afterwards (further calls return FailedPrecondition).
  absl::StatusOr<TokenFileInfo> Finish();

 private:
  struct State;
  explicit TokenFileWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace cart::data
