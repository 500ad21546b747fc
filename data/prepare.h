#pragma once

// `cart data prepare`: corpora -> flat token files (docs/model.md §6), and the paper's
// interleaved mixture of several token files.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/corpus.h"
#include "data/token_file.h"

namespace cart::data {

// A named validation set held out of the documents being prepared. Count holdouts take the
// first documents of the stream, in the order they are given; fraction holdouts then draw each
// remaining document independently with their probability, from a hash of (seed, document
// ordinal), so the split does not depend on threads or batch sizes. A document goes to at most
// one holdout, and to the training file otherwise.
struct Holdout {
  std::string name;       // written to <directory of out>/<name>.bin
  double fraction = 0;    // in (0, 1); used when documents == 0
  int64_t documents = 0;  // > 0: this many documents
};

// Parses "NAME=FRACTION_OR_COUNT": "val=0.01" (a fraction: has a '.' or an exponent, in (0, 1))
// or "val=500" (a document count, >= 1). NAME: letters, digits, '_', '-', '.'.
absl::StatusOr<Holdout> ParseHoldout(std::string_view spec);

struct PrepareProgress {
  uint64_t bytes_done = 0;   // input bytes read (compressed bytes for gzip inputs)
  uint64_t bytes_total = 0;  // total input size on disk
  int64_t documents = 0;     // documents finished
  int64_t tokens = 0;        // tokens written, all outputs together
};

struct PrepareOptions {
  std::vector<CorpusInput> inputs;  // read in order; at least one
  std::string tokenizer = "bytes";  // a Tokenizer::Load spec
  std::string out;                  // the training token file, NAME.bin
  std::vector<Holdout> holdouts;
  uint64_t seed = 0;             // of the fraction holdouts' draw
  int threads = 0;               // encoding threads; 0 = hardware threads
  size_t batch_bytes = 1 << 20;  // text per encoding batch; memory ≈ (2·threads+2) batches
  // Called on the calling thread after each batch is written, and once at the end.
  std::function<void(const PrepareProgress&)> progress;
};

struct PreparedFile {
  std::string path;
  TokenFileInfo info;
  int64_t documents = 0;
};

struct PrepareResult {
  PreparedFile train;
  std::vector<PreparedFile> holdouts;  // in the order given
};

// Streams every input document through the tokenizer (in parallel, bounded memory) and writes
// BOS + ids + EOS per document (BOS/EOS only when the tokenizer has them). Errors: those of
// Tokenizer::Load, DocumentReader ("PATH:LINE: problem") and TokenFileWriter; InvalidArgument
// for bad options. On error no output file is replaced.
absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options);

// One source of a mixture.
struct MixSource {
  std::string name;    // e.g. "tiny"
  std::string path;    // a token file
  int64_t weight = 1;  // chunks per cycle, >= 1
};

// Parses "tiny=a.bin:3,wiki=b.bin:3,edu=c.bin:4" (weight defaults to 1 when ":W" is left out).
absl::StatusOr<std::vector<MixSource>> ParseMixSpec(std::string_view spec);

// The chunk size of the author's reference data loader, which interleaves 512-token chunks.
inline constexpr int64_t kDefaultMixChunkTokens = 512;

struct MixOptions {
  std::vector<MixSource> sources;                 // at least one; same tokenizer and vocab
  int64_t chunk_tokens = kDefaultMixChunkTokens;  // tokens per chunk, >= 1
  std::string out;                                // NAME.bin
  int64_t max_tokens = 0;  // stop after this many tokens; 0 = until a source runs out
};

// The paper's interleaved mixture: with weights reduced by their greatest common divisor to
// w_1..w_n, each cycle takes w_1 chunks of chunk_tokens from source 1, then w_2 from source 2,
// and so on (30/30/40 with three sources gives [t,t,t,w,w,w,f,f,f,f]); every source is read
// from its start, in order. Stops before the first chunk a source can no longer fill, so the
// proportions are exact, or at max_tokens (the last chunk cut short). InvalidArgument when the
// sources' tokenizers, vocabularies or BOS/EOS differ (naming both files).
absl::StatusOr<TokenFileInfo> BuildMixture(const MixOptions& options);

}  // namespace cart::data
