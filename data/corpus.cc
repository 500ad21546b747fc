#include "data/corpus.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "data/internal/parquet_reader.h"

namespace cart::data {

const char kParquetConversionHint[] =
    "Build with Parquet support (Apache Arrow: data/CMakeLists.txt, CART_WITH_PARQUET), or convert "
    "the file to JSON Lines on a machine with pyarrow (pip install pyarrow): python3 -c \"import "
    "pyarrow.parquet as pq, "
    "sys; pq.read_table(sys.argv[1], columns=['text']).to_pandas().to_json(sys.argv[2], "
    "orient='records', lines=True)\" IN.parquet OUT.jsonl  (or with DuckDB: duckdb -c \"COPY "
    "(SELECT text FROM 'IN.parquet') TO 'OUT.jsonl' (FORMAT JSON)\"), then prepare OUT.jsonl";

namespace {

constexpr char kEndOfText[] = "<|endoftext|>";
constexpr size_t kSniffBytes = 64 << 10;
constexpr size_t kMaxJsonLineBytes = size_t{1} << 30;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A gzip file's trailer size (ISIZE: the content size modulo 2^32); -1 when the file does not
// start with gzip's magic bytes or cannot be read.
int64_t GzipTrailerSize(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return -1;
  unsigned char head[2] = {0, 0}, tail[4] = {0, 0, 0, 0};
  const bool gzip = std::fread(head, 1, 2, f) == 2 && head[0] == 0x1f && head[1] == 0x8b &&
                    std::fseek(f, -4, SEEK_END) == 0 && std::fread(tail, 1, 4, f) == 4;
  std::fclose(f);
  if (!gzip) return -1;
  return static_cast<int64_t>(tail[0]) | static_cast<int64_t>(tail[1]) << 8 |
         static_cast<int64_t>(tail[2]) << 16 | static_cast<int64_t>(tail[3]) << 24;
}

// Lines of a file through zlib, which reads gzip and plain files alike.
class LineSource {
 public:
  static absl::StatusOr<std::unique_ptr<LineSource>> Open(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return absl::NotFoundError(StrCat("input ", path, " does not exist"));
      return absl::PermissionDeniedError(StrCat("cannot stat ", path, ": ", std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(StrCat("input ", path, " is a directory; give files"));
    }
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) {
      return absl::PermissionDeniedError(StrCat("cannot open ", path, ": ", std::strerror(errno)));
    }
    gzbuffer(f, 1 << 20);
    auto src = std::unique_ptr<LineSource>(new LineSource(path, f));
    src->file_bytes_ = static_cast<uint64_t>(st.st_size);
    src->gzip_isize_ = GzipTrailerSize(path);
    return src;
  }
  ~LineSource() { gzclose(file_); }

  // Reads the next line, without its '\n', but at most `max` bytes of it. Returns false at the
  // end of the file. *newline says whether the line ended with '\n'; a line cut at `max` bytes
  // continues in the next call (with the same line number).
  absl::StatusOr<bool> ReadLine(std::string* line, size_t max, bool* newline) {
    line->clear();
    *newline = false;
    if (!continuing_) ++line_number_;
    while (true) {
      if (pos_ == end_) {
        if (eof_) {
          continuing_ = false;
          return !line->empty();
        }
        CART_RETURN_IF_ERROR(Fill());
        continue;
      }
      const size_t room = max - line->size();
      const size_t avail = std::min(end_ - pos_, room);
      const char* start = buffer_.data() + pos_;
      const void* nl = std::memchr(start, '\n', avail);
      if (nl != nullptr) {
        const size_t n = static_cast<const char*>(nl) - start;
        line->append(start, n);
        pos_ += n + 1;
        *newline = true;
        continuing_ = false;
        return true;
      }
      line->append(start, avail);
      pos_ += avail;
      if (line->size() >= max) {
        continuing_ = true;
        return true;
      }
    }
  }

