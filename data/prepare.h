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
  int64_t train_tokens = 0;  // of those, the training file's
};

struct PrepareOptions {
  std::vector<CorpusInput> inputs;  // read in order; at least one
  std::string tokenizer = "bytes";  // a Tokenizer::Load spec
  std::string out;                  // the training token file, NAME.bin
  std::vector<Holdout> holdouts;
  uint64_t seed = 0;             // of the fraction holdouts' draw
  int threads = 0;               // encoding threads; 0 = hardware threads
  size_t batch_bytes = 1 << 20;  // text per encoding batch; memory ≈ (2·threads+2) batches
  // > 0: the training file stops at exactly this many tokens (its last document cut short when
  // the cap falls inside one) and nothing more is read; the holdouts keep the documents read
  // until then. 0: every input to its end.
  int64_t max_tokens = 0;
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
  bool capped = false;                 // max_tokens stopped it before the inputs ended
  bool last_document_cut = false;      // the training file ends inside a document (no EOS)
};

// Streams every input document through the tokenizer (in parallel, bounded memory) and writes
// BOS + ids + EOS per document (BOS/EOS only when the tokenizer has them). Errors: those of
// Tokenizer::Load, DocumentReader ("PATH:LINE: problem") and TokenFileWriter; InvalidArgument
// for bad options. On error no output file is replaced.
absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options);

// What a dry run says a source will give (cart data prepare --source ... --dry-run): the tokens
// of the first `sample_bytes` of its documents, scaled to the whole source.
struct SourceEstimate {
  int64_t files = 0;         // after folders are expanded
  uint64_t input_bytes = 0;  // on disk
  int64_t sampled_documents = 0;
  uint64_t sampled_bytes = 0;  // text read
  int64_t sampled_tokens = 0;  // with BOS and EOS
  // The whole source's tokens: exact when the sample read everything, else scaled by rows
  // (Parquet: tokens per row of the sample x rows in the footers) or by content bytes (other
  // formats: tokens per byte of the sample x the files' sizes, a gzip file's scaled by its
  // compression ratio).
  int64_t tokens = 0;
  bool exact = false;
};
absl::StatusOr<SourceEstimate> EstimateTokens(const std::vector<CorpusInput>& inputs,
                                              const std::string& tokenizer, uint64_t sample_bytes);

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

// The paper's mixture from its corpora in one step (`cart data prepare --source`): each source's
// inputs are prepared into <out without .bin>.<name>.bin beside `out` (stopped at its
// max_tokens), then interleaved into `out` by BuildMixture with the sources' weights.
struct CorpusSource {
  std::string name;                 // letters, digits, '_', '-', '.'; unique
  std::vector<CorpusInput> inputs;  // files, or folders of Parquet shards
  int64_t weight = 1;               // chunks per cycle, >= 1
  int64_t max_tokens = 0;           // > 0: its file stops at this many tokens
};

struct SourceMixtureOptions {
  std::vector<CorpusSource> sources;  // at least one
  std::string tokenizer = "bytes";    // a Tokenizer::Load spec, shared by every source
  std::string out;                    // the mixture, NAME.bin
  int64_t chunk_tokens = kDefaultMixChunkTokens;
  int64_t max_tokens = 0;  // of the mixture; 0: until a source runs out
  int threads = 0;         // encoding threads; 0 = hardware threads
  // Called as each source is prepared (Prepare's progress, with the source's name).
  std::function<void(const std::string& source, const PrepareProgress&)> progress;
};

// The file a source is prepared into: <out without .bin>.<name>.bin.
std::string SourceFilePath(const std::string& out, const std::string& name);

struct PreparedSource {
  PreparedFile file;
  bool capped = false;  // its max_tokens stopped it before its inputs ended
};
struct SourceMixtureResult {
  std::vector<PreparedSource> sources;  // in the order given
  TokenFileInfo mixture;
};
// InvalidArgument for a bad or repeated name, a weight below 1 or a negative cap (naming the
// source); then the errors of Prepare and BuildMixture.
absl::StatusOr<SourceMixtureResult> PrepareSourceMixture(const SourceMixtureOptions& options);

// What PrepareSourceMixture would write, from EstimateTokens over each source (nothing written).
struct SourceMixturePlan {
  std::vector<SourceEstimate> estimates;  // per source, in order
  std::vector<int64_t> tokens;            // per source: min(estimate, max_tokens)
  int64_t mixture_tokens = 0;             // whole cycles, at most max_tokens
  int64_t bytes_per_token = 2;            // 2 (uint16) when the vocabulary fits, else 4
  uint64_t disk_bytes = 0;                // the sources' files and the mixture
};
absl::StatusOr<SourceMixturePlan> PlanSourceMixture(const SourceMixtureOptions& options,
                                                    uint64_t sample_bytes);

}  // namespace cart::data
