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

absl::StatusOr<PrepareResult> Prepare(const PrepareOptions& options) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("prepare: no input given");
  if (options.out.size() <= 4 || options.out.compare(options.out.size() - 4, 4, ".bin") != 0) {
    return absl::InvalidArgumentError(StrCat("--out ", options.out, " must end in .bin"));
  }
  CART_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(options.tokenizer));

  // Outputs: 0 = training file, then one per holdout beside it.
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

  // Resolve every input's format before any work, so that a missing file or an unreadable
  // Parquet file fails at once; the readers are opened one at a time later.
  uint64_t bytes_total = 0;
  std::vector<uint64_t> sizes;
  CART_ASSIGN_OR_RETURN(std::vector<CorpusInput> inputs, ExpandCorpusInputs(options.inputs));
  std::vector<std::string> sources;
  for (CorpusInput& in : inputs) {
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
    sizes.push_back(static_cast<uint64_t>(st.st_size));
    bytes_total += sizes.back();
    sources.push_back(StrCat(in.path, " (", CorpusFormatName(in.format), ")"));
  }

  std::vector<TokenFileWriter> writers;
  for (size_t i = 0; i < paths.size(); ++i) {
    TokenFileInfo meta;
    meta.tokenizer = tokenizer->spec();
    meta.vocab = tokenizer->vocab_size();
    meta.bos_id = tokenizer->bos_id();
    meta.eos_id = tokenizer->eos_id();
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

  // Producer state (touched only by the producer thread while the pipeline runs).
  size_t input_index = 0;
  std::unique_ptr<DocumentReader> reader;
  uint64_t bytes_before_reader = 0;
  int64_t ordinal = 0;  // documents started so far
  int current_dest = 0;
  DocumentPiece piece;
  const auto choose_dest = [&](int64_t doc) {
    int64_t counted = 0;
    for (size_t i = 0; i < options.holdouts.size(); ++i) {
      const Holdout& h = options.holdouts[i];
      if (h.documents > 0) {
        counted += h.documents;
        if (doc < counted) return static_cast<int>(i + 1);
      }
    }
    const double u =
        static_cast<double>(internal::Mix64(options.seed ^ internal::Mix64(doc)) >> 11) * 0x1.0p-53;
    double cum = 0;
    for (size_t i = 0; i < options.holdouts.size(); ++i) {
      const Holdout& h = options.holdouts[i];
      if (h.documents > 0) continue;
      cum += h.fraction;
      if (u < cum) return static_cast<int>(i + 1);
    }
    return 0;
  };
  // Set by consume once the training file holds max_tokens: the producer reads no further.
  std::atomic<bool> capped{false};
  const std::function<absl::StatusOr<std::optional<Batch>>()> produce =
      [&]() -> absl::StatusOr<std::optional<Batch>> {
    Batch batch;
    size_t bytes = 0;
    while (bytes < options.batch_bytes && !capped.load()) {
      if (reader == nullptr) {
        if (input_index == inputs.size()) break;
        CART_ASSIGN_OR_RETURN(reader, DocumentReader::Open(inputs[input_index]));
      }
      CART_ASSIGN_OR_RETURN(bool got, reader->Next(&piece));
      if (!got) {
        bytes_before_reader += sizes[input_index];
        reader.reset();
        ++input_index;
        continue;
      }
      if (piece.first) current_dest = choose_dest(ordinal++);
      bytes += piece.text.size();
      batch.pieces.push_back(Piece{std::move(piece.text), piece.first, piece.last, current_dest});
    }
    if (batch.pieces.empty()) return std::nullopt;
    batch.bytes_done = bytes_before_reader + (reader != nullptr ? reader->bytes_consumed() : 0);
    return batch;
  };
  const size_t dests = paths.size();
  const int64_t bos = tokenizer->bos_id(), eos = tokenizer->eos_id();
  const std::function<Encoded(Batch&)> work = [&](Batch& batch) {
    Encoded enc;
    enc.ids.resize(dests);
    enc.documents.assign(dests, 0);
    enc.bytes_done = batch.bytes_done;
    for (const Piece& p : batch.pieces) {
      std::vector<int64_t>& out = enc.ids[p.dest];
      if (p.first && bos >= 0) out.push_back(bos);
      const std::vector<int64_t> ids = tokenizer->Encode(p.text);
      out.insert(out.end(), ids.begin(), ids.end());
      if (p.last) {
        if (eos >= 0) out.push_back(eos);
        ++enc.documents[p.dest];
        if (p.dest == 0) enc.train_ends.push_back(static_cast<int64_t>(out.size()));
      }
    }
    return enc;
  };
  PrepareProgress progress;
  progress.bytes_total = bytes_total;
  std::vector<int64_t> documents(dests, 0);
  bool cut = false;  // the cap fell inside a document, which the file then ends with
  const std::function<absl::Status(Encoded&)> consume = [&](Encoded& enc) -> absl::Status {
    // With a cap, the batch that reaches it is the last one written (the holdouts get its
    // documents too): which batches those are depends on batch_bytes only, never on threads or
    // timing, so the outputs are the same on every run.
    if (capped.load()) return absl::OkStatus();
    if (options.max_tokens > 0) {
      const int64_t room = options.max_tokens - progress.train_tokens;
      if (static_cast<int64_t>(enc.ids[0].size()) >= room) {
        enc.ids[0].resize(static_cast<size_t>(room));
        enc.documents[0] = std::count_if(enc.train_ends.begin(), enc.train_ends.end(),
                                         [room](int64_t end) { return end <= room; });
        cut =
            std::find(enc.train_ends.begin(), enc.train_ends.end(), room) == enc.train_ends.end() &&
            room > 0;
        capped.store(true);
      }
    }
    progress.train_tokens += static_cast<int64_t>(enc.ids[0].size());
    for (size_t d = 0; d < dests; ++d) {
      CART_RETURN_IF_ERROR(writers[d].Append(enc.ids[d]));
      documents[d] += enc.documents[d];
      progress.documents += enc.documents[d];
      progress.tokens += static_cast<int64_t>(enc.ids[d].size());
    }
    progress.bytes_done = enc.bytes_done;
    if (options.progress) options.progress(progress);
    return absl::OkStatus();
  };
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  CART_RETURN_IF_ERROR((internal::RunOrderedPipeline<Batch, Encoded>(threads, 2 * threads + 2,
                                                                     produce, work, consume)));
  if (!capped.load()) progress.bytes_done = bytes_total;
  if (options.progress) options.progress(progress);

  // Holdouts that got no document would be silently empty validation sets.
  for (size_t i = 0; i < options.holdouts.size(); ++i) {
    if (documents[i + 1] == 0) {
      return absl::InvalidArgumentError(
          StrCat("holdout ", options.holdouts[i].name, " received no document (", ordinal,
                 " documents in all); raise its fraction or give a count"));
    }
  }
  if (documents[0] == 0) {
    return absl::InvalidArgumentError(
        StrCat("the holdouts took all ", ordinal, " documents; none is left for ", options.out));
  }
  PrepareResult result;
  result.capped = capped.load();
  result.last_document_cut = cut;
  for (size_t d = 0; d < dests; ++d) {
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
