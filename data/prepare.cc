#include "data/prepare.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <numeric>
#include <set>
#include <thread>

#include "common/status.h"
#include "common/strings.h"
#include "data/internal/ordered_pipeline.h"
#include "data/internal/random.h"
#include "data/tokenizer.h"

namespace cart::data {
namespace {

bool ValidName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

struct Piece {
  std::string text;
  bool first = true;
  bool last = true;
  int dest = 0;  // 0 = training file, i = holdout i-1
};

struct Batch {
  std::vector<Piece> pieces;
  uint64_t bytes_done = 0;
};

struct Encoded {
  std::vector<std::vector<int64_t>> ids;  // per destination
  std::vector<int64_t> documents;         // documents finished, per destination
  std::vector<int64_t> train_ends;        // where each document finished in ids[0] ends
  uint64_t bytes_done = 0;
};

}  // namespace

absl::StatusOr<Holdout> ParseHoldout(std::string_view spec) {
  const size_t eq = spec.find('=');
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("--val \"", spec, "\": ", why,
               "; expected NAME=FRACTION (0 < f < 1, e.g. val=0.01) or NAME=COUNT (documents, "
               "e.g. val=500)"));
  };
  if (eq == std::string_view::npos) return bad("no '='");
  Holdout h;
  h.name = std::string(Trim(spec.substr(0, eq)));
  if (!ValidName(h.name)) return bad("NAME may use letters, digits, '_', '-', '.'");
  const std::string_view value = Trim(spec.substr(eq + 1));
  if (value.find_first_of(".eE") == std::string_view::npos) {
    std::optional<int64_t> n = ParseInt64(value);
    if (!n || *n < 1) return bad("COUNT must be an integer >= 1");
    h.documents = *n;
  } else {
    std::optional<double> f = ParseDouble(value);
    if (!f || !(*f > 0 && *f < 1)) return bad("FRACTION must be in (0, 1)");
    h.fraction = *f;
  }
  return h;
}

