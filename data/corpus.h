#pragma once

// Reading documents out of text corpora. Every input may be gzip-compressed (detected by its
// magic bytes, whatever its name). Formats:
//   text         the whole file is one document
//   lines        every non-blank line is one document
//   tinystories  documents separated by "<|endoftext|>" (the TinyStories .txt layout: the marker
//                on a line of its own); surrounding blank lines are trimmed from each document
//   jsonl        JSON Lines: one object per line, the document in a string field ("text")
//   parquet      Apache Parquet: each row of a string column ("text") is a document (snappy,
//                zstd, gzip, ... as Arrow reads them); needs a build with Arrow (CART_WITH_PARQUET,
//                internal/parquet_reader.h); without it the error says how to convert.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart::data {

enum class CorpusFormat { kAuto, kText, kLines, kTinyStories, kJsonl, kParquet };

std::string CorpusFormatName(CorpusFormat format);  // "auto", "text", "lines", ...
// InvalidArgument listing the allowed names for anything else.
absl::StatusOr<CorpusFormat> ParseCorpusFormat(std::string_view name);

// How to get Parquet read (a build with Arrow) or convert it to JSON Lines, quoted in the error
// for Parquet inputs in a build without Arrow.
extern const char kParquetConversionHint[];

struct CorpusInput {
  std::string path;
  CorpusFormat format = CorpusFormat::kAuto;
  std::string text_field = "text";  // jsonl: the field, parquet: the column holding the document
};

// The format of a file by its name, then its content: ".parquet" (or a PAR1 header) is parquet;
// ".jsonl"/".ndjson"/".json" (before any ".gz") is jsonl; otherwise the first
// 64 KiB decide: a "<|endoftext|>" marker means tinystories, a first line that is a JSON object
// means jsonl, anything else is text. NotFound when the file does not exist.
absl::StatusOr<CorpusFormat> DetectCorpusFormat(const std::string& path);

// The inputs with every directory replaced by the Parquet files under it (recursively, sorted by
// path: the Hugging Face layout data/train-00000-of-00041.parquet reads in shard order), each
// with the directory's format and text field. InvalidArgument naming a directory that holds no
// .parquet file.
absl::StatusOr<std::vector<CorpusInput>> ExpandCorpusInputs(const std::vector<CorpusInput>& inputs);

// A piece of a document. Whole documents are yielded as one piece, except that a document
// larger than DocumentReader::kMaxPieceBytes is split (at a line end when there is one) so that
// no document needs to fit in memory; `first`/`last` tell where documents begin and end.
struct DocumentPiece {
  std::string text;
  bool first = true;
  bool last = true;
  int64_t line = 0;  // 1-based line in the file where the piece starts
};

// Streams the documents of one input. Not thread-safe.
class DocumentReader {
 public:
  static constexpr size_t kMaxPieceBytes = 1 << 20;

  // Resolves kAuto with DetectCorpusFormat. NotFound / Unimplemented (Parquet in a build without
  // Arrow) / a filesystem error, each naming the path.
  static absl::StatusOr<std::unique_ptr<DocumentReader>> Open(const CorpusInput& input);
  virtual ~DocumentReader() = default;

  // Fills *piece with the next non-empty piece and returns true, or returns false at the end.
  // InvalidArgument "PATH:LINE: problem" for malformed input (bad JSON, a missing or non-string
  // field); DataLoss for a corrupt gzip stream.
  virtual absl::StatusOr<bool> Next(DocumentPiece* piece) = 0;

  virtual CorpusFormat format() const = 0;
  // Bytes of the file (compressed, when it is) consumed so far, and its size: for progress.
  virtual uint64_t bytes_consumed() const = 0;
  virtual uint64_t file_bytes() const = 0;
  // How many rows the file holds when its format says so without reading them (Parquet's
  // footer; null rows included); -1 otherwise.
  virtual int64_t rows_total() const { return -1; }
  // Line-based formats: the file's content (uncompressed) read so far, and its size (exact for a
  // plain file; for gzip, the file size scaled by the compression ratio seen so far). 0 for
  // Parquet, whose estimates go by rows.
  virtual uint64_t content_consumed() const { return 0; }
  virtual uint64_t content_total() const { return 0; }
};

}  // namespace cart::data
