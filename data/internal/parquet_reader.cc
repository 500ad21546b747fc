#include "data/internal/parquet_reader.h"

#include <sys/stat.h>

#include <deque>
#include <string>
#include <vector>

#include "common/strings.h"
#include "data/internal/module_loader.h"
#include "data/internal/parquet_api.h"

namespace cart::data::internal {
namespace {

// libcart_parquet.so, opened once per process (module_loader.h says where it looks).
ParquetLibraryApi* Library(std::string* error) {
#ifdef CART_PARQUET_MODULE
  return LoadModule<ParquetLibraryApi>(
      {"libcart_parquet.so", "CART_PARQUET_LIB", CART_PARQUET_MODULE, "CartParquetLibrary",
       "Parquet support"},
      error);
#else
  *error = "this build has no Parquet support (CMake found no Apache Arrow)";
  return nullptr;
#endif
}

class ParquetReader final : public DocumentReader {
 public:
  ParquetReader(std::string path, std::unique_ptr<ParquetColumnApi> column, uint64_t file_bytes)
      : path_(std::move(path)), column_(std::move(column)), file_bytes_(file_bytes) {}

  absl::StatusOr<bool> Next(DocumentPiece* piece) override {
    while (batch_.empty()) {
      std::vector<std::string> texts;
      int64_t nulls = 0;
      std::string error;
      const int64_t first_row = row_ + 1;
      if (!column_->Next(kBatchRows, &texts, &nulls, &error)) {
        if (!error.empty()) return absl::InvalidArgumentError(StrCat(path_, ": ", error));
        return false;
      }
      // Row numbers count every row, null ones included, so an error can point at a row.
      row_ += static_cast<int64_t>(texts.size()) + nulls;
      int64_t at = first_row;
      for (std::string& text : texts) {
        if (!text.empty()) batch_.push_back({std::move(text), true, true, at});
        ++at;
      }
    }
    *piece = std::move(batch_.front());
    batch_.pop_front();
    return true;
  }

  CorpusFormat format() const override { return CorpusFormat::kParquet; }
  uint64_t bytes_consumed() const override {
    return std::min<uint64_t>(column_->bytes_read(), file_bytes_);
  }
  uint64_t file_bytes() const override { return file_bytes_; }
  int64_t rows_total() const override { return column_->rows(); }

 private:
  static constexpr int64_t kBatchRows = 128;
  const std::string path_;
  std::unique_ptr<ParquetColumnApi> column_;
  const uint64_t file_bytes_;
  int64_t row_ = 0;  // rows read so far
  std::deque<DocumentPiece> batch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DocumentReader>> OpenParquetReader(const CorpusInput& input) {
  struct stat st;
  if (::stat(input.path.c_str(), &st) != 0) {
    return absl::NotFoundError(StrCat("input ", input.path, " does not exist"));
  }
  std::string error;
  ParquetLibraryApi* library = Library(&error);
  if (library == nullptr) {
    return absl::UnimplementedError(StrCat(input.path, ": ", error, ". ", kParquetConversionHint));
  }
  if (input.text_field.empty()) {
    return absl::InvalidArgumentError("the Parquet text column name must not be empty");
  }
  std::unique_ptr<ParquetColumnApi> column = library->Open(input.path, input.text_field, &error);
  if (column == nullptr) return absl::InvalidArgumentError(StrCat(input.path, ": ", error));
  return std::unique_ptr<DocumentReader>(
      new ParquetReader(input.path, std::move(column), static_cast<uint64_t>(st.st_size)));
}

bool ParquetAvailable(std::string* version) {
  std::string error;
  ParquetLibraryApi* library = Library(&error);
  *version = library != nullptr ? StrCat("Apache Arrow ", library->arrow_version()) : error;
  return library != nullptr;
}

}  // namespace cart::data::internal