namespace {

// Prepare's outputs: the training file, then one per holdout beside it. InvalidArgument for an
// --out without .bin, a bad or clashing holdout, or fractions adding up to 1 or more.
absl::StatusOr<std::vector<std::string>> OutputPaths(const PrepareOptions& options) {
  if (options.out.size() <= 4 || options.out.compare(options.out.size() - 4, 4, ".bin") != 0) {
    return absl::InvalidArgumentError(StrCat("--out ", options.out, " must end in .bin"));
  }
  const std::filesystem::path out_dir = std::filesystem::path(options.out).parent_path();
  std::vector<std::string> paths = {options.out};
  std::set<std::string> seen = {std::filesystem::path(options.out).lexically_normal().string()};
  double fraction_sum = 0;
  for (const Holdout& h : options.holdouts) {
    if (!ValidName(h.name)) {
      return absl::InvalidArgumentError(StrCat(
          "holdout name \"", h.name, "\" is not valid; allowed: letters, digits, '_', '-', '.'"));
    }
    if (h.documents <= 0 && !(h.fraction > 0 && h.fraction < 1)) {
      return absl::InvalidArgumentError(
          StrCat("holdout ", h.name, ": give a fraction in (0, 1) or a document count >= 1"));
    }
    if (h.documents <= 0) fraction_sum += h.fraction;
    const std::string path = (out_dir / (h.name + ".bin")).string();
    if (!seen.insert(std::filesystem::path(path).lexically_normal().string()).second) {
      return absl::InvalidArgumentError(
          StrCat("holdout ", h.name, " would write ", path, ", which another output already uses"));
    }
    paths.push_back(path);
  }
  if (fraction_sum >= 1) {
    return absl::InvalidArgumentError(
        StrCat("holdout fractions add up to ", fraction_sum, "; allowed: < 1"));
  }
  return paths;
}

struct ResolvedInputs {
  std::vector<CorpusInput> files;  // folders expanded, every format known
  std::vector<uint64_t> sizes;     // bytes on disk, per file
  uint64_t bytes_total = 0;
  std::vector<std::string> sources;  // "PATH (FORMAT)", the token files' provenance
};

// Every input resolved before any work, so that a missing file or an unreadable Parquet file
// fails at once; the readers are opened one at a time later.
absl::StatusOr<ResolvedInputs> ResolveInputs(const std::vector<CorpusInput>& inputs) {
  ResolvedInputs out;
  CART_ASSIGN_OR_RETURN(out.files, ExpandCorpusInputs(inputs));
  for (CorpusInput& in : out.files) {
    if (in.format == CorpusFormat::kAuto) {
      CART_ASSIGN_OR_RETURN(in.format, DetectCorpusFormat(in.path));
    }
    if (in.format == CorpusFormat::kParquet) {  // its footer and column, checked now
      CART_RETURN_IF_ERROR(DocumentReader::Open(in).status());
    }
    struct stat st;
    if (::stat(in.path.c_str(), &st) != 0) {
      return absl::NotFoundError(StrCat("input ", in.path, " does not exist"));
    }
    out.sizes.push_back(static_cast<uint64_t>(st.st_size));
    out.bytes_total += out.sizes.back();
    out.sources.push_back(StrCat(in.path, " (", CorpusFormatName(in.format), ")"));
  }
  return out;
}

// One writer per output, each with its provenance.
absl::StatusOr<std::vector<TokenFileWriter>> OpenWriters(const PrepareOptions& options,
                                                         const std::vector<std::string>& paths,
                                                         const Tokenizer& tokenizer,
                                                         const std::vector<std::string>& sources) {
  std::vector<TokenFileWriter> writers;
  for (size_t i = 0; i < paths.size(); ++i) {
    TokenFileInfo meta;
    meta.tokenizer = tokenizer.spec();
    meta.vocab = tokenizer.vocab_size();
    meta.bos_id = tokenizer.bos_id();
    meta.eos_id = tokenizer.eos_id();
    meta.sources = sources;
    if (i == 0 && !options.holdouts.empty()) {
      meta.sources.push_back(StrCat("minus holdouts (seed ", options.seed, ")"));
    } else if (i > 0) {
      const Holdout& h = options.holdouts[i - 1];
      meta.sources.push_back(
          h.documents > 0 ? StrCat("holdout ", h.name, ": the first ", h.documents, " documents")
                          : StrCat("holdout ", h.name, ": fraction ", h.fraction,
                                   " of documents, seed ", options.seed));
    }
    CART_ASSIGN_OR_RETURN(TokenFileWriter w, TokenFileWriter::Create(paths[i], meta));
    writers.push_back(std::move(w));
  }
  return writers;
}

// The encoding pipeline (internal/ordered_pipeline.h): Produce reads documents into batches and
// draws each document's destination, Work encodes a batch on a pool thread, Consume writes the
// batches in order and applies the token cap.
class Pipeline {
 public:
  Pipeline(const PrepareOptions& options, const ResolvedInputs& inputs, const Tokenizer& tokenizer,
           std::vector<TokenFileWriter>& writers)
      : options_(options),
        inputs_(inputs),
        tokenizer_(tokenizer),
        writers_(writers),
        documents_(writers.size(), 0) {
    progress_.bytes_total = inputs.bytes_total;
  }

  absl::Status Run() {
    const int threads = options_.threads > 0
                            ? options_.threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const std::function<absl::StatusOr<std::optional<Batch>>()> produce = [this] {
      return Produce();
    };
    const std::function<Encoded(Batch&)> work = [this](Batch& batch) { return Work(batch); };
    const std::function<absl::Status(Encoded&)> consume = [this](Encoded& enc) {
      return Consume(enc);
    };
    CART_RETURN_IF_ERROR((internal::RunOrderedPipeline<Batch, Encoded>(threads, 2 * threads + 2,
                                                                       produce, work, consume)));
    if (!capped_.load()) progress_.bytes_done = inputs_.bytes_total;
    if (options_.progress) options_.progress(progress_);
    return absl::OkStatus();
  }

  const std::vector<int64_t>& documents() const { return documents_; }
  int64_t documents_read() const { return ordinal_; }
  bool capped() const { return capped_.load(); }
  bool cut() const { return cut_; }

 private:
  // The destination of document `doc`: count holdouts take the first documents in the order
  // given, fraction holdouts a hash draw of (seed, doc), the training file (0) the rest.
  int ChooseDest(int64_t doc) const {
    int64_t counted = 0;
    for (size_t i = 0; i < options_.holdouts.size(); ++i) {
      const Holdout& h = options_.holdouts[i];
      if (h.documents > 0) {
        counted += h.documents;
        if (doc < counted) return static_cast<int>(i + 1);
      }
    }
    const double u =
        static_cast<double>(internal::Mix64(options_.seed ^ internal::Mix64(doc)) >> 11) *
        0x1.0p-53;
    double cum = 0;
    for (size_t i = 0; i < options_.holdouts.size(); ++i) {
      const Holdout& h = options_.holdouts[i];
      if (h.documents > 0) continue;
      cum += h.fraction;
      if (u < cum) return static_cast<int>(i + 1);
    }
    return 0;
  }

