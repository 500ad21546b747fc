// libcart_parquet.so: Apache Arrow's Parquet reader behind parquet_api.h. Everything Arrow throws
// or returns becomes an error string here; nothing of Arrow crosses the interface.

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/util/config.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/metadata.h>

#include <exception>

#include "data/internal/parquet_api.h"

namespace cart::data::internal {
namespace {

class Column final : public ParquetColumnApi {
 public:
  Column(std::unique_ptr<parquet::arrow::FileReader> reader, int leaf)
      : reader_(std::move(reader)), leaf_(leaf) {
    metadata_ = reader_->parquet_reader()->metadata();
  }

  bool Next(int64_t max_rows, std::vector<std::string>* texts, int64_t* nulls,
            std::string* error) override {
    *nulls = 0;
    try {
      while (current_ == nullptr || offset_ >= current_->length()) {
        if (!NextBatch(error)) return false;
      }
      const int64_t end = std::min(current_->length(), offset_ + max_rows);
      for (; offset_ < end; ++offset_) {
        if (current_->IsNull(offset_)) {
          ++*nulls;
          continue;
        }
        texts->push_back(Value(offset_));
      }
      return true;
    } catch (const std::exception& e) {
      *error = e.what();
      return false;
    }
  }

  int64_t rows() const override { return metadata_->num_rows(); }
  int row_groups() const override { return metadata_->num_row_groups(); }
  uint64_t bytes_read() const override { return bytes_read_; }

 private:
  // The next record batch of the column, a row group's worth at a time; false at the end or on an
  // error (*error set).
  bool NextBatch(std::string* error) {
    current_ = nullptr;
    offset_ = 0;
    while (batches_ == nullptr) {
      if (next_group_ >= metadata_->num_row_groups()) return false;
      const int group = next_group_++;
      bytes_read_ += static_cast<uint64_t>(metadata_->RowGroup(group)->total_compressed_size());
      auto opened = reader_->GetRecordBatchReader({group}, {leaf_});
      if (!opened.ok()) {
        *error = "row group " + std::to_string(group) + ": " + opened.status().ToString();
        return false;
      }
      batches_ = std::move(*opened);
      group_ = group;
    }
    std::shared_ptr<arrow::RecordBatch> batch;
    arrow::Status read = batches_->ReadNext(&batch);
    if (!read.ok()) {
      *error = "row group " + std::to_string(group_) + ": " + read.ToString();
      return false;
    }
    if (batch == nullptr) {  // this row group is done
      batches_ = nullptr;
      return NextBatch(error);
    }
    current_ = batch->column(0);
    return true;
  }

  std::string Value(int64_t i) const {
    switch (current_->type_id()) {
      case arrow::Type::STRING:
        return std::string(static_cast<const arrow::StringArray&>(*current_).GetView(i));
      case arrow::Type::LARGE_STRING:
        return std::string(static_cast<const arrow::LargeStringArray&>(*current_).GetView(i));
      case arrow::Type::STRING_VIEW:
        return std::string(static_cast<const arrow::StringViewArray&>(*current_).GetView(i));
      default:
        return std::string();  // Open admits string types only
    }
  }

  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::shared_ptr<parquet::FileMetaData> metadata_;
  const int leaf_;
  int next_group_ = 0;
  int group_ = 0;
  std::unique_ptr<arrow::RecordBatchReader> batches_;
  std::shared_ptr<arrow::Array> current_;
  int64_t offset_ = 0;
  uint64_t bytes_read_ = 0;
};

class Library final : public ParquetLibraryApi {
 public:
  std::unique_ptr<ParquetColumnApi> Open(const std::string& path, const std::string& column,
                                         std::string* error) override {
    try {
      auto file = arrow::io::ReadableFile::Open(path);
      if (!file.ok()) {
        *error = file.status().ToString();
        return nullptr;
      }
      // Pages are read through a 1 MiB buffered stream and decoded 128 rows at a time, rather
      // than a row group's whole column chunk read ahead: memory follows the batch, not the
      // row group (Hugging Face shards hold row groups of hundreds of MB).
      parquet::ReaderProperties properties = parquet::default_reader_properties();
      properties.enable_buffered_stream();
      properties.set_buffer_size(1 << 20);
      parquet::ArrowReaderProperties arrow_properties;
      arrow_properties.set_pre_buffer(false);
      arrow_properties.set_batch_size(128);
      parquet::arrow::FileReaderBuilder builder;
      arrow::Status opened = builder.Open(*file, properties);
      if (!opened.ok()) {
        *error = "not a Parquet file, or truncated (" + opened.ToString() + ")";
        return nullptr;
      }
      auto reader = builder.properties(arrow_properties)->Build();
      if (!reader.ok()) {
        *error = "not a Parquet file, or truncated (" + reader.status().ToString() + ")";
        return nullptr;
      }
      std::shared_ptr<arrow::Schema> schema;
      arrow::Status got = (*reader)->GetSchema(&schema);
      if (!got.ok()) {
        *error = "unreadable schema (" + got.ToString() + ")";
        return nullptr;
      }
      const int field = schema->GetFieldIndex(column);
      if (field < 0) {
        std::string names;
        for (const auto& f : schema->fields()) names += (names.empty() ? "" : ", ") + f->name();
        *error = "no column '" + column + "' (columns: " + names + "; choose with --text-field)";
        return nullptr;
      }
      const auto type = schema->field(field)->type()->id();
      if (type != arrow::Type::STRING && type != arrow::Type::LARGE_STRING &&
          type != arrow::Type::STRING_VIEW) {
        *error = "column '" + column + "' holds " + schema->field(field)->type()->ToString() +
                 ", not text";
        return nullptr;
      }
      const int leaf = (*reader)->parquet_reader()->metadata()->schema()->ColumnIndex(column);
      if (leaf < 0) {
        *error = "column '" + column + "' is nested; give a top-level text column";
        return nullptr;
      }
      return std::make_unique<Column>(std::move(*reader), leaf);
    } catch (const std::exception& e) {
      *error = std::string("not a Parquet file, or truncated (") + e.what() + ")";
      return nullptr;
    }
  }

  std::string arrow_version() const override { return ARROW_VERSION_STRING; }
};

}  // namespace
}  // namespace cart::data::internal

extern "C" __attribute__((visibility("default"))) cart::data::internal::ParquetLibraryApi*
CartParquetLibrary() {
  static cart::data::internal::Library library;
  return &library;
}