  // Up to n decompressed bytes from the start, without consuming them.
  absl::StatusOr<std::string> Peek(size_t n) {
    while (end_ - pos_ < n && !eof_) CART_RETURN_IF_ERROR(Fill());
    return std::string(buffer_.data() + pos_, std::min(n, end_ - pos_));
  }

  int64_t line_number() const { return line_number_; }
  uint64_t bytes_consumed() const {
    const z_off_t off = gzoffset(file_);
    return off < 0 ? 0 : static_cast<uint64_t>(off);
  }
  uint64_t file_bytes() const { return file_bytes_; }
  // The file's content (uncompressed) handed out so far, and its size: exact for a plain file,
  // for gzip scaled from the compression ratio of what was read so far.
  uint64_t content_consumed() const { return read_total_ - (end_ - pos_); }
  uint64_t content_total() const {
    if (gzip_isize_ < 0) return file_bytes_;
    // The gzip trailer holds the size modulo 2^32; the compression ratio seen so far says
    // which multiple of 2^32 to add (none below 4 GiB, where the trailer is exact).
    const z_off_t off = gzoffset(file_);
    double ratio = static_cast<double>(file_bytes_);
    if (off > 0 && read_total_ > 0) ratio *= static_cast<double>(read_total_) / off;
    const double wraps = std::round((ratio - static_cast<double>(gzip_isize_)) / 4294967296.0);
    return static_cast<uint64_t>(gzip_isize_) +
           static_cast<uint64_t>(std::max(0.0, wraps)) * (uint64_t{1} << 32);
  }
  const std::string& path() const { return path_; }

 private:
  LineSource(std::string path, gzFile f) : path_(std::move(path)), file_(f) {}

  absl::Status Fill() {
    if (pos_ > 0) {
      buffer_.erase(buffer_.begin(), buffer_.begin() + pos_);
      end_ -= pos_;
      pos_ = 0;
    }
    const size_t chunk = 1 << 20;
    buffer_.resize(end_ + chunk);
    const int n = gzread(file_, buffer_.data() + end_, static_cast<unsigned>(chunk));
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(file_, &errnum);
      return absl::DataLossError(StrCat(path_, ": cannot decompress near line ", line_number_, ": ",
                                        msg == nullptr ? "zlib error" : msg));
    }
    if (n == 0) {
      int errnum = 0;
      const char* msg = gzerror(file_, &errnum);
      if (errnum != Z_OK && errnum != Z_BUF_ERROR) {
        return absl::DataLossError(StrCat(path_, ": corrupt gzip stream: ", msg));
      }
      // zlib reports a truncated gzip stream as Z_BUF_ERROR at the end.
      if (errnum == Z_BUF_ERROR) {
        return absl::DataLossError(StrCat(path_, ": truncated gzip stream: ", msg));
      }
      eof_ = true;
    }
    end_ += static_cast<size_t>(n);
    read_total_ += static_cast<uint64_t>(n);
    buffer_.resize(end_);
    return absl::OkStatus();
  }

  std::string path_;
  gzFile file_;
  uint64_t file_bytes_ = 0;
  std::vector<char> buffer_;
  size_t pos_ = 0, end_ = 0;
  uint64_t read_total_ = 0;  // content bytes read into buffer_ in all
  int64_t gzip_isize_ = -1;  // a gzip file's trailer size (mod 2^32); -1 for a plain file
  bool eof_ = false;
  bool continuing_ = false;
  int64_t line_number_ = 0;
};

class ReaderBase : public DocumentReader {
 public:
  ReaderBase(std::unique_ptr<LineSource> src, CorpusFormat format)
      : src_(std::move(src)), format_(format) {}
  CorpusFormat format() const override { return format_; }
  uint64_t bytes_consumed() const override { return src_->bytes_consumed(); }
  uint64_t file_bytes() const override { return src_->file_bytes(); }
  uint64_t content_consumed() const override { return src_->content_consumed(); }
  uint64_t content_total() const override { return src_->content_total(); }