  absl::StatusOr<std::optional<Batch>> Produce() {
    Batch batch;
    size_t bytes = 0;
    while (bytes < options_.batch_bytes && !capped_.load()) {
      if (reader_ == nullptr) {
        if (input_index_ == inputs_.files.size()) break;
        CART_ASSIGN_OR_RETURN(reader_, DocumentReader::Open(inputs_.files[input_index_]));
      }
      CART_ASSIGN_OR_RETURN(bool got, reader_->Next(&piece_));
      if (!got) {
        bytes_before_reader_ += inputs_.sizes[input_index_];
        reader_.reset();
        ++input_index_;
        continue;
      }
      if (piece_.first) current_dest_ = ChooseDest(ordinal_++);
      bytes += piece_.text.size();
      batch.pieces.push_back(
          Piece{std::move(piece_.text), piece_.first, piece_.last, current_dest_});
    }
    if (batch.pieces.empty()) return std::nullopt;
    batch.bytes_done = bytes_before_reader_ + (reader_ != nullptr ? reader_->bytes_consumed() : 0);
    return batch;
  }

  Encoded Work(const Batch& batch) const {
    const int64_t bos = tokenizer_.bos_id(), eos = tokenizer_.eos_id();
    Encoded enc;
    enc.ids.resize(writers_.size());
    enc.documents.assign(writers_.size(), 0);
    enc.bytes_done = batch.bytes_done;
    for (const Piece& p : batch.pieces) {
      std::vector<int64_t>& out = enc.ids[p.dest];
      if (p.first && bos >= 0) out.push_back(bos);
      const std::vector<int64_t> ids = tokenizer_.Encode(p.text);
      out.insert(out.end(), ids.begin(), ids.end());
      if (p.last) {
        if (eos >= 0) out.push_back(eos);
        ++enc.documents[p.dest];
        if (p.dest == 0) enc.train_ends.push_back(static_cast<int64_t>(out.size()));
      }
    }
    return enc;
  }

  absl::Status Consume(Encoded& enc) {
    // With a cap, the batch that reaches it is the last one written (the holdouts get its
    // documents too): which batches those are depends on batch_bytes only, never on threads or
    // timing, so the outputs are the same on every run.
    if (capped_.load()) return absl::OkStatus();
    if (options_.max_tokens > 0) {
      const int64_t room = options_.max_tokens - progress_.train_tokens;
      if (static_cast<int64_t>(enc.ids[0].size()) >= room) {
        enc.ids[0].resize(static_cast<size_t>(room));
        enc.documents[0] = std::count_if(enc.train_ends.begin(), enc.train_ends.end(),
                                         [room](int64_t end) { return end <= room; });
        cut_ = room > 0 && std::find(enc.train_ends.begin(), enc.train_ends.end(), room) ==
                               enc.train_ends.end();
        capped_.store(true);
      }
    }
    progress_.train_tokens += static_cast<int64_t>(enc.ids[0].size());
    for (size_t d = 0; d < writers_.size(); ++d) {
      CART_RETURN_IF_ERROR(writers_[d].Append(enc.ids[d]));
      documents_[d] += enc.documents[d];
      progress_.documents += enc.documents[d];
      progress_.tokens += static_cast<int64_t>(enc.ids[d].size());
    }
    progress_.bytes_done = enc.bytes_done;
    if (options_.progress) options_.progress(progress_);
    return absl::OkStatus();
  }

  // Constant after construction.
  const PrepareOptions& options_;
  const ResolvedInputs& inputs_;
  const Tokenizer& tokenizer_;
  std::vector<TokenFileWriter>& writers_;
  // Produce's (the producer thread's while the pipeline runs).
  size_t input_index_ = 0;
  std::unique_ptr<DocumentReader> reader_;
  uint64_t bytes_before_reader_ = 0;
  int64_t ordinal_ = 0;  // documents started so far
  int current_dest_ = 0;
  DocumentPiece piece_;
  // Set by Consume once the training file holds max_tokens: Produce reads no further.
  std::atomic<bool> capped_{false};
  // Consume's (the calling thread's).
  PrepareProgress progress_;
  std::vector<int64_t> documents_;  // per destination
  bool cut_ = false;                // the cap fell inside a document, which the file then ends with
};

}  // namespace

absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("prepare: no input given");
  CART_ASSIGN_OR_RETURN(std::vector<std::string> paths, OutputPaths(options));
  CART_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(options.tokenizer));
  CART_ASSIGN_OR_RETURN(ResolvedInputs inputs, ResolveInputs(options.inputs));
  CART_ASSIGN_OR_RETURN(std::vector<TokenFileWriter> writers,
                        OpenWriters(options, paths, *tokenizer, inputs.sources));
  Pipeline pipeline(options, inputs, *tokenizer, writers);
  CART_RETURN_IF_ERROR(pipeline.Run());

  // Holdouts that got no document would be silently empty validation sets.
  const std::vector<int64_t>& documents = pipeline.documents();
  for (size_t i = 0; i < options.holdouts.size(); ++i) {
    if (documents[i + 1] == 0) {
      return absl::InvalidArgumentError(StrCat("holdout ", options.holdouts[i].name,
                                               " received no document (", pipeline.documents_read(),
                                               " documents in all); raise its fraction or give a "
                                               "count"));
    }
  }
  if (documents[0] == 0) {
    return absl::InvalidArgumentError(StrCat("the holdouts took all ", pipeline.documents_read(),
                                             " documents; none is left for ", options.out));
  }
  PrepareResult result;
  result.capped = pipeline.capped();
  result.last_document_cut = pipeline.cut();
  for (size_t d = 0; d < paths.size(); ++d) {
    PreparedFile file;
    file.path = paths[d];
    file.documents = documents[d];
    CART_ASSIGN_OR_RETURN(file.info, writers[d].Finish());
    (d == 0 ? result.train : result.holdouts.emplace_back()) = std::move(file);
  }
  return result;
}

absl::StatusOr<SourceEstimate> EstimateTokens(const std::vector<CorpusInput>& inputs,
                                              const std::string& tokenizer_spec,
                                              uint64_t sample_bytes) {
  CART_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(tokenizer_spec));
  CART_ASSIGN_OR_RETURN(std::vector<CorpusInput> files, ExpandCorpusInputs(inputs));
  SourceEstimate est;
  est.files = static_cast<int64_t>(files.size());
  uint64_t sampled_content = 0;  // content bytes the sample consumed (non-Parquet files)
  int64_t sampled_rows = 0;      // documents of the sample from Parquet files
  int64_t parquet_tokens = 0;    // tokens of those
  int64_t rows_total = 0;        // rows in every Parquet footer
  uint64_t other_content = 0;    // content bytes of the other files
  bool read_all = true;
  DocumentPiece piece;
  for (const CorpusInput& in : files) {
    CART_ASSIGN_OR_RETURN(std::unique_ptr<DocumentReader> reader, DocumentReader::Open(in));
    est.input_bytes += reader->file_bytes();
    const bool parquet = reader->rows_total() >= 0;
    if (parquet) rows_total += reader->rows_total();
    if (est.sampled_bytes >= sample_bytes) {
      read_all = false;
      if (!parquet) other_content += reader->content_total();
      continue;  // only the footer or the size of the rest
    }
    bool more = true;
    while (est.sampled_bytes < sample_bytes) {
      CART_ASSIGN_OR_RETURN(more, reader->Next(&piece));
      if (!more) break;
      const int64_t tokens = static_cast<int64_t>(tokenizer->Encode(piece.text).size()) +
                             (piece.first && tokenizer->bos_id() >= 0) +
                             (piece.last && tokenizer->eos_id() >= 0);
      est.sampled_tokens += tokens;
      est.sampled_bytes += piece.text.size();
      est.sampled_documents += piece.last;
      if (parquet) {
        sampled_rows += 1;
        parquet_tokens += tokens;
      }
    }
    if (more) read_all = false;
    if (!parquet) {  // after the sample: a gzip file's ratio is the one of what was read
      sampled_content += reader->content_consumed();
      other_content += reader->content_total();
    }
  }
  est.exact = read_all;
  if (read_all) {
    est.tokens = est.sampled_tokens;
    return est;
  }
  double tokens = 0;
  if (rows_total > 0 && sampled_rows > 0) {
    tokens += static_cast<double>(parquet_tokens) / static_cast<double>(sampled_rows) *
              static_cast<double>(rows_total);
  }
  const int64_t other_tokens = est.sampled_tokens - parquet_tokens;
  if (other_content > 0 && sampled_content > 0) {
    tokens += static_cast<double>(other_tokens) / static_cast<double>(sampled_content) *
              static_cast<double>(other_content);
  }
  est.tokens = static_cast<int64_t>(tokens + 0.5);
  return est;
}

}  // namespace cart::data