 protected:
  std::unique_ptr<LineSource> src_;
  CorpusFormat format_;
  std::string line_;
};

// The whole file is one document, yielded in pieces of about kMaxPieceBytes cut after a newline.
class TextReader : public ReaderBase {
 public:
  using ReaderBase::ReaderBase;
  absl::StatusOr<bool> Next(DocumentPiece* piece) override {
    if (done_) return false;
    piece->text.clear();
    piece->first = first_;
    piece->line = src_->line_number() + 1;
    bool newline = false;
    while (piece->text.size() < kMaxPieceBytes) {
      CART_ASSIGN_OR_RETURN(bool got, src_->ReadLine(&line_, kMaxPieceBytes, &newline));
      if (!got) {
        done_ = true;
        break;
      }
      piece->text += line_;
      if (newline) piece->text += '\n';
    }
    if (done_) {
      // A trailing piece may be empty when the file ended right at a piece boundary.
      if (piece->text.empty() && first_) return false;
      piece->last = true;
    } else {
      piece->last = false;
    }
    if (piece->text.empty() && !piece->last) return Next(piece);
    first_ = false;
    return true;
  }

 private:
  bool first_ = true;
  bool done_ = false;
};

class LinesReader : public ReaderBase {
 public:
  using ReaderBase::ReaderBase;
  absl::StatusOr<bool> Next(DocumentPiece* piece) override {
    while (true) {
      bool newline = false;
      const bool first = !continuing_;
      CART_ASSIGN_OR_RETURN(bool got, src_->ReadLine(&line_, kMaxPieceBytes, &newline));
      if (!got) return false;
      continuing_ = !newline && line_.size() >= kMaxPieceBytes;
      if (!line_.empty() && line_.back() == '\r' && !continuing_) line_.pop_back();
      if (first && Trim(line_).empty() && !continuing_) continue;
      piece->text = line_;
      piece->first = first;
      piece->last = !continuing_;
      piece->line = src_->line_number();
      return true;
    }
  }

 private:
  bool continuing_ = false;
};

// Documents separated by "<|endoftext|>" anywhere in the text (normally on a line of its own).
// A marker cut in two by a line longer than kMaxPieceBytes is not seen.
class TinyStoriesReader : public ReaderBase {
 public:
  using ReaderBase::ReaderBase;
  absl::StatusOr<bool> Next(DocumentPiece* piece) override {
    while (ready_.empty() && !eof_) {
      bool newline = false;
      CART_ASSIGN_OR_RETURN(bool got, src_->ReadLine(&line_, kMaxPieceBytes, &newline));
      if (!got) {
        eof_ = true;
        Flush(/*end=*/true);
        break;
      }
      std::string_view rest = line_;
      for (size_t m; (m = rest.find(kEndOfText)) != std::string_view::npos;) {
        Add(rest.substr(0, m));
        Flush(/*end=*/true);
        rest.remove_prefix(m + sizeof(kEndOfText) - 1);
      }
      Add(rest);
      if (newline) Add("\n");
    }
    if (ready_.empty()) return false;
    *piece = std::move(ready_.front());
    ready_.pop_front();
    return true;
  }

 private:
  void Add(std::string_view text) {
    if (text.empty()) return;
    // A document starts (for its line number) at its first non-blank text.
    if (!open_ && !has_text_) {
      doc_line_ = src_->line_number();
      has_text_ = !Trim(text).empty();
    }
    doc_.append(text.data(), text.size());
    if (doc_.size() >= kMaxPieceBytes) Flush(/*end=*/false);
  }

  // Queues the accumulated text as a piece; `end` closes the document. Leading whitespace of a
  // document and trailing whitespace of its last piece are trimmed; nothing is queued for a
  // document that is only whitespace.
  void Flush(bool end) {
    std::string_view text = doc_;
    if (!open_) {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
        text.remove_prefix(1);
      }
    }
    if (end) {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
        text.remove_suffix(1);
      }
    }
    if (!text.empty() || (end && open_)) {
      DocumentPiece p;
      p.text.assign(text.data(), text.size());
      p.first = !open_;
      p.last = end;
      p.line = doc_line_;
      ready_.push_back(std::move(p));
      open_ = !end;
    }
    doc_.clear();
    has_text_ = false;
  }

  std::string doc_;
  int64_t doc_line_ = 0;
  bool has_text_ = false;  // doc_ holds more than whitespace
  bool open_ = false;      // a piece of the current document was queued already
  bool eof_ = false;
  std::deque<DocumentPiece> ready_;
};

class JsonlReader : public ReaderBase {
 public:
  JsonlReader(std::unique_ptr<LineSource> src, std::string field)
      : ReaderBase(std::move(src), CorpusFormat::kJsonl), field_(std::move(field)) {}

  absl::StatusOr<bool> Next(DocumentPiece* piece) override {
    while (true) {
      bool newline = false;
      CART_ASSIGN_OR_RETURN(bool got, src_->ReadLine(&line_, kMaxJsonLineBytes, &newline));
      if (!got) return false;
      const int64_t line = src_->line_number();
      if (!newline && line_.size() >= kMaxJsonLineBytes) {
        return absl::InvalidArgumentError(
            StrCat(src_->path(), ":", line, ": line longer than 1 GiB; not JSON Lines?"));
      }
      if (Trim(line_).empty()) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line_);
      } catch (const nlohmann::json::parse_error& e) {
        return absl::InvalidArgumentError(
            StrCat(src_->path(), ":", line, ": invalid JSON (", e.what(), ")"));
      }
      if (!j.is_object()) {
        return absl::InvalidArgumentError(
            StrCat(src_->path(), ":", line, ": expected a JSON object, got ", j.type_name()));
      }
      auto it = j.find(field_);
      if (it == j.end()) {
        return absl::InvalidArgumentError(
            StrCat(src_->path(), ":", line, ": no \"", field_,
                   "\" field (the field holding the document; choose another with --text-field)"));
      }
      if (!it->is_string()) {
        return absl::InvalidArgumentError(StrCat(src_->path(), ":", line, ": field \"", field_,
                                                 "\" is a ", it->type_name(),
                                                 "; expected a string"));
      }
      piece->text = it->get<std::string>();
      if (piece->text.empty()) continue;
      piece->first = piece->last = true;
      piece->line = line;
      return true;
    }
  }

 private:
  std::string field_;
};

absl::StatusOr<CorpusFormat> FormatFromContent(LineSource& src) {
  CART_ASSIGN_OR_RETURN(std::string head, src.Peek(kSniffBytes));
  if (head.compare(0, 4, "PAR1") == 0) return CorpusFormat::kParquet;
  if (head.find(kEndOfText) != std::string::npos) return CorpusFormat::kTinyStories;
  std::string_view first = head;
  first = first.substr(0, first.find('\n'));
  first = Trim(first);
  if (!first.empty() && first.front() == '{') {
    nlohmann::json j = nlohmann::json::parse(first, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.is_object()) return CorpusFormat::kJsonl;
  }
  return CorpusFormat::kText;
}

absl::StatusOr<CorpusFormat> FormatFromName(const std::string& path) {
  std::string name = ToLower(std::filesystem::path(path).filename().string());
  if (EndsWith(name, ".gz")) name.resize(name.size() - 3);
  if (EndsWith(name, ".parquet")) return CorpusFormat::kParquet;
  if (EndsWith(name, ".jsonl") || EndsWith(name, ".ndjson") || EndsWith(name, ".json")) {
    return CorpusFormat::kJsonl;
  }
  return CorpusFormat::kAuto;
}

}  // namespace

std::string CorpusFormatName(CorpusFormat format) {
  switch (format) {
    case CorpusFormat::kAuto:
      return "auto";
    case CorpusFormat::kText:
      return "text";
    case CorpusFormat::kLines:
      return "lines";
    case CorpusFormat::kTinyStories:
      return "tinystories";
    case CorpusFormat::kJsonl:
      return "jsonl";
    case CorpusFormat::kParquet:
      return "parquet";
  }
  return "?";
}

absl::StatusOr<CorpusFormat> ParseCorpusFormat(std::string_view name) {
  for (CorpusFormat f :
       {CorpusFormat::kAuto, CorpusFormat::kText, CorpusFormat::kLines, CorpusFormat::kTinyStories,
        CorpusFormat::kJsonl, CorpusFormat::kParquet}) {
    if (name == CorpusFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(
      StrCat("unknown corpus format \"", name,
             "\"; allowed: auto, text, lines, tinystories, jsonl, parquet"));
}

absl::StatusOr<std::vector<CorpusInput>> ExpandCorpusInputs(
    const std::vector<CorpusInput>& inputs) {
  std::vector<CorpusInput> out;
  for (const CorpusInput& in : inputs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(in.path, ec)) {
      out.push_back(in);
      continue;
    }
    std::vector<std::string> shards;
    for (auto it = std::filesystem::recursive_directory_iterator(in.path, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) &&
          EndsWith(ToLower(it->path().filename().string()), ".parquet")) {
        shards.push_back(it->path().string());
      }
    }
    if (ec) return absl::InvalidArgumentError(StrCat("input ", in.path, ": ", ec.message()));
    if (shards.empty()) {
      return absl::InvalidArgumentError(
          StrCat("input ", in.path,
                 " is a directory with no .parquet file in it; give files, or a "
                 "directory of Parquet shards"));
    }
    std::sort(shards.begin(), shards.end());
    for (std::string& shard : shards) {
      CorpusInput one = in;
      one.path = std::move(shard);
      out.push_back(std::move(one));
    }
  }
  return out;
}

absl::StatusOr<CorpusFormat> DetectCorpusFormat(const std::string& path) {
  CART_ASSIGN_OR_RETURN(CorpusFormat by_name, FormatFromName(path));
  CART_ASSIGN_OR_RETURN(std::unique_ptr<LineSource> src, LineSource::Open(path));
  if (by_name != CorpusFormat::kAuto) return by_name;
  return FormatFromContent(*src);
}

absl::StatusOr<std::unique_ptr<DocumentReader>> DocumentReader::Open(const CorpusInput& input) {
  CART_ASSIGN_OR_RETURN(std::unique_ptr<LineSource> src, LineSource::Open(input.path));
  CorpusFormat format = input.format;
  if (format == CorpusFormat::kAuto) {
    CART_ASSIGN_OR_RETURN(format, FormatFromName(input.path));
    if (format == CorpusFormat::kAuto) {
      CART_ASSIGN_OR_RETURN(format, FormatFromContent(*src));
    }
  }
  if (format == CorpusFormat::kParquet) return internal::OpenParquetReader(input);
  switch (format) {
    case CorpusFormat::kText:
      return std::unique_ptr<DocumentReader>(new TextReader(std::move(src), format));
    case CorpusFormat::kLines:
      return std::unique_ptr<DocumentReader>(new LinesReader(std::move(src), format));
    case CorpusFormat::kTinyStories:
      return std::unique_ptr<DocumentReader>(new TinyStoriesReader(std::move(src), format));
    case CorpusFormat::kJsonl:
      if (input.text_field.empty()) {
        return absl::InvalidArgumentError("the JSON Lines text field name must not be empty");
      }
      return std::unique_ptr<DocumentReader>(new JsonlReader(std::move(src), input.text_field));
    case CorpusFormat::kAuto:
    case CorpusFormat::kParquet:
      break;
  }
  return absl::InternalError("unresolved corpus format");
}

}  // namespace cart::data
